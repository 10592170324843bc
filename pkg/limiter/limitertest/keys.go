package limitertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// testKeys checks that Peek never counts, that Reset and ResetSubject remove
// exactly what they name, and that keys and policies never share state. The
// cases of one algorithm share a store, each under its own policy names.
func testKeys(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		t.Run("PeekNeverCounts", func(t *testing.T) {
			p := policy("peek", alg, 3, time.Minute)
			k := limiter.Key{Subject: "p"}
			for range 5 {
				d := peek(t, s, p, k, base)
				assert.True(t, d.Allowed)
				assert.Equal(t, int64(0), d.Count)
				assert.Equal(t, p.Limit, d.Remaining)
			}
			for i := range p.Limit {
				require.True(t, allow(t, s, p, k, 1, base).Allowed, "attempt %d", i)
				for range 3 {
					assert.Equal(t, i+1, peek(t, s, p, k, base).Count)
				}
			}
			assert.False(t, allow(t, s, p, k, 1, base).Allowed)
		})
		t.Run("Reset", func(t *testing.T) {
			p, q := policy("reset-p", alg, 3, time.Minute), policy("reset-q", alg, 3, time.Minute)
			target := limiter.Key{Subject: "u1", Scope: "a"}
			others := []struct {
				p limiter.Policy
				k limiter.Key
			}{
				{p, limiter.Key{Subject: "u1", Scope: "b"}},
				{p, limiter.Key{Subject: "u2", Scope: "a"}},
				{p, limiter.Key{Subject: "u1"}},
				{q, target},
			}
			allow(t, s, p, target, 1, base)
			for _, o := range others {
				allow(t, s, o.p, o.k, 1, base)
			}
			n, err := s.Reset(t.Context(), p, target)
			require.NoError(t, err)
			assert.Positive(t, n, "units removed")
			assert.Equal(t, int64(0), peek(t, s, p, target, base).Count)
			for _, o := range others {
				assert.Equal(t, int64(1), peek(t, s, o.p, o.k, base).Count, "%s %+v", o.p.Name, o.k)
			}
			n, err = s.Reset(t.Context(), p, target)
			require.NoError(t, err)
			assert.Equal(t, int64(0), n, "second reset")
			n, err = s.Reset(t.Context(), p, limiter.Key{Subject: "never"})
			require.NoError(t, err)
			assert.Equal(t, int64(0), n, "reset of a key never seen")
			// The budget is whole again.
			assert.Equal(t, p.Limit-1, allow(t, s, p, target, 1, base).Remaining)
		})
		t.Run("ResetSubject", func(t *testing.T) {
			p, q := policy("subject-p", alg, 3, time.Minute), policy("subject-q", alg, 3, time.Minute)
			gone := []limiter.Key{{Subject: "u1"}, {Subject: "u1", Scope: "a"}, {Subject: "u1", Scope: "b"}}
			kept := []struct {
				p limiter.Policy
				k limiter.Key
			}{
				{p, limiter.Key{Subject: "u10", Scope: "a"}}, // a prefix is not the subject
				{p, limiter.Key{Subject: "u", Scope: "1"}},
				{p, limiter.Key{Subject: "u2", Scope: "u1"}},
				{q, limiter.Key{Subject: "u1", Scope: "a"}},
			}
			for _, k := range gone {
				allow(t, s, p, k, 1, base)
			}
			for _, o := range kept {
				allow(t, s, o.p, o.k, 1, base)
			}
			n, err := s.ResetSubject(t.Context(), p, "u1")
			require.NoError(t, err)
			assert.GreaterOrEqual(t, n, int64(len(gone)), "units removed")
			for _, k := range gone {
				assert.Equal(t, int64(0), peek(t, s, p, k, base).Count, "%+v", k)
			}
			for _, o := range kept {
				assert.Equal(t, int64(1), peek(t, s, o.p, o.k, base).Count, "%s %+v", o.p.Name, o.k)
			}
			n, err = s.ResetSubject(t.Context(), p, "u1")
			require.NoError(t, err)
			assert.Equal(t, int64(0), n, "second reset")
		})
		t.Run("DistinctKeys", func(t *testing.T) {
			// Keys whose fields would collide if a store joined them with a
			// separator, ignored the scope or the case.
			p := policy("distinct", alg, 1, time.Minute)
			keys := []limiter.Key{
				{Subject: "a:b", Scope: "c"}, {Subject: "a", Scope: "b:c"},
				{Subject: "a|b", Scope: ""}, {Subject: "a", Scope: "|b"},
				{Subject: "x"}, {Subject: "x", Scope: " "}, {Subject: "X"},
				{Subject: "é"}, {Subject: "e\u0301"}, {Subject: "'; DROP TABLE rate_events; --"},
			}
			for _, k := range keys {
				assert.True(t, allow(t, s, p, k, 1, base).Allowed, "%+v", k)
			}
			for _, k := range keys {
				assert.False(t, allow(t, s, p, k, 1, base).Allowed, "%+v", k)
			}
		})
		t.Run("PoliciesIndependent", func(t *testing.T) {
			p1, p2 := policy("one", alg, 2, time.Minute), policy("two", alg, 4, time.Minute)
			k := limiter.Key{Subject: "same", Scope: "key"}
			for range p1.Limit {
				require.True(t, allow(t, s, p1, k, 1, base).Allowed)
			}
			require.False(t, allow(t, s, p1, k, 1, base).Allowed)
			for i := range p2.Limit {
				d := allow(t, s, p2, k, 1, base)
				assert.True(t, d.Allowed, "attempt %d under the second policy", i)
				assert.Equal(t, p2.Limit-i-1, d.Remaining)
			}
		})
	})
}

// testResetUnits checks that Reset and ResetSubject return the units the
// forgotten state counted, not the records that held them: 7 attempts of
// cost 1 in one window are one fixed window row but 7 units, costs 2 and 3
// at two instants are two log events but 5 units.
func testResetUnits(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, exact, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		p := policy("units", alg, 10, time.Minute)
		ones, costs := limiter.Key{Subject: "u", Scope: "ones"}, limiter.Key{Subject: "u", Scope: "costs"}
		hit := func(k limiter.Key, cost int64, at time.Time) {
			t.Helper()
			require.True(t, allow(t, s, p, k, cost, at).Allowed, "%+v cost %d", k, cost)
		}
		for range 7 {
			hit(ones, 1, base)
		}
		hit(costs, 2, base)
		hit(costs, 3, base.Add(time.Second))
		n, err := s.Reset(t.Context(), p, ones)
		require.NoError(t, err)
		assert.Equal(t, int64(7), n, "units of 7 attempts of cost 1")
		n, err = s.Reset(t.Context(), p, costs)
		require.NoError(t, err)
		assert.Equal(t, int64(5), n, "units of costs 2 and 3")

		for range 7 {
			hit(ones, 1, base)
		}
		hit(costs, 2, base)
		hit(costs, 3, base.Add(time.Second))
		n, err = s.ResetSubject(t.Context(), p, "u")
		require.NoError(t, err)
		assert.Equal(t, int64(12), n, "units of both scopes")
	})
}
