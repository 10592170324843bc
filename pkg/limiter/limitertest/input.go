package limitertest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// testBadInput checks that bad policies, keys and costs are errors wrapping
// the right sentinel, and that they neither panic nor count.
func testBadInput(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		good := policy("good", alg, 3, time.Minute)
		k := limiter.Key{Subject: "k"}
		bad := map[string]limiter.Policy{
			"no name":        policy("", alg, 3, time.Minute),
			"long name":      policy(strings.Repeat("n", 129), alg, 3, time.Minute),
			"bad algorithm":  policy("x", "leaky_bucket", 3, time.Minute),
			"zero limit":     policy("x", alg, 0, time.Minute),
			"negative limit": policy("x", alg, -1, time.Minute),
			"huge limit":     policy("x", alg, limiter.MaxLimit+1, time.Minute),
			"zero window":    policy("x", alg, 3, 0),
			"short window":   policy("x", alg, 3, time.Millisecond),
			"odd window":     policy("x", alg, 3, 1500*time.Millisecond),
			"long window":    policy("x", alg, 3, limiter.MaxWindow+time.Second),
		}
		for name, p := range bad {
			_, err := s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1, Now: base})
			assert.ErrorIs(t, err, limiter.ErrInvalidPolicy, "allow: %s", name)
			_, err = s.Peek(t.Context(), p, k, base)
			assert.ErrorIs(t, err, limiter.ErrInvalidPolicy, "peek: %s", name)
			_, err = s.Reset(t.Context(), p, k)
			assert.ErrorIs(t, err, limiter.ErrInvalidPolicy, "reset: %s", name)
			_, err = s.ResetSubject(t.Context(), p, k.Subject)
			assert.ErrorIs(t, err, limiter.ErrInvalidPolicy, "reset subject: %s", name)
		}
		badKeys := map[string]limiter.Key{
			"empty subject": {Scope: "s"},
			"long subject":  {Subject: strings.Repeat("s", limiter.MaxKeyLen+1)},
			"long scope":    {Subject: "s", Scope: strings.Repeat("s", limiter.MaxKeyLen+1)},
		}
		for name, bk := range badKeys {
			_, err := s.Allow(t.Context(), good, limiter.Request{Key: bk, Cost: 1, Now: base})
			assert.ErrorIs(t, err, limiter.ErrInvalidKey, "allow: %s", name)
			_, err = s.Peek(t.Context(), good, bk, base)
			assert.ErrorIs(t, err, limiter.ErrInvalidKey, "peek: %s", name)
			_, err = s.Reset(t.Context(), good, bk)
			assert.ErrorIs(t, err, limiter.ErrInvalidKey, "reset: %s", name)
		}
		_, err := s.ResetSubject(t.Context(), good, "")
		assert.ErrorIs(t, err, limiter.ErrInvalidKey, "reset subject: empty")
		for _, cost := range []int64{0, -1, good.Limit + 1, 1 << 62} {
			_, err := s.Allow(t.Context(), good, limiter.Request{Key: k, Cost: cost, Now: base})
			assert.ErrorIs(t, err, limiter.ErrInvalidCost, "cost %d", cost)
		}
		// The longest valid key works, and nothing above was counted.
		long := limiter.Key{Subject: strings.Repeat("s", limiter.MaxKeyLen), Scope: strings.Repeat("e", limiter.MaxKeyLen)}
		assert.True(t, allow(t, s, good, long, good.Limit, base).Allowed)
		d := peek(t, s, good, k, base)
		assert.Equal(t, int64(0), d.Count)
		assert.Equal(t, good.Limit, d.Remaining)
	})
}

// testClosed checks that every method returns ErrClosed after Close.
func testClosed(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		p := policy("closed", alg, 3, time.Minute)
		k := limiter.Key{Subject: "k"}
		allow(t, s, p, k, 1, base)
		require.NoError(t, s.Ping(t.Context()))
		require.NoError(t, s.Close())
		_, err := s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1, Now: base})
		assert.ErrorIs(t, err, limiter.ErrClosed, "allow")
		_, err = s.Peek(t.Context(), p, k, base)
		assert.ErrorIs(t, err, limiter.ErrClosed, "peek")
		_, err = s.Reset(t.Context(), p, k)
		assert.ErrorIs(t, err, limiter.ErrClosed, "reset")
		_, err = s.ResetSubject(t.Context(), p, k.Subject)
		assert.ErrorIs(t, err, limiter.ErrClosed, "reset subject")
		_, err = s.Prune(t.Context(), base, []limiter.Policy{p})
		assert.ErrorIs(t, err, limiter.ErrClosed, "prune")
		assert.ErrorIs(t, s.Ping(t.Context()), limiter.ErrClosed, "ping")
	})
}

// testAudit checks that an attempt asking for an audit row is decided as
// usual; the row itself is the business of stores that keep one.
func testAudit(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		p := policy("ping", alg, 1, time.Minute)
		r := limiter.Request{Key: limiter.Key{Subject: "127.0.0.1"}, Cost: 1, Now: base, Audit: "/ping"}
		d, err := s.Allow(t.Context(), p, r)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		d, err = s.Allow(t.Context(), p, r)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "an audited attempt is counted like any other")
	})
}
