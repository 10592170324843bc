package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

var ping = limiter.Policy{Name: "ping", Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Minute}

// TestHeadersAndRefusal walks one key through a fixed window on every store:
// the fields count down, the fourth request gets the service's 429 problem,
// and the next window starts afresh.
func TestHeadersAndRefusal(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			clock := limitertest.NewClock(t0)
			m, err := httplimit.New(sk.open(t), []limiter.Policy{ping}, httplimit.WithClock(clock))
			require.NoError(t, err)
			b := serve(t, m)
			steps := []struct {
				advance   time.Duration
				status    int
				rateLimit string
				remaining string
				reset     string
				retry     string
			}{
				{0, 200, `"ping";r=2;t=15`, "2", "15", ""},
				{5 * time.Second, 200, `"ping";r=1;t=10`, "1", "10", ""},
				{9*time.Second + 500*time.Millisecond, 200, `"ping";r=0;t=1`, "0", "1", ""},
				{0, 429, `"ping";r=0;t=1`, "0", "1", "1"},
				{500 * time.Millisecond, 200, `"ping";r=2;t=60`, "2", "60", ""}, // the next window
			}
			for i, st := range steps {
				clock.Advance(st.advance)
				a := get(t, b.url, nil)
				require.Equal(t, st.status, a.status, "step %d: %s", i, a.body)
				assert.Equal(t, `"ping";q=3;w=60`, a.header.Get("RateLimit-Policy"), "step %d", i)
				assert.Equal(t, st.rateLimit, a.header.Get("RateLimit"), "step %d", i)
				assert.Equal(t, "3", a.header.Get("X-RateLimit-Limit"), "step %d", i)
				assert.Equal(t, st.remaining, a.header.Get("X-RateLimit-Remaining"), "step %d", i)
				assert.Equal(t, st.reset, a.header.Get("X-RateLimit-Reset"), "step %d", i)
				assert.Equal(t, st.retry, a.header.Get("Retry-After"), "step %d", i)
				if st.status == 200 {
					assert.Equal(t, "ok 127.0.0.1", a.body, "step %d", i)
				}
			}
			assert.EqualValues(t, 4, b.reached.Load(), "the refused request never reached the handler")

			clock.Set(t0.Add(2 * time.Minute)) // 45 s into a fresh window
			for range 3 {
				require.Equal(t, http.StatusOK, get(t, b.url, nil).status)
			}
			a := get(t, b.url, nil)
			require.Equal(t, http.StatusTooManyRequests, a.status)
			assert.Equal(t, "no-store", a.header.Get("Cache-Control"))
			assert.Equal(t, httplimit.ProblemContentType, a.header.Get("Content-Type"))
			// The service's 429 document, byte for byte.
			assert.JSONEq(t, `{"type":"urn:tollgate:problem:rate-limit-exceeded","title":"Too Many Requests","status":429,
				"detail":"rate limit of 3 per 1m0s exceeded for policy \"ping\"","violated-policies":["ping"],
				"limit":3,"remaining":0,"count":4,"reset_after":15,"retry_after":15}`, a.body)
			assert.Equal(t, `{"type":"urn:tollgate:problem:rate-limit-exceeded","title":"Too Many Requests","status":429,`+
				`"detail":"rate limit of 3 per 1m0s exceeded for policy \"ping\"","violated-policies":["ping"],`+
				`"limit":3,"remaining":0,"count":4,"reset_after":15,"retry_after":15}`, a.body)
		})
	}
}

