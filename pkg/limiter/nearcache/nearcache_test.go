package nearcache_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/nearcache"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func policy(alg limiter.Algorithm, limit int64, window time.Duration) limiter.Policy {
	return limiter.Policy{Name: "p-" + string(alg), Algorithm: alg, Limit: limit, Window: window}
}

// always caches every policy, fixed_window too.
func always(limiter.Policy) bool { return true }

// TestSameVerdictsAsTheStore plays one random schedule (3 keys, costs 1 to
// 3, time moving forward in uneven steps, a reset now and then) against a
// bare store and against the same kind of store behind the cache: every
// verdict and every RetryAfter are the same; for the algorithms whose
// refusals change no state, so is the state left in the store. For
// fixed_window (cached here on purpose) the verdicts agree but the store
// holds fewer attempts: why it is off by default.
func TestSameVerdictsAsTheStore(t *testing.T) {
	ctx := context.Background()
	for _, alg := range limiter.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			p := policy(alg, 5, 10*time.Second)
			bare := memstore.New()
			cached := nearcache.New(memstore.New(), always)
			defer bare.Close()
			defer cached.Close()
			rng := rand.New(rand.NewPCG(20260101, uint64(len(alg))))
			keys := []limiter.Key{{Subject: "a"}, {Subject: "b"}, {Subject: "a", Scope: "x"}}
			now := base
			refused := 0
			for i := range 3000 {
				now = now.Add(time.Duration(rng.Int64N(int64(p.Window / 8))))
				k := keys[rng.IntN(len(keys))]
				if rng.IntN(200) == 0 {
					_, err := bare.Reset(ctx, p, k)
					require.NoError(t, err)
					_, err = cached.Reset(ctx, p, k)
					require.NoError(t, err)
					continue
				}
				r := limiter.Request{Key: k, Cost: 1 + rng.Int64N(3), Now: now}
				want, err := bare.Allow(ctx, p, r)
				require.NoError(t, err)
				got, err := cached.Allow(ctx, p, r)
				require.NoError(t, err)
				require.Equal(t, want.Allowed, got.Allowed, "step %d %+v", i, r)
				require.Equal(t, want.RetryAfter, got.RetryAfter, "step %d %+v", i, r)
				if !want.Allowed {
					refused++
				}
			}
			assert.Positive(t, cached.Hits(), "the cache answered some attempts")
			t.Logf("%d refusals, %d answered by the cache", refused, cached.Hits())
			for _, k := range keys {
				want, err := bare.Peek(ctx, p, k, now)
				require.NoError(t, err)
				got, err := cached.Unwrap().Peek(ctx, p, k, now)
				require.NoError(t, err)
				if alg == limiter.FixedWindow {
					assert.LessOrEqual(t, got.Count, want.Count, "key %+v", k)
				} else {
					assert.Equal(t, want, got, "state of key %+v", k)
				}
			}
		})
	}
}

// A refusal of one cost says nothing about another; a policy changed under
// the same name is a different policy; a reset forgets the refusal.
func TestWhatARefusalCovers(t *testing.T) {
	ctx := context.Background()
	s := nearcache.New(memstore.New(), nil)
	defer s.Close()
	p := policy(limiter.SlidingLog, 5, time.Minute)
	k := limiter.Key{Subject: "u"}
	allow := func(p limiter.Policy, cost int64) limiter.Decision {
		t.Helper()
		d, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: cost, Now: base})
		require.NoError(t, err)
		return d
	}
	require.True(t, allow(p, 3).Allowed)
	require.False(t, allow(p, 3).Allowed) // cached
	require.False(t, allow(p, 3).Allowed)
	assert.Equal(t, uint64(1), s.Hits())
	assert.True(t, allow(p, 1).Allowed, "cost 1 still fits: asked the store")
	raised := p
	raised.Limit = 10
	assert.True(t, allow(raised, 3).Allowed, "a raised limit: asked the store")
	_, err := s.Reset(ctx, p, k)
	require.NoError(t, err)
	hits := s.Hits()
	assert.True(t, allow(p, 3).Allowed, "after a reset")
	assert.Equal(t, hits, s.Hits())
}

// fixed_window refusals are not cached by default: every attempt reaches
// the store, which counts it.
func TestFixedWindowIsOffByDefault(t *testing.T) {
	ctx := context.Background()
	s := nearcache.New(memstore.New(), nil)
	defer s.Close()
	p := policy(limiter.FixedWindow, 2, time.Minute)
	k := limiter.Key{Subject: "u"}
	for range 10 {
		_, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: base})
		require.NoError(t, err)
	}
	assert.Zero(t, s.Hits())
	d, err := s.Peek(ctx, p, k, base)
	require.NoError(t, err)
	assert.Equal(t, int64(10), d.Count, "every attempt counted")
}

