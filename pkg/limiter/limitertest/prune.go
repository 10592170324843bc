package limitertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// testPrune builds the same state in two stores, prunes one, and checks that
// the count is plausible, that pruned keys really lost their records, that
// live ones kept theirs, and that every later decision is the same in both.
func testPrune(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, pruned limiter.Store, alg limiter.Algorithm) {
		twin := open(t, newStore, alg)
		p := policy("prune", alg, 3, 10*time.Second)
		// The prune's now, one nanosecond before a window boundary, so that
		// the windows that end at the boundary still matter at `at`.
		at := base.Add(5*p.Window - time.Nanosecond)
		names := func(prefix string, n int) []limiter.Key {
			keys := make([]limiter.Key, n)
			for i := range keys {
				keys[i] = limiter.Key{Subject: fmt.Sprintf("%s%d", prefix, i), Scope: "s"}
			}
			return keys
		}
		// dead: state from base only, dead at `at` by any store's rule.
		// gone: the same, never touched again. live: state after `at`.
		// mixed: both. brink: state from the last instant whose state is
		// dead at `at` (a store may keep it longer); verge: one nanosecond
		// later, which still matters at `at`.
		dead, gone, live, mixed := names("dead", 4), names("gone", 2), names("live", 3), names("mixed", 2)
		brink, verge := names("brink", 2), names("verge", 2)
		// A log event at at−window leaves at `at`; so does the fixed window
		// that ends one nanosecond after at−window; the weighted window
		// counts one window longer; a bucket refills one token per window/limit.
		brinkAt := at.Add(-p.Window)
		switch alg {
		case limiter.SlidingWindow:
			brinkAt = at.Add(-2 * p.Window)
		case limiter.TokenBucket:
			brinkAt = at.Add(-p.Window / time.Duration(p.Limit))
		}
		for _, s := range []limiter.Store{pruned, twin} {
			for _, k := range concat(dead, gone, mixed) {
				allow(t, s, p, k, 1, base)
			}
			for _, k := range concat(live, mixed) {
				allow(t, s, p, k, 2, at.Add(time.Second))
			}
			for i := range brink {
				allow(t, s, p, brink[i], 1, brinkAt)
				allow(t, s, p, verge[i], 1, brinkAt.Add(time.Nanosecond))
			}
		}
		n, err := pruned.Prune(t.Context(), at, []limiter.Policy{policy("other", alg, 3, 10*time.Second)})
		require.NoError(t, err)
		assert.Equal(t, int64(0), n, "prune of another policy")

		n, err = pruned.Prune(t.Context(), at, []limiter.Policy{p})
		require.NoError(t, err)
		dying := int64(len(dead) + len(gone))
		if n == 0 {
			t.Logf("Prune removed nothing: the store expires state by itself")
		} else {
			// Each dead or gone key has one record; a mixed key may lose its
			// old one, or may have lost it already when it was last written;
			// a brink key may lose its one.
			assert.GreaterOrEqual(t, n, dying, "records removed")
			assert.LessOrEqual(t, n, dying+int64(len(mixed)+len(brink)), "records removed")
			for _, k := range gone {
				n, err := pruned.Reset(t.Context(), p, k)
				require.NoError(t, err)
				assert.Equal(t, int64(0), n, "%+v was pruned but still had units", k)
			}
			n, err = pruned.Prune(t.Context(), at, []limiter.Policy{p})
			require.NoError(t, err)
			assert.Equal(t, int64(0), n, "second prune at the same time")
		}
		for _, k := range gone {
			n, err := twin.Reset(t.Context(), p, k)
			require.NoError(t, err)
			assert.Positive(t, n, "%+v lost its units without a prune", k)
		}
		for _, k := range live {
			n, err := pruned.Reset(t.Context(), p, k)
			require.NoError(t, err)
			assert.Positive(t, n, "%+v lost its units in the prune", k)
			_, err = twin.Reset(t.Context(), p, k)
			require.NoError(t, err)
			allow(t, pruned, p, k, 2, at.Add(time.Second))
			allow(t, twin, p, k, 2, at.Add(time.Second))
		}
		// Every decision from `at` on is what it would have been.
		for _, k := range concat(dead, live, mixed, brink, verge) {
			for _, d := range []time.Duration{0, time.Second, 3 * time.Second, p.Window, p.Window + time.Second} {
				assert.Equal(t, viewOf(peek(t, twin, p, k, at.Add(d))), viewOf(peek(t, pruned, p, k, at.Add(d))),
					"peek %+v at +%s", k, d)
			}
			for i := range 4 {
				now := at.Add(time.Duration(i) * 2 * time.Second)
				assert.Equal(t, viewOf(allow(t, twin, p, k, 1, now)), viewOf(allow(t, pruned, p, k, 1, now)),
					"attempt %d on %+v", i, k)
			}
		}
	})
}

func concat(lists ...[]limiter.Key) []limiter.Key {
	var all []limiter.Key
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}
