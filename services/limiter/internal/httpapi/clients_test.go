package httpapi_test

// Issue 14: whose limit is it. Each test here failed on the code before
// the identity work; the comment above each says what was seen.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// X-Client-Key: 192.0.2.9 four times used to lock 192.0.2.9 out of /ping
// without it sending anything: header keys and peer addresses were one
// namespace.
func TestHeaderKeyCannotSpendAPeersBudget(t *testing.T) {
	s := newServer(t, openMemory(t))
	for range 4 {
		s.do(req{method: http.MethodGet, target: "/ping", remote: "192.0.2.1:1000", header: map[string]string{"X-Client-Key": "192.0.2.9"}})
	}
	w := s.do(req{method: http.MethodGet, target: "/ping", remote: "192.0.2.9:2000"})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	b := decode(t, w)
	assert.Equal(t, "192.0.2.9", b["key"])
	assert.Equal(t, 1.0, b["count"], "192.0.2.9's first request")

	// /status?key= reads the peer's counter for an address.
	w = s.do(req{method: http.MethodGet, target: "/status?key=192.0.2.9"})
	assert.Equal(t, 1.0, countOf(t, w))
	w = s.do(req{method: http.MethodGet, target: "/status?key=192.0.2.9&source=header"})
	assert.Equal(t, 4.0, countOf(t, w))
}

// POST /v1/check {"policy":"ping","key":...,"cost":3} used to be allowed:
// one request locked any client out of /ping.
func TestV1RefusesTheSeedRoutesPolicies(t *testing.T) {
	s := newServer(t, openMemory(t))
	for _, body := range []string{
		`{"policy":"ping","key":"192.0.2.9","cost":3}`,
		`{"policy":"ping","key":"peer:192.0.2.9","cost":3}`,
		`{"policy":"check","key":"777"}`,
	} {
		assertProblem(t, s.do(req{method: http.MethodPost, target: "/v1/check", body: body}), http.StatusForbidden, "forbidden")
	}
	w := s.do(req{method: http.MethodGet, target: "/ping", remote: "192.0.2.9:2000"})
	assert.Equal(t, 1.0, countOf(t, w))
}

// {"endpoint":"a","endpoint":"b"} used to count "b" silently (last wins);
// a gateway reading the first member would disagree.
func TestDuplicateMembersAreRefused(t *testing.T) {
	s := newServer(t, openMemory(t))
	w := s.do(req{method: http.MethodPost, target: "/rate/check", body: `{"endpoint":"a","endpoint":"b"}`, header: map[string]string{"X-User-Id": "42"}})
	assertProblem(t, w, http.StatusBadRequest, "bad-request")
	w = s.do(req{method: http.MethodPost, target: "/v1/check", body: `{"policy":"api","key":"k","cost":1,"cost":2}`})
	assertProblem(t, w, http.StatusBadRequest, "bad-request")
}

// NUL was accepted, stored and echoed; NFC and NFD spellings of one
// endpoint were two counters.
func TestEndpointsAreCanonical(t *testing.T) {
	s := newServer(t, openMemory(t))
	for _, ep := range []string{"a\x00b", "/orders\n", "\u0085x"} {
		assertProblem(t, s.check("42", ep), http.StatusUnprocessableEntity, "validation-failed")
	}
	assert.Equal(t, 1.0, countOf(t, s.check("42", "caf\u00e9")))
	assert.Equal(t, 2.0, countOf(t, s.check("42", "cafe\u0301")), "NFD is the same endpoint as NFC")
	w := s.rateStatus("42", "cafe\u0301")
	assert.Equal(t, 2.0, countOf(t, w))
}

// HEAD on a GET route answered 405.
func TestHeadWhereverGetIsServed(t *testing.T) {
	s := newServer(t, openMemory(t))
	for _, target := range []string{"/healthz", "/readyz", "/status?key=k", "/metrics"} {
		w := s.do(req{method: http.MethodHead, target: target})
		assert.Equal(t, http.StatusOK, w.Code, "HEAD %s", target)
	}
}