// TestFloodOnOneKey: two instances (two Redis stores, each behind its own
// cache) flooded on one key: exactly the limit passes, and once each
// instance has seen a refusal, further attempts cost Redis nothing.
func TestFloodOnOneKey(t *testing.T) {
	srv := redistest.Start(t)
	var instances []*nearcache.Store
	var stores []*redisstore.Store
	for range 2 {
		rs, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(srv.Prefix()), redisstore.WithClientTime(),
			redisstore.WithTimeout(5*time.Second))
		require.NoError(t, err)
		stores = append(stores, rs)
		instances = append(instances, nearcache.New(rs, nil))
	}
	t.Cleanup(func() {
		for _, s := range instances {
			_ = s.Close()
		}
	})
	calls := func() uint64 { return stores[0].Stats().Calls + stores[1].Stats().Calls }
	p := policy(limiter.SlidingWindow, 50, time.Hour)
	k := limiter.Key{Subject: "victim"}
	flood := func(n int) int64 {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				d, err := instances[i%2].Allow(context.Background(), p, limiter.Request{Key: k, Cost: 1, Now: base})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		return allowed.Load()
	}
	assert.Equal(t, int64(50), flood(500), "exact across the two instances")
	first := calls()
	t.Logf("first burst of 500: %d Redis calls", first)
	for range 10 {
		assert.Zero(t, flood(100))
	}
	assert.Equal(t, first, calls(), "1,000 more refused attempts: no Redis call")
	assert.Equal(t, 1500-first, instances[0].Hits()+instances[1].Hits(), "every attempt not sent was answered by a cache")
}

// BenchmarkFloodOneKey: many goroutines on one key of one Redis store, limit
// 10 per hour (everything after the first 10 is refused), with and without
// the near cache; reports Redis calls per refusal.
func BenchmarkFloodOneKey(b *testing.B) {
	srv := redistest.Start(b)
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("nearcache=%t", cached), func(b *testing.B) {
			rs, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(fmt.Sprintf("%s-%t", srv.Prefix(), cached)))
			require.NoError(b, err)
			var s limiter.Store = rs
			if cached {
				s = nearcache.New(rs, nil)
			}
			defer s.Close()
			p := policy(limiter.SlidingWindow, 10, time.Hour)
			var refused atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d, err := s.Allow(context.Background(), p, limiter.Request{Key: limiter.Key{Subject: "victim"}, Cost: 1, Now: time.Now()})
					if err != nil {
						b.Error(err)
						return
					}
					if !d.Allowed {
						refused.Add(1)
					}
				}
			})
			b.ReportMetric(float64(rs.Stats().Calls)/float64(max(1, refused.Load())), "redis-calls/refusal")
		})
	}
}

// A view made by With shares the refusals and the hits, with its own
// choice of policies and its own store.
func TestViewsShareTheCache(t *testing.T) {
	ctx := context.Background()
	inner := memstore.New()
	s := nearcache.New(inner, nil)
	defer s.Close()
	p := policy(limiter.FixedWindow, 1, time.Minute)
	k := limiter.Key{Subject: "u"}
	on := s.With(inner, always)
	for range 3 {
		_, err := on.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: base})
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(1), s.Hits(), "the view's hit is the cache's")
	_, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: base})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s.Hits(), "s itself does not cache fixed_window")
	assert.Equal(t, 1, s.Len())
}

// The wrapper declares what the wrapped store declares.
func TestCapabilitiesPassThrough(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(srv.Prefix()))
	require.NoError(t, err)
	s := nearcache.New(rs, nil)
	defer s.Close()
	assert.True(t, limiter.CapabilitiesOf(s).Remote)
	assert.False(t, limiter.CapabilitiesOf(nearcache.New(memstore.New(), nil)).Remote)
}

// TestAPeekThatSeesRoomDropsTheRefusal: instances A and B share one store
// (one memory store here, Redis in the service); B resets a key that A
// holds a refusal of. A cannot know, and keeps refusing from its cache, but
// the moment its own status read (Peek) sees room in the store, it drops
// the refusal: A's /rate/status never shows budget while A refuses.
func TestAPeekThatSeesRoomDropsTheRefusal(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			p := policy(alg, 3, time.Minute)
			shared := memstore.New()
			defer shared.Close()
			a, b := nearcache.New(shared, always), nearcache.New(shared, always)
			k := limiter.Key{Subject: "u", Scope: "/orders"}
			at := func(i int) limiter.Request {
				return limiter.Request{Key: k, Cost: 1, Now: base.Add(time.Duration(i) * time.Millisecond)}
			}
			for i := range 3 {
				d, err := a.Allow(ctx, p, at(i))
				require.NoError(t, err)
				require.True(t, d.Allowed, "attempt %d", i)
			}
			d, err := a.Allow(ctx, p, at(3))
			require.NoError(t, err)
			require.False(t, d.Allowed, "the fourth is refused, and A caches it")

			_, err = b.Reset(ctx, p, k)
			require.NoError(t, err)
			d, err = a.Allow(ctx, p, at(4))
			require.NoError(t, err)
			assert.False(t, d.Allowed, "A has not seen the reset: its cached refusal stands (the documented delay)")
			hits := a.Hits()

			peek, err := a.Peek(ctx, p, k, at(5).Now)
			require.NoError(t, err)
			require.Equal(t, int64(3), peek.Remaining, "A's status read sees the reset")
			d, err = a.Allow(ctx, p, at(6))
			require.NoError(t, err)
			assert.True(t, d.Allowed, "after a status read that saw room, A asks the store again")
			assert.Equal(t, hits, a.Hits(), "that answer came from the store, not the cache")
		})
	}
}
