package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// reloadable builds a server on store; the second value is the same server
// seen as what reloads it.
func reloadable(t *testing.T, store limiter.Store, edit ...func(*options)) (*server, *server) {
	t.Helper()
	s := newServer(t, store, edit...)
	return s, s
}

func withLimit(p limiter.Policy, limit int64) limiter.Policy {
	p.Limit = limit
	return p
}

// v1For sends POST /v1/check for policy and key.
func (s *server) v1For(policy, key string) *httptest.ResponseRecorder {
	s.t.Helper()
	return s.v1(fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key))
}

func TestReloadRaisesALimit(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s, r := reloadable(t, sk.open(t))
			for range 3 {
				require.Equal(t, http.StatusOK, s.ping("raise").Code)
			}
			require.Equal(t, http.StatusTooManyRequests, s.ping("raise").Code)

			require.NoError(t, r.Reload([]limiter.Policy{withLimit(pingPolicy, 5), checkPolicy}, []string{"ping"}, []string{"check"}))
			w := s.ping("raise")
			require.Equal(t, http.StatusOK, w.Code, "the raised limit takes effect at once")
			body := decode(t, w)
			assert.Equal(t, 5.0, body["limit"])
			assert.Equal(t, 5.0, body["count"], "the counts made before the reload still count")
			assert.Equal(t, `"ping";q=5;w=60`, w.Header().Get("RateLimit-Policy"))
			assert.Equal(t, http.StatusTooManyRequests, s.ping("raise").Code, "6 > 5")
			assert.Contains(t, s.metrics(), `tollgate_decisions_total{policy="ping",result="allowed"} 4`+"\n",
				"the policy's counters go on across the reload")
		})
	}
}

func TestReloadAddsAndRemovesPolicies(t *testing.T) {
	s, r := reloadable(t, openMemory(t))
	assertProblem(t, s.v1For("api", "k"), http.StatusNotFound, "not-found")

	api := limiter.Policy{Name: "api", Algorithm: limiter.TokenBucket, Limit: 2, Window: time.Second}
	require.NoError(t, r.Reload([]limiter.Policy{pingPolicy, checkPolicy, api}, []string{"ping"}, []string{"check"}))
	assert.Equal(t, http.StatusOK, s.v1For("api", "k").Code)
	require.NoError(t, r.Reload([]limiter.Policy{pingPolicy, checkPolicy, api}, []string{"ping", "api"}, []string{"check"}))
	assert.Equal(t, `"ping";q=3;w=60, "api";q=2;w=1`, s.ping("both").Header().Get("RateLimit-Policy"), "the route lists its new policy")
	assertProblem(t, s.v1For("api", "k"), http.StatusForbidden, "forbidden")

	require.NoError(t, r.Reload([]limiter.Policy{pingPolicy, checkPolicy}, []string{"ping"}, []string{"check"}))
	assertProblem(t, s.v1For("api", "k"), http.StatusNotFound, "not-found")
}

func TestReloadRefusesABadSetAndKeepsTheOld(t *testing.T) {
	s, r := reloadable(t, openMemory(t))
	tests := []struct {
		name        string
		policies    []limiter.Policy
		ping, check []string
		want        string
	}{
		{"invalid policy", []limiter.Policy{withLimit(pingPolicy, 0), checkPolicy}, []string{"ping"}, []string{"check"}, "limit"},
		{"unknown policy in a route", []limiter.Policy{pingPolicy, checkPolicy}, []string{"ping"}, []string{"nope"}, `unknown policy "nope"`},
		{"route without policy", []limiter.Policy{pingPolicy, checkPolicy}, nil, []string{"check"}, "route ping has no policy"},
		{"duplicate", []limiter.Policy{pingPolicy, pingPolicy, checkPolicy}, []string{"ping"}, []string{"check"}, "given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Reload(tt.policies, tt.ping, tt.check)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.True(t, strings.HasPrefix(err.Error(), "snapshot: "), err.Error())
		})
	}
	for i := 1; i <= 3; i++ {
		assert.Equal(t, float64(i), countOf(t, s.ping("kept")))
	}
	assert.Equal(t, http.StatusTooManyRequests, s.ping("kept").Code, "the old limit of 3 still holds")

	_, err := snapshot.New(snapshot.Parts{Policies: []limiter.Policy{pingPolicy}, PingRoute: []string{"ping"}, CheckRoute: []string{"ping"}})
	require.Error(t, err, "a snapshot without a store")
}

