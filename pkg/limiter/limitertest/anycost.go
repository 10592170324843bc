package limitertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// testAllowAnyCost checks limiter.AllowAnyCost on the store: a
// fixed_window cost above the limit is refused and counted whole, in the
// count every later decision of the window sees (checks, attempts, and a
// policy of the same name with a higher limit); the next window starts from
// zero; a cost above MaxLimit counts as MaxLimit+1. The other algorithms
// keep the store's bound.
func testAllowAnyCost(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		p := policy("anycost", alg, 3, time.Minute)
		k := limiter.Key{Subject: "alice"}
		at := base.Add(45 * time.Second)
		if alg != limiter.FixedWindow {
			_, err := limiter.AllowAnyCost(t.Context(), s, p, limiter.Request{Key: k, Cost: 4, Now: at})
			require.ErrorIs(t, err, limiter.ErrInvalidCost)
			assert.Equal(t, int64(0), peek(t, s, p, k, at).Count, "nothing counted")
			return
		}
		anyCost := func(p limiter.Policy, k limiter.Key, cost int64, at time.Time) limiter.Decision {
			t.Helper()
			d, err := limiter.AllowAnyCost(t.Context(), s, p, limiter.Request{Key: k, Cost: cost, Now: at, Audit: "/x"})
			require.NoError(t, err)
			return d
		}
		assert.Equal(t, viewOf(limiter.Decision{Allowed: true, Limit: 3, Remaining: 2, Count: 1, WindowStart: base, ResetAfter: 15 * time.Second}),
			viewOf(anyCost(p, k, 1, at)), "within the limit: Allow")
		assert.Equal(t, viewOf(limiter.Decision{Limit: 3, Count: 6, WindowStart: base, ResetAfter: 15 * time.Second, RetryAfter: 15 * time.Second}),
			viewOf(anyCost(p, k, 5, at)), "5 over a limit of 3: refused, counted")
		assert.Equal(t, int64(6), peek(t, s, p, k, at).Count)
		assert.Equal(t, int64(7), allow(t, s, p, k, 1, at).Count, "the next attempt sees the whole count")
		wide := policy("anycost", alg, 10, time.Minute)
		d := allow(t, s, wide, k, 2, at)
		assert.Equal(t, []any{true, int64(9), int64(1)}, []any{d.Allowed, d.Count, d.Remaining}, "a higher limit on the same count")

		next := base.Add(time.Minute)
		d = anyCost(p, k, 4, next)
		assert.Equal(t, []any{false, int64(4), int64(0), time.Minute}, []any{d.Allowed, d.Count, d.Remaining, d.RetryAfter}, "a new window")
		assert.Equal(t, int64(4), peek(t, s, p, k, next).Count)

		huge := policy("anycost", alg, limiter.MaxLimit, time.Minute)
		k2 := limiter.Key{Subject: "bob"}
		d = anyCost(huge, k2, 1<<62, next)
		assert.Equal(t, []any{false, int64(limiter.MaxLimit + 1), int64(limiter.MaxLimit)}, []any{d.Allowed, d.Count, d.Limit})
		assert.False(t, peek(t, s, huge, k2, next).Allowed, "past even the largest limit")
	})
}
