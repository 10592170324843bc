package memstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// BenchmarkAllow measures one decision per algorithm: on one key from one
// goroutine, and on 100,000 distinct keys (built beforehand, all present in
// the store) from GOMAXPROCS goroutines. Time moves 1ms per decision, so
// windows roll and buckets refill as in service.
func BenchmarkAllow(b *testing.B) {
	const keys = 100_000
	subjects := make([]limiter.Key, keys)
	for i := range subjects {
		subjects[i] = limiter.Key{Subject: "client-" + strconv.Itoa(i), Scope: "/rate/check"}
	}
	for _, alg := range limiter.Algorithms {
		p := limiter.Policy{Name: "bench", Algorithm: alg, Limit: 100, Window: time.Second}
		b.Run(string(alg)+"/one_key", func(b *testing.B) {
			s := memstore.New()
			r := limiter.Request{Key: subjects[0], Cost: 1, Now: t0}
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				r.Now = r.Now.Add(time.Millisecond)
				if _, err := s.Allow(ctx, p, r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(string(alg)+"/100k_keys_parallel", func(b *testing.B) {
			s := memstore.New()
			ctx := b.Context()
			for _, k := range subjects {
				if _, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: t0}); err != nil {
					b.Fatal(err)
				}
			}
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine walks the keys from its own offset.
				i := int(worker.Add(1)) * 7919
				r := limiter.Request{Cost: 1, Now: t0}
				for pb.Next() {
					i++
					r.Key = subjects[i%keys]
					r.Now = r.Now.Add(time.Millisecond)
					if _, err := s.Allow(ctx, p, r); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