// TestReloadUnderConcurrentRequests swaps between two limits while many
// goroutines decide. No request fails, each answer is consistent with one
// policy set (its RateLimit-Policy names the limit its body reports), and
// every key's count goes up by exactly one per request across the reloads.
func TestReloadUnderConcurrentRequests(t *testing.T) {
	const goroutines, each = 8, 150
	limits := [2]int64{1_000_000, 2_000_000}
	api := limiter.Policy{Name: "api", Algorithm: limiter.FixedWindow, Limit: limits[0], Window: time.Hour}
	s, r := reloadable(t, openMemory(t), func(o *options) { o.Policies = append(o.Policies, api) })

	var wg sync.WaitGroup
	done := make(chan struct{})
	reloaded := 0
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			err := r.Reload([]limiter.Policy{pingPolicy, checkPolicy, withLimit(api, limits[i%2])}, []string{"ping"}, []string{"check"})
			if !assert.NoError(t, err) {
				return
			}
			reloaded++
		}
	})
	var clients sync.WaitGroup
	for g := range goroutines {
		clients.Go(func() {
			key := "c" + strconv.Itoa(g)
			for i := 1; i <= each; i++ {
				w := s.v1For("api", key)
				if !assert.Equal(t, http.StatusOK, w.Code, w.Body.String()) {
					return
				}
				body := decode(t, w)
				limit := int64(body["limit"].(float64))
				assert.Contains(t, limits, limit)
				assert.Equal(t, fmt.Sprintf(`"api";q=%d;w=3600`, limit), w.Header().Get("RateLimit-Policy"), "one set per request")
				assert.Equal(t, float64(i), body["count"], "%s request %d", key, i)
			}
		})
	}
	clients.Wait()
	close(done)
	wg.Wait()
	assert.Positive(t, reloaded)
	assert.Contains(t, s.metrics(), fmt.Sprintf(`tollgate_decisions_total{policy="api",result="allowed"} %d`+"\n", goroutines*each))
}

// TestInFlightRequestFinishesOnItsPolicies holds a request inside its
// handler (its body still arriving) across a reload: it is decided with the
// policies it started with, the next request with the new ones.
func TestInFlightRequestFinishesOnItsPolicies(t *testing.T) {
	api := limiter.Policy{Name: "api", Algorithm: limiter.FixedWindow, Limit: 7, Window: time.Minute}
	s, r := reloadable(t, openMemory(t), func(o *options) { o.Policies = append(o.Policies, api) })
	srv := httptest.NewServer(s.engine)
	t.Cleanup(srv.Close)

	// With Expect: 100-continue the client sends the body only once the
	// handler reads it, so the first Write returns once the request is in.
	body, bodyW := io.Pipe()
	rq, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/check", body)
	require.NoError(t, err)
	rq.Header.Set("Expect", "100-continue")
	full := `{"policy":"api","key":"inflight"}`
	rq.ContentLength = int64(len(full))
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	t.Cleanup(client.CloseIdleConnections)
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := client.Do(rq)
		assert.NoError(t, err)
		answered <- resp
	}()
	_, err = bodyW.Write([]byte(full[:10]))
	require.NoError(t, err)

	require.NoError(t, r.Reload([]limiter.Policy{pingPolicy, checkPolicy, withLimit(api, 9)}, []string{"ping"}, []string{"check"}))
	_, err = bodyW.Write([]byte(full[10:]))
	require.NoError(t, err)
	require.NoError(t, bodyW.Close())
	resp := <-answered
	require.NotNil(t, resp)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"api";q=7;w=60`, resp.Header.Get("RateLimit-Policy"), "decided on the policies it started with")

	w := s.v1For("api", "inflight")
	assert.Equal(t, `"api";q=9;w=60`, w.Header().Get("RateLimit-Policy"), "the next request sees the reload")
	assert.Equal(t, 2.0, decode(t, w)["count"])
}
