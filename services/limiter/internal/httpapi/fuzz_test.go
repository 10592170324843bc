package httpapi_test

import (
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// userIDSeeds are the interesting user ids: the ATK cases and the edges.
var userIDSeeds = []string{"1", "42", "007", "0", "000", "-1", "abc", "", " 1", "1 ", "+1", "1.0", "1e3", "٣",
	"9223372036854775807", "9223372036854775808", "00009223372036854775807", "18446744073709551616", "0x10"}

// wantUserID is the reference: all ASCII digits, value in 1..MaxInt64.
func wantUserID(s string) (int64, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() <= 0 || !n.IsInt64() {
		return 0, false
	}
	return n.Int64(), true
}

func FuzzParseUserID(f *testing.F) {
	for _, s := range userIDSeeds {
		f.Add(s)
	}
	base := newServer(f, openMemory(f))
	f.Fuzz(func(t *testing.T, raw string) {
		s := base.with(t)
		want, ok := wantUserID(raw)
		n, canon, err := httpapi.ParseUserID(raw)
		if !ok {
			var ie *httpapi.InputError
			require.ErrorAs(t, err, &ie)
		} else {
			require.NoError(t, err)
			assert.Equal(t, want, n)
			assert.Equal(t, strconv.FormatInt(want, 10), canon)
		}
		w := s.do(req{method: http.MethodPost, target: "/rate/check", body: `{"endpoint":"/f"}`, header: map[string]string{"X-User-Id": raw}})
		if ok {
			assert.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, w.Code, w.Body.String())
		} else {
			assert.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
		}
	})
}

// validEndpoint is the reference for an endpoint: a UTF-8 string of 1..128
// characters with no U+FFFD.
func validEndpoint(s string) bool {
	n := utf8.RuneCountInString(s)
	return n >= 1 && n <= 128 && utf8.ValidString(s) && !strings.ContainsRune(s, utf8.RuneError)
}

func FuzzCheckBody(f *testing.F) {
	for _, b := range []string{
		`{"endpoint":"/api"}`, `{"endpoint":""}`, `{}`, ``, `{`, `null`, `[]`, `{"endpoint":1}`,
		`{"endpoint":"` + strings.Repeat("a", 129) + `"}`, `{"endpoint":"'; DROP TABLE rate_events; --"}`,
		`{"endpoint":"/a"} trailing`, "{\"endpoint\":\"\xff\"}", `{"endpoint":"\ud800"}`, `{"endpoint":"a","endpoint":"b"}`,
	} {
		f.Add(b)
	}
	base := newServer(f, openMemory(f))
	f.Fuzz(func(t *testing.T, body string) {
		s := base.with(t)
		w := s.do(req{method: http.MethodPost, target: "/rate/check", body: body, header: map[string]string{"X-User-Id": "3"}})
		require.Contains(t, []int{200, 400, 413, 422, 429}, w.Code, w.Body.String())
		if w.Code != http.StatusOK {
			assert.Equal(t, httplimit.ProblemContentType, w.Header().Get("Content-Type"))
			return
		}
		var in struct{ Endpoint string }
		require.NoError(t, json.Unmarshal([]byte(body), &in))
		assert.True(t, validEndpoint(in.Endpoint), "an allowed endpoint is valid: %q", in.Endpoint)
		assert.Equal(t, in.Endpoint, decode(t, w)["endpoint"])
	})
}

func FuzzV1CheckBody(f *testing.F) {
	for _, b := range []string{
		`{"policy":"api","key":"k"}`, `{"policy":"api","key":"k","cost":3}`, `{"policy":"api","key":"k","cost":4}`,
		`{"policy":"nope","key":"k"}`, `{"policy":"api"}`, `{"key":"k"}`, `{"policy":"api","key":"k","cost":-1}`,
		`{"policy":"api","key":"k","cost":1e309}`, `{"policy":"api","key":"k","cost":"2"}`, ``, `{`, `1`,
		`{"policy":"ping","key":"k"}`, `{"policy":"api","key":"k","key":"j"}`,
	} {
		f.Add(b)
	}
	base := newServer(f, openMemory(f), func(o *options) { o.Policies = append(o.Policies, apiPolicy) })
	f.Fuzz(func(t *testing.T, body string) {
		s := base.with(t)
		w := s.do(req{method: http.MethodPost, target: "/v1/check", body: body})
		require.Contains(t, []int{200, 400, 403, 404, 413, 422, 429}, w.Code, w.Body.String())
		if w.Code == http.StatusOK {
			b := decode(t, w)
			assert.Equal(t, true, b["allowed"])
			assert.Equal(t, "api", b["policy"], "the seed routes' policies are refused")
			assert.LessOrEqual(t, len(b["key"].(string)), limiter.MaxKeyLen)
		}
	})
}

func FuzzResetPathID(f *testing.F) {
	for _, s := range userIDSeeds {
		f.Add(s)
	}
	f.Add("1/2")
	f.Add("..")
	base := newServer(f, openMemory(f))
	f.Fuzz(func(t *testing.T, id string) {
		s := base.with(t)
		w := s.do(req{method: http.MethodDelete, target: "/rate/reset/" + url.PathEscape(id), header: map[string]string{"X-Admin-Key": adminKey}})
		if _, ok := wantUserID(id); ok {
			assert.Equal(t, http.StatusOK, w.Code, w.Body.String())
		} else {
			assertProblem(t, w, http.StatusNotFound, "not-found")
		}
		w = s.do(req{method: http.MethodDelete, target: "/rate/reset/" + url.PathEscape(id)})
		if !strings.Contains(id, "/") && id != "" {
			assertProblem(t, w, http.StatusForbidden, "forbidden")
		}
	})
}

func FuzzClientKey(f *testing.F) {
	for _, k := range []string{"alice", "", "a\xffb", strings.Repeat("k", 1024), strings.Repeat("k", 1025), "203.0.113.1", "\u00e9", "\ufffd", "a\x00b"} {
		f.Add(k)
	}
	base := newServer(f, openMemory(f))
	f.Fuzz(func(t *testing.T, key string) {
		s := base.with(t)
		r := httptestRequest(http.MethodGet, "/ping", "")
		r.Header["X-Client-Key"] = []string{key}
		w := serve(s, r)
		// The store key is "key:" and the header's value.
		valid := key == "" || (len(key) <= limiter.MaxKeyLen-len("key:") && utf8.ValidString(key) && !strings.ContainsRune(key, utf8.RuneError))
		if !valid {
			assertProblem(t, w, http.StatusBadRequest, "bad-request")
			return
		}
		require.True(t, slices.Contains([]int{http.StatusOK, http.StatusTooManyRequests}, w.Code), w.Body.String())
		if w.Code == http.StatusOK && key != "" {
			assert.Equal(t, key, decode(t, w)["key"])
		}
	})
}

// TestInputErrorsUnwrap keeps the parsers' errors typed.
func TestInputErrorsUnwrap(t *testing.T) {
	_, _, err := httpapi.ParseUserID("0")
	var ie *httpapi.InputError
	require.True(t, errors.As(err, &ie))
	assert.Equal(t, "user id must be greater than zero", ie.Detail())
	assert.Equal(t, "httpapi: user id must be greater than zero", err.Error())
	require.ErrorAs(t, httpapi.ValidateEndpoint(strings.Repeat("x", 129)), &ie)
	assert.Equal(t, "endpoint is longer than 128 characters", ie.Detail())
}
