package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// TestPingHeadersAcrossAWindow scripts /ping through one window with the
// fake clock: remaining and reset count down, and both are right at the
// boundary.
func TestPingHeadersAcrossAWindow(t *testing.T) {
	steps := []struct {
		advance    time.Duration
		status     int
		rateLimit  string
		remaining  string
		reset      string
		retryAfter string
	}{
		{0, 200, `"ping";r=2;t=15`, "2", "15", ""},                                     // :45
		{5 * time.Second, 200, `"ping";r=1;t=10`, "1", "10", ""},                       // :50
		{9*time.Second + 500*time.Millisecond, 200, `"ping";r=0;t=1`, "0", "1", ""},    // :59.5
		{0, 429, `"ping";r=0;t=1`, "0", "1", "1"},                                      // :59.5, refused
		{500*time.Millisecond - time.Nanosecond, 429, `"ping";r=0;t=1`, "0", "1", "1"}, // 1ns before the boundary
		{time.Nanosecond, 200, `"ping";r=2;t=60`, "2", "60", ""},                       // the boundary: a new window
		{59 * time.Second, 200, `"ping";r=1;t=1`, "1", "1", ""},                        // :59 of the new window
	}
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t))
			for i, st := range steps {
				s.clock.Advance(st.advance)
				w := s.ping("erin")
				require.Equal(t, st.status, w.Code, "step %d: %s", i, w.Body.String())
				h := w.Header()
				assert.Equal(t, `"ping";q=3;w=60`, h.Get("RateLimit-Policy"), "step %d", i)
				assert.Equal(t, st.rateLimit, h.Get("RateLimit"), "step %d", i)
				assert.Equal(t, "3", h.Get("X-RateLimit-Limit"), "step %d", i)
				assert.Equal(t, st.remaining, h.Get("X-RateLimit-Remaining"), "step %d", i)
				assert.Equal(t, st.reset, h.Get("X-RateLimit-Reset"), "step %d", i)
				assert.Equal(t, st.retryAfter, h.Get("Retry-After"), "step %d", i)
			}
		})
	}
}

// TestRoutePolicies checks a route of several policies: evaluated in order,
// the closest to refusal announced, the first enforcing refusal stopping the
// evaluation, shadow policies counted and never refusing.
func TestRoutePolicies(t *testing.T) {
	burst := limiter.Policy{Name: "burst", Algorithm: limiter.FixedWindow, Limit: 2, Window: 10 * time.Second}
	trial := limiter.Policy{Name: "trial", Algorithm: limiter.SlidingLog, Limit: 1, Window: time.Minute, Shadow: true}
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t), func(o *options) {
				o.Policies = append(o.Policies, burst, trial)
				o.PingRoute = []string{"ping", "trial", "burst"}
			})
			const wantPolicy = `"ping";q=3;w=60, "burst";q=2;w=10`

			w := s.ping("frank") // ping 1/3, trial 1/1, burst 1/2
			require.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, wantPolicy, w.Header().Get("RateLimit-Policy"))
			assert.Equal(t, `"burst";r=1;t=5`, w.Header().Get("RateLimit"), "burst has the fewest left")
			assert.Equal(t, map[string]any{"key": "frank", "count": 1.0, "limit": 3.0, "remaining": 2.0, "reset_after": 15.0}, decode(t, w),
				"the body describes the route's first policy")

			w = s.ping("frank") // ping 2/3, trial refuses (shadow: ignored), burst 2/2
			require.Equal(t, http.StatusOK, w.Code, "a shadow refusal lets the request through")
			assert.Equal(t, `"burst";r=0;t=5`, w.Header().Get("RateLimit"))

			w = s.ping("frank") // ping 3/3, trial refuses, burst refuses
			p := assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
			assert.Equal(t, []any{"burst"}, p["violated-policies"])
			assert.Equal(t, 2.0, p["limit"])
			assert.Equal(t, `"burst";r=0;t=5`, w.Header().Get("RateLimit"), "the refusing policy is announced")
			assert.Equal(t, "5", w.Header().Get("Retry-After"))

			s.clock.Advance(5 * time.Second) // a new burst window
			w = s.ping("frank")              // ping refuses: 4/3
			p = assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
			assert.Equal(t, []any{"ping"}, p["violated-policies"])
			assert.Equal(t, `"ping";r=0;t=10`, w.Header().Get("RateLimit"))

			ctx := context.Background()
			d, err := s.store.Peek(ctx, burst, limiter.Key{Subject: "key:frank"}, s.clock.Now())
			require.NoError(t, err)
			assert.Equal(t, int64(0), d.Count, "a policy after the refusing one is not charged")
			d, err = s.store.Peek(ctx, trial, limiter.Key{Subject: "key:frank"}, s.clock.Now())
			require.NoError(t, err)
			assert.Equal(t, int64(1), d.Count, "the shadow policy records only what it allowed")

			metrics := s.metrics()
			for _, line := range []string{
				`tollgate_decisions_total{policy="ping",result="allowed"} 3`,
				`tollgate_decisions_total{policy="ping",result="limited"} 1`,
				`tollgate_decisions_total{policy="trial",result="allowed"} 1`,
				`tollgate_decisions_total{policy="trial",result="shadow_limited"} 2`,
				`tollgate_decisions_total{policy="trial",result="limited"} 0`,
				`tollgate_decisions_total{policy="burst",result="allowed"} 2`,
				`tollgate_decisions_total{policy="burst",result="limited"} 1`,
			} {
				assert.Contains(t, metrics, line+"\n")
			}
		})
	}
}

