package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// TestMultiPolicyRule runs the cases of the rule for several policies that
// the service's decision layer and the httplimit middleware also run
// (limitertest.RunMultiPolicy) through charge, the replay's decision of
// each request, so that whatif predicts what the service answers. The
// replay shows no fields; the answer's are formatted from what it decided
// as the service formats them.
func TestMultiPolicyRule(t *testing.T) {
	limitertest.RunMultiPolicy(t, func(testing.TB) limiter.Store { return memstore.New(memstore.WithMaxKeys(memoryMaxKeys)) },
		func(t *testing.T, policies []limiter.Policy, store limiter.Store, clock limiter.Clock) limitertest.MultiPolicyFunc {
			return func(key string, cost int64) limitertest.MultiPolicyAnswer {
				ds, e, err := charge(context.Background(), store, policies, limiter.Key{Subject: key}, cost, clock.Now(), nil)
				require.NoError(t, err)
				a := limitertest.MultiPolicyAnswer{Allowed: e.Refused() < 0, RetryAfter: -1}
				if i := e.Refused(); i >= 0 {
					a.Refused = policies[i].Name
				}
				if i := e.Shown(); i >= 0 {
					a.RateLimit = httplimit.RateLimitHeader(policies[i], ds[i])
				}
				if wait, ok := e.RetryAfter(); ok {
					a.RetryAfter = httplimit.RetryAfterSeconds(wait)
				}
				return a
			}
		})
}
