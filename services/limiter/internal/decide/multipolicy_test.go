package decide

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// TestMultiPolicyRule runs the cases of the rule for several policies that
// the httplimit middleware and the lab's whatif also run
// (limitertest.RunMultiPolicy) through Route, the seed routes' and
// /v1/forward-auth's evaluation, reading the verdict as the transports do.
func TestMultiPolicyRule(t *testing.T) {
	limitertest.RunMultiPolicy(t, func(testing.TB) limiter.Store { return memstore.New() },
		func(t *testing.T, policies []limiter.Policy, store limiter.Store, clock limiter.Clock) limitertest.MultiPolicyFunc {
			m, err := NewMetrics(prometheus.NewRegistry())
			require.NoError(t, err)
			dec, err := New(Options{Store: store, StoreName: "memory", Clock: clock, Metrics: m})
			require.NoError(t, err)
			plan := m.NewPlan(policies)
			return func(key string, cost int64) limitertest.MultiPolicyAnswer {
				v, err := dec.Route(context.Background(), plan, limiter.Key{Subject: key}, cost, "")
				require.NoError(t, err)
				a := limitertest.MultiPolicyAnswer{Allowed: v.Allowed(), RateLimit: v.Header.RateLimit, RetryAfter: v.Header.RetryAfter}
				if !a.Allowed {
					a.Refused = policies[v.Refused].Name
				}
				return a
			}
		})
}
