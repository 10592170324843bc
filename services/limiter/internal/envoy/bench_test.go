package envoy

import (
	"context"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// requests returns n requests for the edge domain, each for its own
// customers (per descriptors of one each), so that the store keeps
// n*per counters.
func requests(n, per int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge"}
		for j := range per {
			reqs[i].Descriptors = append(reqs[i].Descriptors, entries("customer", "c"+strconv.Itoa(i*per+j)))
		}
	}
	return reqs
}

// BenchmarkServiceMemory is one ShouldRateLimit call in process (matching,
// the memory store, the answer and its headers), over 4096 customers.
func BenchmarkServiceMemory(b *testing.B) { benchService(b, 1) }

// BenchmarkServiceMemory4 is the same with four descriptors per call: what
// each descriptor costs.
func BenchmarkServiceMemory4(b *testing.B) { benchService(b, 4) }

func benchService(b *testing.B, per int) {
	store := memstore.New()
	b.Cleanup(func() { _ = store.Close() })
	svc := newService(b, fixtures(b), store, limitertest.NewClock(t0), prometheus.NewRegistry())
	reqs := requests(4096, per)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkGRPCLoopback is the same call through a real gRPC client and
// server on a loopback port.
func BenchmarkGRPCLoopback(b *testing.B) {
	store := memstore.New()
	b.Cleanup(func() { _ = store.Close() })
	s := serve(b, fixtures(b), store)
	reqs := requests(4096, 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.client.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
