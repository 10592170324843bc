package memstore_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// exhaust spends subject's whole budget under p at now and checks that the
// next attempt is refused.
func exhaust(t *testing.T, s *memstore.Store, p limiter.Policy, subject string, now time.Time) {
	t.Helper()
	for range p.Limit {
		require.True(t, allow(t, s, p, subject, now).Allowed, "%s: within the budget", subject)
	}
	require.False(t, allow(t, s, p, subject, now).Allowed, "%s: over the budget", subject)
}

// A flood of 5×N fresh keys must not evict an exhausted key, whatever the
// algorithm: eviction would hand its holder a fresh budget. With the
// sampled "expires first" eviction, 10 of 10 victims were admitted again
// after 5,000 keys (N = 1,000), and exhausted sliding-log keys went first.
func TestFloodDoesNotEvictExhaustedKeys(t *testing.T) {
	const maxKeys, victims = 1_000, 10
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			s := memstore.New(memstore.WithMaxKeys(maxKeys), memstore.WithShards(4))
			p := policy(alg, 3, time.Minute)
			now := t0.Add(10 * time.Second)
			for i := range victims {
				exhaust(t, s, p, "victim-"+strconv.Itoa(i), now)
			}
			for i := range 5 * maxKeys {
				allow(t, s, p, "flood-"+strconv.Itoa(i), now.Add(time.Duration(i)*time.Millisecond))
			}
			later := now.Add(5 * maxKeys * time.Millisecond)
			admitted := 0
			for i := range victims {
				if allow(t, s, p, "victim-"+strconv.Itoa(i), later).Allowed {
					admitted++
				}
			}
			assert.Equal(t, 0, admitted, "exhausted keys admitted again after a flood of %d keys", 5*maxKeys)
			assert.LessOrEqual(t, s.Len(), maxKeys)
			assert.Equal(t, uint64(0), s.RefusedEvictions())
		})
	}
}

// When every key of a full shard is refused, a new key still gets in (the
// store stays bounded), the eviction is counted apart and reported to the
// hook.
func TestRefusedKeysEvictedOnlyWhenNothingElse(t *testing.T) {
	var mu sync.Mutex
	var seen []memstore.Eviction
	s := memstore.New(memstore.WithShards(1), memstore.WithMaxKeys(3), memstore.WithEvictionHook(func(ev memstore.Eviction) {
		mu.Lock()
		seen = append(seen, ev)
		mu.Unlock()
	}))
	p := policy(limiter.FixedWindow, 1, time.Minute)
	for _, k := range []string{"a", "b", "c"} {
		exhaust(t, s, p, k, t0)
	}
	assert.True(t, allow(t, s, p, "d", t0).Allowed)
	assert.Equal(t, 3, s.Len())
	assert.Equal(t, uint64(1), s.Evictions())
	assert.Equal(t, uint64(1), s.RefusedEvictions())
	require.Len(t, seen, 1)
	assert.Equal(t, memstore.Eviction{Policy: "p", Refused: true}, seen[0])
}

// With WithRefuseWhenFull a full store refuses new keys rather than evict
// live state, but still reuses the room of keys whose state has expired.
func TestRefuseWhenFull(t *testing.T) {
	s := memstore.New(memstore.WithShards(1), memstore.WithMaxKeys(2), memstore.WithRefuseWhenFull())
	p := policy(limiter.FixedWindow, 5, time.Minute)
	allow(t, s, p, "a", t0)
	allow(t, s, p, "b", t0)
	d := allow(t, s, p, "c", t0)
	assert.False(t, d.Allowed, "a new key in a full store")
	assert.Equal(t, int64(5), d.Limit)
	assert.Positive(t, d.RetryAfter)
	assert.Equal(t, uint64(1), s.RefusedNew())
	assert.Equal(t, uint64(0), s.Evictions())
	assert.True(t, allow(t, s, p, "a", t0).Allowed, "a held key still decides")
	// One window later a's and b's counts no longer matter: c takes a room.
	assert.True(t, allow(t, s, p, "c", t0.Add(time.Minute)).Allowed)
	assert.Equal(t, 2, s.Len())
}

// A policy with its own bound keeps its keys apart: a flood under another
// policy cannot push them out, and its own flood stays within its bound.
func TestPolicyMaxKeys(t *testing.T) {
	s := memstore.New(memstore.WithMaxKeys(64), memstore.WithShards(1), memstore.WithPolicyMaxKeys("check", 8))
	ping := limiter.Policy{Name: "ping", Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Minute}
	check := limiter.Policy{Name: "check", Algorithm: limiter.SlidingLog, Limit: 10, Window: time.Minute}
	for i := range 8 {
		allow(t, s, check, "user-"+strconv.Itoa(i), t0)
	}
	for i := range 1_000 {
		allow(t, s, ping, "flood-"+strconv.Itoa(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	for i := range 8 {
		d, err := s.Peek(t.Context(), check, limiter.Key{Subject: "user-" + strconv.Itoa(i)}, t0.Add(time.Second))
		require.NoError(t, err)
		assert.Equal(t, int64(1), d.Count, "user-%d's check state survived the ping flood", i)
	}
	assert.Equal(t, 64+8, s.Len())
	for i := range 100 {
		allow(t, s, check, "new-"+strconv.Itoa(i), t0.Add(2*time.Second))
	}
	assert.Equal(t, 64+8, s.Len())
}