func TestAuditGoesWithTheLastEnforcingPolicy(t *testing.T) {
	path := sqliteDB(t)
	burst := limiter.Policy{Name: "burst", Algorithm: limiter.FixedWindow, Limit: 2, Window: time.Minute}
	trial := limiter.Policy{Name: "trial", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Minute, Shadow: true}
	s := newServer(t, openSQLiteAt(t, path), func(o *options) {
		o.Policies = append(o.Policies, burst, trial)
		o.PingRoute = []string{"ping", "burst", "trial"}
	})
	for range 4 {
		s.ping("gina") // allowed, allowed, refused by burst, refused by burst
	}
	assert.Equal(t, int64(2), queryInt(t, openDB(t, path), `SELECT COUNT(*) FROM api_calls WHERE key = 'key:gina'`),
		"one audit row per allowed call, none for calls a later policy refused")
}

// On every algorithm a 429's X-RateLimit-Reset equals its Retry-After, and
// the RateLimit t never exceeds the policy's window: on sliding_window the
// key empties up to two windows later than it refuses.
func TestResetAgreesWithRetryAfterOnEveryAlgorithm(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			p := limiter.Policy{Name: "ping", Algorithm: alg, Limit: 4, Window: time.Minute}
			s := newServer(t, openMemory(t), func(o *options) { o.Policies = []limiter.Policy{p, checkPolicy} })
			refused := 0
			for i := range 12 {
				s.clock.Advance(7 * time.Second)
				w := s.ping("frank")
				h := w.Header()
				tv := h.Get("RateLimit")
				secs, err := strconv.Atoi(tv[strings.LastIndex(tv, "=")+1:])
				require.NoError(t, err, tv)
				assert.LessOrEqual(t, secs, 60, "step %d: t within w (%s)", i, tv)
				if w.Code == http.StatusTooManyRequests {
					refused++
					assert.Equal(t, h.Get("Retry-After"), h.Get("X-RateLimit-Reset"), "step %d", i)
					ra, err := strconv.Atoi(h.Get("Retry-After"))
					require.NoError(t, err)
					assert.Equal(t, min(ra, 60), secs, "step %d: t is Retry-After's wait, within w", i)
				}
			}
			assert.Positive(t, refused)
		})
	}
}
