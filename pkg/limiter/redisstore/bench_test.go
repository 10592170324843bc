package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// benchKeys returns n distinct keys of one worker.
func benchKeys(worker int64, n int) []limiter.Key {
	keys := make([]limiter.Key, n)
	for i := range keys {
		keys[i] = limiter.Key{Subject: "worker-" + strconv.FormatInt(worker, 10), Scope: strconv.Itoa(i)}
	}
	return keys
}

// BenchmarkAllowParallel: one Allow per operation in server-time mode (the
// production default), from 8×GOMAXPROCS goroutines (a service's concurrent
// requests), each cycling through 1,000 keys of its own, limit 100 per
// minute; with the default pipelining of concurrent scripts, and with every
// script sent alone (batch=1).
func BenchmarkAllowParallel(b *testing.B) {
	srv := redistest.Start(b)
	for _, alg := range limiter.Algorithms {
		for _, batch := range []int{DefaultMaxBatch, 1} {
			b.Run(string(alg)+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				benchParallel(b, openStore(b, srv, srv.Prefix()+"-p"+strconv.Itoa(batch)+"-"+string(alg), WithMaxBatch(batch)), alg)
			})
		}
	}
}

// benchParallel runs Allow on s from 8×GOMAXPROCS goroutines.
func benchParallel(b *testing.B, s *Store, alg limiter.Algorithm) {
	p := policy("bench", alg, 100, time.Minute)
	var workers atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		keys := benchKeys(workers.Add(1), 1000)
		for i := 0; pb.Next(); i++ {
			if _, err := s.Allow(context.Background(), p, limiter.Request{Key: keys[i%len(keys)], Cost: 1}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAllow: the same, one goroutine: the latency of one decision.
func BenchmarkAllow(b *testing.B) {
	srv := redistest.Start(b)
	for _, alg := range limiter.Algorithms {
		b.Run(string(alg), func(b *testing.B) {
			s := openStore(b, srv, srv.Prefix()+"-s-"+string(alg))
			p := policy("bench", alg, 100, time.Minute)
			keys := benchKeys(0, 1000)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := s.Allow(context.Background(), p, limiter.Request{Key: keys[i%len(keys)], Cost: 1}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkTopology: BenchmarkAllowParallel's load on one server and on a
// Redis Cluster of three primaries (each with a replica), all on this
// machine: what the per-node routing and pipelining cost or gain.
func BenchmarkTopology(b *testing.B) {
	srv := redistest.Start(b)
	c := redistest.StartCluster(b)
	for _, topo := range []struct{ name, url string }{{"single", srv.URL()}, {"cluster", c.URL()}} {
		for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.TokenBucket} {
			b.Run(topo.name+"/"+string(alg), func(b *testing.B) {
				benchParallel(b, openURL(b, topo.url, "bench-"+topo.name+"-"+string(alg)), alg)
			})
		}
	}
}