// The access log's client hash was an unkeyed truncated SHA-256: an IPv4
// address is reversed by trying all 2^32.
func TestLoggedClientHashIsKeyed(t *testing.T) {
	s := newServer(t, openMemory(t), func(o *options) { o.AccessLog = httpapi.AccessLogAll })
	require.Equal(t, http.StatusOK, s.do(req{method: http.MethodGet, target: "/ping", remote: "192.0.2.44:1"}).Code)
	logs := s.logs.String()
	require.Contains(t, logs, "client=")
	for _, k := range []string{"192.0.2.44", "peer:192.0.2.44"} {
		sum := sha256.Sum256([]byte(k))
		assert.NotContains(t, logs, hex.EncodeToString(sum[:8]), "the unkeyed digest of %q", k)
	}
}

// Wrong admin keys were answered at full speed with no throttling and no
// log line of their own.
func TestFailedAdminAttemptsAreThrottledAndLogged(t *testing.T) {
	s := newServer(t, openMemory(t))
	statuses := map[int]int{}
	for range 25 {
		w := s.do(req{method: http.MethodDelete, target: "/rate/reset/1", remote: "192.0.2.66:1", header: map[string]string{"X-Admin-Key": "wrong-key-guess-0000"}})
		statuses[w.Code]++
	}
	assert.Equal(t, map[int]int{http.StatusForbidden: 20, http.StatusTooManyRequests: 5}, statuses)
	w := s.do(req{method: http.MethodGet, target: "/admin/offenders", remote: "192.0.2.66:1", header: map[string]string{"X-Admin-Key": "wrong-key-guess-0001"}})
	assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
	assert.NotEmpty(t, w.Header().Get("Retry-After"))
	w = s.do(req{method: http.MethodDelete, target: "/rate/reset/1", remote: "192.0.2.67:1", header: map[string]string{"X-Admin-Key": "wrong-key-guess-0002"}})
	assert.Equal(t, http.StatusForbidden, w.Code, "another client is not throttled")
	assert.Equal(t, 21, strings.Count(s.logs.String(), "admin key refused"), "each counted wrong key, none of the throttled ones")
}

// 20 wrong keys a minute from an address the operator shared (a NAT, a
// proxy) made the right key answer 429: others' guesses locked the admin
// out. A valid key now always passes; wrong keys sent at once with it from
// that address are throttled exactly.
func TestValidAdminKeyPassesWhileItsAddressIsThrottled(t *testing.T) {
	s := newServer(t, openMemory(t))
	const guesses, admins = 100, 30
	var wg sync.WaitGroup
	type answer struct {
		admin  bool
		status int
	}
	answers := make(chan answer, guesses+admins)
	for i := range guesses + admins {
		wg.Go(func() {
			key := fmt.Sprintf("wrong-key-guess-%04d", i)
			if i < admins {
				key = adminKey
			}
			w := s.do(req{method: http.MethodDelete, target: "/rate/reset/" + strconv.Itoa(i+1), remote: "192.0.2.66:1", header: map[string]string{"X-Admin-Key": key}})
			answers <- answer{i < admins, w.Code}
		})
	}
	wg.Wait()
	close(answers)
	got := map[answer]int{}
	for a := range answers {
		got[a]++
	}
	assert.Equal(t, map[answer]int{{true, http.StatusOK}: admins, {false, http.StatusForbidden}: 20, {false, http.StatusTooManyRequests}: guesses - 20}, got,
		"every valid key passes; exactly 20 wrong ones are compared and refused, the rest throttled")
	w := s.do(req{method: http.MethodDelete, target: "/rate/reset/1", remote: "192.0.2.66:1", header: map[string]string{"X-Admin-Key": "wrong-key-guess-9999"}})
	assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
	w = s.do(req{method: http.MethodDelete, target: "/rate/reset/1", remote: "192.0.2.66:1"})
	assertProblem(t, w, http.StatusForbidden, "forbidden")
}
