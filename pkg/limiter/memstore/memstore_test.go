package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t testing.TB) limiter.Store { return memstore.New() })
}

func TestConformanceTinyShards(t *testing.T) {
	// One key per shard pair and sharded eviction must not change decisions
	// while the store holds every key the suite uses.
	limitertest.Run(t, func(t testing.TB) limiter.Store {
		return memstore.New(memstore.WithShards(2), memstore.WithMaxKeys(4096))
	})
}

// The memory store declares that it never waits, and no more: the service
// then decides on it without a deadline.
func TestCapabilities(t *testing.T) {
	assert.Equal(t, limiter.Capabilities{NeverWaits: true}, limiter.CapabilitiesOf(memstore.New()))
}

func policy(alg limiter.Algorithm, limit int64, window time.Duration) limiter.Policy {
	return limiter.Policy{Name: "p", Algorithm: alg, Limit: limit, Window: window}
}

func allow(t testing.TB, s *memstore.Store, p limiter.Policy, subject string, at time.Time) limiter.Decision {
	t.Helper()
	d, err := s.Allow(context.Background(), p, limiter.Request{Key: limiter.Key{Subject: subject}, Cost: 1, Now: at})
	require.NoError(t, err)
	return d
}

// The decision on an existing key allocates nothing for the algorithms whose
// state has a fixed size.
func TestAllowDoesNotAllocate(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			s := memstore.New()
			p := policy(alg, 1000, time.Second)
			r := limiter.Request{Key: limiter.Key{Subject: "user-42", Scope: "/rate/check"}, Cost: 1, Now: t0}
			_, err := s.Allow(t.Context(), p, r)
			require.NoError(t, err)
			ctx := t.Context()
			allocs := testing.AllocsPerRun(1000, func() {
				r.Now = r.Now.Add(time.Millisecond) // across windows too
				if _, err := s.Allow(ctx, p, r); err != nil {
					panic(err)
				}
			})
			assert.Equal(t, 0.0, allocs)
		})
	}
}

// A full shard evicts the key whose state expires first.
func TestEvictsTheEarliestExpiry(t *testing.T) {
	s := memstore.New(memstore.WithShards(1), memstore.WithMaxKeys(3))
	p := policy(limiter.FixedWindow, 5, time.Minute)
	// Written in this order, the oldest window is "b"'s.
	allow(t, s, p, "a", t0.Add(2*time.Minute))
	allow(t, s, p, "b", t0)
	allow(t, s, p, "c", t0.Add(time.Minute))
	allow(t, s, p, "d", t0.Add(2*time.Minute))
	assert.Equal(t, 3, s.Len())
	assert.Equal(t, uint64(1), s.Evictions())
	for subject, want := range map[string]int64{"a": 1, "b": 0, "c": 1, "d": 1} {
		n, err := s.Reset(t.Context(), p, limiter.Key{Subject: subject})
		require.NoError(t, err)
		assert.Equal(t, want, n, "units of %q", subject)
	}
}

// One million distinct keys through a store bounded to 100,000: the bound
// holds all along, every key over it is an eviction, and the heap stays
// bounded. Under the race detector, a tenth of each.
func TestMillionKeysStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("one million decisions")
	}
	keys, maxKeys := 1_000_000, 100_000
	if raceEnabled {
		keys, maxKeys = keys/10, maxKeys/10
	}
	// About 370 bytes a key held (entry, map slot, list slot, copied
	// strings), with slack for the rest of the test binary's heap.
	maxHeap := uint64(maxKeys)*500 + 8<<20
	s := memstore.New(memstore.WithMaxKeys(maxKeys))
	p := policy(limiter.TokenBucket, 10, time.Minute)
	ctx := t.Context()
	buf := []byte("client-")
	refused := 0
	for i := range keys {
		buf = strconv.AppendInt(buf[:len("client-")], int64(i), 10)
		r := limiter.Request{Key: limiter.Key{Subject: string(buf)}, Cost: 1, Now: t0.Add(time.Duration(i) * time.Microsecond)}
		d, err := s.Allow(ctx, p, r)
		if err != nil || !d.Allowed {
			refused++ // a new key has a full bucket
		}
		if i%10_000 == 0 {
			require.LessOrEqual(t, s.Len(), maxKeys, "after %d keys", i+1)
		}
	}
	assert.Equal(t, 0, refused)
	assert.Equal(t, maxKeys, s.Len())
	assert.Equal(t, uint64(keys-maxKeys), s.Evictions())
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	t.Logf("%d keys through, %d held: heap after GC %.1f MiB (%d bytes a key held), bound %.1f MiB",
		keys, s.Len(), float64(m.HeapAlloc)/(1<<20), m.HeapAlloc/uint64(maxKeys), float64(maxHeap)/(1<<20))
	assert.Less(t, m.HeapAlloc, maxHeap)
	runtime.KeepAlive(s)
}

// A sliding log key keeps at most two windows of events however long it
// lives: the rest is dropped as it goes.
func TestSlidingLogDropsOldEvents(t *testing.T) {
	s := memstore.New()
	p := policy(limiter.SlidingLog, 5, 10*time.Second)
	var admitted int
	for i := range 1000 {
		if allow(t, s, p, "k", t0.Add(time.Duration(i)*time.Second)).Allowed {
			admitted++
		}
	}
	require.Equal(t, 500, admitted, "5 every 10s")
	n, err := s.Reset(t.Context(), p, limiter.Key{Subject: "k"})
	require.NoError(t, err)
	assert.LessOrEqual(t, n, 2*p.Limit)
}