// TestSeveralPolicies: evaluated in order, the closest to refusal announced,
// the first enforcing refusal stopping the evaluation, a shadow policy
// counted and never refusing.
func TestSeveralPolicies(t *testing.T) {
	burst := limiter.Policy{Name: "burst", Algorithm: limiter.FixedWindow, Limit: 2, Window: 10 * time.Second}
	trial := limiter.Policy{Name: "trial", Algorithm: limiter.SlidingLog, Limit: 1, Window: time.Minute, Shadow: true}
	daily := limiter.Policy{Name: "daily", Algorithm: limiter.SlidingLog, Limit: 3, Window: 24 * time.Hour}
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			store := sk.open(t)
			clock := limitertest.NewClock(t0)
			m, err := httplimit.New(store, []limiter.Policy{burst, trial, daily}, httplimit.WithClock(clock))
			require.NoError(t, err)
			b := serve(t, m)

			a := get(t, b.url, nil)
			require.Equal(t, 200, a.status)
			assert.Equal(t, `"burst";q=2;w=10, "daily";q=3;w=86400`, a.header.Get("RateLimit-Policy"), "shadows are not announced")
			assert.Equal(t, `"burst";r=1;t=5`, a.header.Get("RateLimit"))

			a = get(t, b.url, nil) // trial refuses (shadow): still 200
			require.Equal(t, 200, a.status)
			assert.Equal(t, `"burst";r=0;t=5`, a.header.Get("RateLimit"), "burst has the least remaining")

			a = get(t, b.url, nil) // burst refuses: daily is not charged
			require.Equal(t, 429, a.status)
			assert.Equal(t, []any{"burst"}, a.problem(t)["violated-policies"])

			clock.Advance(10 * time.Second)
			a = get(t, b.url, nil)
			require.Equal(t, 200, a.status)
			assert.Equal(t, `"daily";r=0;t=86400`, a.header.Get("RateLimit"), "daily counted 3, not 4")
			a = get(t, b.url, nil)
			require.Equal(t, 429, a.status)
			assert.Equal(t, []any{"daily"}, a.problem(t)["violated-policies"])

			d, err := store.Peek(context.Background(), daily, limiter.Key{Subject: "127.0.0.1"}, clock.Now())
			require.NoError(t, err)
			assert.EqualValues(t, 3, d.Count)
		})
	}
}

// TestExactUnderConcurrency sends 500 concurrent requests for one key and
// counts exactly: the limit passes, the rest is refused, on every store. The
// sliding log is seed 001's check-then-act (docs/seeds.md); the stores' conformance suites
// cover the other algorithms' atomicity.
func TestExactUnderConcurrency(t *testing.T) {
	const n, limit = 500, 137
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog} {
		for _, sk := range stores {
			t.Run(string(alg)+"/"+sk.name, func(t *testing.T) {
				p := limiter.Policy{Name: "burst", Algorithm: alg, Limit: limit, Window: time.Hour}
				m, err := httplimit.New(sk.open(t), []limiter.Policy{p}, httplimit.WithClock(fixedClock(t0)))
				require.NoError(t, err)
				b := serve(t, m)
				var (
					wg     sync.WaitGroup
					mu     sync.Mutex
					counts = map[int]int{}
				)
				start := make(chan struct{})
				for range n {
					wg.Go(func() {
						<-start
						a := get(t, b.url, nil)
						mu.Lock()
						counts[a.status]++
						mu.Unlock()
					})
				}
				close(start)
				wg.Wait()
				assert.Equal(t, map[int]int{200: limit, 429: n - limit}, counts)
				assert.EqualValues(t, limit, b.reached.Load())
			})
		}
	}
}

// TestStoreDown stops Redis under the middleware: fail-closed answers 503
// with the unavailable problem, fail-open lets the request through without
// fields, and both report the error; when Redis is back, limiting resumes.
func TestStoreDown(t *testing.T) {
	for name, mode := range map[string]httplimit.StoreErrorMode{"fail_closed": httplimit.FailClosed, "fail_open": httplimit.FailOpen} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			var (
				mu       sync.Mutex
				reported []error
			)
			m, err := httplimit.New(openRedis(t, srv), []limiter.Policy{ping}, httplimit.WithClock(fixedClock(t0)),
				httplimit.WithOnStoreError(mode, func(_ *http.Request, err error) {
					mu.Lock()
					reported = append(reported, err)
					mu.Unlock()
				}))
			require.NoError(t, err)
			b := serve(t, m)
			require.Equal(t, 200, get(t, b.url, nil).status)

			srv.Stop()
			a := get(t, b.url, nil)
			if mode == httplimit.FailClosed {
				require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
				assert.Equal(t, "1", a.header.Get("Retry-After"))
				assert.Equal(t, map[string]any{"type": "urn:tollgate:problem:unavailable", "title": "Service Unavailable",
					"status": 503.0, "detail": httplimit.UnavailableDetail}, a.problem(t))
				assert.EqualValues(t, 1, b.reached.Load())
			} else {
				require.Equal(t, http.StatusOK, a.status, a.body)
				assert.Equal(t, "ok -", a.body, "failed open: no result in the context")
				assert.Empty(t, a.header.Get("RateLimit"))
				assert.EqualValues(t, 2, b.reached.Load())
			}
			mu.Lock()
			require.Len(t, reported, 1)
			assert.ErrorIs(t, reported[0], limiter.ErrUnavailable)
			mu.Unlock()

			srv.Restart() // empty: the earlier count is gone
			require.Eventually(t, func() bool { return get(t, b.url, nil).status == 200 }, 30*time.Second, 50*time.Millisecond,
				"the store recovers when Redis is back")
		})
	}
}

