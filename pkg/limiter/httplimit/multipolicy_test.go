package httplimit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// TestMultiPolicyRule runs the cases of the rule for several policies that
// the service's decision layer and the lab's whatif also run
// (limitertest.RunMultiPolicy), reading each answer as a client does: the
// status, the problem's violated policy, RateLimit and Retry-After.
func TestMultiPolicyRule(t *testing.T) {
	limitertest.RunMultiPolicy(t, func(testing.TB) limiter.Store { return memstore.New() },
		func(t *testing.T, policies []limiter.Policy, store limiter.Store, clock limiter.Clock) limitertest.MultiPolicyFunc {
			m, err := httplimit.New(store, policies, httplimit.WithClock(clock),
				httplimit.WithKey(func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }),
				httplimit.WithCost(func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64) }))
			require.NoError(t, err)
			h := m.Handle(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			return func(key string, cost int64) limitertest.MultiPolicyAnswer {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.Header.Set("X-Key", key)
				req.Header.Set("X-Cost", strconv.FormatInt(cost, 10))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				a := limitertest.MultiPolicyAnswer{Allowed: rec.Code == http.StatusOK, RateLimit: rec.Header().Get("RateLimit"), RetryAfter: -1}
				if v := rec.Header().Get("Retry-After"); v != "" {
					a.RetryAfter, err = strconv.ParseInt(v, 10, 64)
					require.NoError(t, err)
				}
				if !a.Allowed {
					require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
					var problem struct {
						Violated []string `json:"violated-policies"`
					}
					require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &problem))
					require.Len(t, problem.Violated, 1)
					a.Refused = problem.Violated[0]
				}
				return a
			}
		})
}