// A policy that changes algorithm or window under the same name starts its
// keys afresh instead of misreading their state.
func TestChangedPolicyStartsAfresh(t *testing.T) {
	s := memstore.New()
	fixed := policy(limiter.FixedWindow, 2, time.Minute)
	for range 3 {
		allow(t, s, fixed, "k", t0)
	}
	// Only the limit changed: the count is kept.
	assert.Equal(t, int64(4), allow(t, s, policy(limiter.FixedWindow, 5, time.Minute), "k", t0).Count)
	for _, p := range []limiter.Policy{
		policy(limiter.FixedWindow, 2, 2*time.Minute),
		policy(limiter.SlidingWindow, 2, 2*time.Minute),
		policy(limiter.TokenBucket, 2, 2*time.Minute),
	} {
		d := allow(t, s, p, "k", t0)
		assert.True(t, d.Allowed, "%s/%s", p.Algorithm, p.Window)
		assert.Equal(t, int64(1), d.Remaining, "%s/%s", p.Algorithm, p.Window)
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		opts    []memstore.Option
		keys    int
		wantLen int
	}{
		{[]memstore.Option{memstore.WithMaxKeys(1)}, 10, 1},
		{[]memstore.Option{memstore.WithMaxKeys(10), memstore.WithShards(1000)}, 100, 10},
		{[]memstore.Option{memstore.WithMaxKeys(7), memstore.WithShards(3)}, 100, 7},
		{[]memstore.Option{memstore.WithMaxKeys(0), memstore.WithShards(-1)}, 100, 100}, // defaults
		{[]memstore.Option{memstore.WithShards(1 << 30)}, 100, 100},
	} {
		s := memstore.New(tc.opts...)
		p := policy(limiter.FixedWindow, 1, time.Minute)
		for i := range tc.keys {
			allow(t, s, p, fmt.Sprint(i), t0)
		}
		// With several shards the keys may not fill every shard: the bound
		// is an upper one.
		assert.LessOrEqual(t, s.Len(), tc.wantLen)
		assert.Equal(t, uint64(tc.keys-s.Len()), s.Evictions())
		if tc.wantLen == 1 || tc.wantLen == tc.keys {
			assert.Equal(t, tc.wantLen, s.Len())
		}
	}
}

func TestPruneStopsOnCancel(t *testing.T) {
	s := memstore.New()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Prune(ctx, t0, []limiter.Policy{policy(limiter.FixedWindow, 1, time.Minute)})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestCloseDropsKeys(t *testing.T) {
	s := memstore.New()
	allow(t, s, policy(limiter.FixedWindow, 1, time.Minute), "k", t0)
	require.Equal(t, 1, s.Len())
	require.NoError(t, s.Close())
	assert.Equal(t, 0, s.Len())
	assert.NoError(t, s.Close(), "second close")
}

// A key whose state is cleared (its policy changed, or ResetSubject) keeps
// its place in its shard: Reset still removes it, and only it, and a cleared
// key counted again is held like any other.
func TestClearedKeysStayIndexed(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.WithShards(1))
	fixed := policy(limiter.FixedWindow, 10, time.Minute)
	bucket := policy(limiter.TokenBucket, 10, time.Minute)
	a, b := limiter.Key{Subject: "a"}, limiter.Key{Subject: "b"}
	allow(t, s, fixed, a.Subject, t0)
	allow(t, s, fixed, b.Subject, t0)
	allow(t, s, bucket, b.Subject, t0) // b's state is cleared, then counted as a bucket

	n, err := s.Reset(ctx, bucket, b)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "b's bucket: one unit in flight")
	assert.Equal(t, 1, s.Len())
	assert.Equal(t, int64(2), allow(t, s, fixed, a.Subject, t0).Count, "a was not touched")

	n, err = s.ResetSubject(ctx, fixed, a.Subject)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "a's window: two units")
	assert.Equal(t, 0, s.Len())
	assert.Equal(t, int64(1), allow(t, s, fixed, a.Subject, t0).Count, "a starts afresh")
	assert.Equal(t, 1, s.Len())
	n, err = s.Reset(ctx, fixed, a)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	assert.Equal(t, 0, s.Len())
}

// The bound counts sliding log events with the keys: a key holding many
// events takes as much room as that many keys' worth of memory (16 events a
// key), so WithMaxKeys bounds the memory whatever the policies' limits.
func TestMaxKeysCountsEvents(t *testing.T) {
	const maxKeys, keys, limit = 1000, 10, 2000
	s := memstore.New(memstore.WithShards(1), memstore.WithMaxKeys(maxKeys))
	p := policy(limiter.SlidingLog, limit, time.Hour)
	for i := range limit {
		for k := range keys {
			d := allow(t, s, p, fmt.Sprint(k), t0.Add(time.Duration(i)*time.Millisecond))
			require.True(t, d.Allowed, "within the limit, or evicted and started again")
		}
	}
	held := 0
	for k := range keys {
		d, err := s.Peek(t.Context(), p, limiter.Key{Subject: fmt.Sprint(k)}, t0.Add(limit*time.Millisecond))
		require.NoError(t, err)
		if d.Count > 0 {
			held += 1 + int(d.Count)/16
		}
	}
	assert.LessOrEqual(t, held, maxKeys, "keys plus events held, 16 events a key")
	assert.Positive(t, s.Evictions())
}