// TestInputErrors: a missing key answers 400, a bad cost 422, and neither
// counts anything.
func TestInputErrors(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	m, err := httplimit.New(store, []limiter.Policy{ping},
		httplimit.WithKey(httplimit.Header("X-Api-Key")),
		httplimit.WithCost(func(r *http.Request) (int64, error) {
			var c int64
			_, err := fmt.Sscan(r.URL.Query().Get("cost"), &c)
			return c, err
		}))
	require.NoError(t, err)
	b := serve(t, m)

	a := get(t, b.url+"?cost=1", nil)
	require.Equal(t, 400, a.status)
	assert.Equal(t, "urn:tollgate:problem:bad-request", a.problem(t)["type"])
	assert.Contains(t, a.problem(t)["detail"], "X-Api-Key is required")

	for _, cost := range []string{"0", "-1", "4", "x"} {
		a = get(t, b.url+"?cost="+cost, map[string]string{"X-Api-Key": "k"})
		require.Equal(t, 422, a.status, "cost %s", cost)
		assert.Equal(t, "urn:tollgate:problem:validation-failed", a.problem(t)["type"])
	}
	a = get(t, b.url+"?cost=3", map[string]string{"X-Api-Key": "k"})
	require.Equal(t, 200, a.status, "nothing was counted before")
	assert.Equal(t, "ok k", a.body)
	assert.Equal(t, "0", a.header.Get("X-RateLimit-Remaining"))
	assert.EqualValues(t, 1, b.reached.Load())
}

// TestSkipAndRefusal: skipped requests pass uncounted; a custom refusal
// writes its own answer after the fields are set.
func TestSkipAndRefusal(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	one := limiter.Policy{Name: "one", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Minute}
	m, err := httplimit.New(store, []limiter.Policy{one}, httplimit.WithClock(fixedClock(t0)),
		httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		httplimit.WithRefusal(func(w http.ResponseWriter, r *http.Request, res httplimit.Result) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "slow down %s, %s refused", res.Key, res.Policies[res.Refused].Name)
		}))
	require.NoError(t, err)
	b := serve(t, m)
	for range 5 {
		a := get(t, b.url+"/healthz", nil)
		require.Equal(t, 200, a.status)
		assert.Empty(t, a.header.Get("RateLimit-Policy"))
	}
	require.Equal(t, 200, get(t, b.url, nil).status)
	a := get(t, b.url, nil)
	assert.Equal(t, answer{503, a.header, "slow down 127.0.0.1, one refused"}, a)
	assert.Equal(t, "15", a.header.Get("Retry-After"))
	assert.Equal(t, `"one";r=0;t=15`, a.header.Get("RateLimit"))
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	for name, ps := range map[string][]limiter.Policy{
		"none":      nil,
		"invalid":   {{Name: "x", Algorithm: limiter.FixedWindow, Limit: 0, Window: time.Minute}},
		"twice":     {ping, ping},
		"non-ascii": {{Name: "café", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Minute}},
	} {
		_, err := httplimit.New(store, ps)
		assert.Error(t, err, name)
	}
	_, err := httplimit.New(nil, []limiter.Policy{ping})
	assert.Error(t, err)
	_, err = httplimit.New(store, []limiter.Policy{ping}, httplimit.WithKey(nil))
	assert.Error(t, err)
}
