package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/services/limiter/internal/telemetry/otlptest"
)

// BenchmarkServiceDecisions measures POST /v1/check through the whole
// service (app wiring, Gin engine, store) over real loopback HTTP with
// keep-alive, on the memory store and on Redis (server time, with the
// fallback decorator in front, as --store=redis runs it). The policy never
// refuses, so every request is a full allowed decision; keys rotate over
// 1024. "sequential" sends one request per iteration; "concurrent16" sends
// 16 at once per iteration. decisions/s is the figure to compare.
func BenchmarkServiceDecisions(b *testing.B) {
	stores := []struct {
		name string
		args func(b *testing.B) ([]string, string) // flags, key prefix
	}{
		{"memory", func(*testing.B) ([]string, string) { return []string{"--store=memory"}, "bench" }},
		{"redis", func(b *testing.B) ([]string, string) {
			srv := redistest.Start(b)
			return []string{"--store=redis", "--redis-url=" + srv.URL(), "--redis-timeout=1s"}, srv.Prefix()
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			args, prefix := st.args(b)
			a := benchApp(b, args...)
			srv := httptest.NewServer(a.Handler())
			b.Cleanup(srv.Close)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			bodies := make([]string, 1024)
			for i := range bodies {
				bodies[i] = fmt.Sprintf(`{"policy":"bench","key":"%s-%d"}`, prefix, i)
			}
			post := func(i int) {
				resp, err := client.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(bodies[i%len(bodies)]))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
				}
			}
			for _, width := range []int{1, 16} {
				name := "sequential"
				if width > 1 {
					name = fmt.Sprintf("concurrent%d", width)
				}
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					n := 0
					for b.Loop() {
						var wg sync.WaitGroup
						for j := range width {
							wg.Go(func() { post(n*width + j) })
						}
						wg.Wait()
						n++
					}
					b.ReportMetric(float64(n*width)/b.Elapsed().Seconds(), "decisions/s")
				})
			}
		})
	}
}

// benchApp is the app of args with the policy bench, which never refuses,
// closed at the end of the benchmark.
func benchApp(b *testing.B, args ...string) *App {
	b.Helper()
	cfg := load(b, args...)
	cfg.Policies["bench"] = limiter.Policy{Name: "bench", Algorithm: limiter.SlidingWindow, Limit: limiter.MaxLimit, Window: time.Hour}
	a, err := New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	return a
}

// tracingRuns are the runs of the tracing benchmarks: tracing off, and on
// with 1% and 100% of the traces sampled (the OTEL_TRACES_SAMPLER_ARG of
// traceidratio; empty: off).
var tracingRuns = []struct{ name, sampled string }{{"off", ""}, {"sampled1pct", "0.01"}, {"sampled100pct", "1"}}

// tracingArgs returns the flags of a tracing benchmark's run: none when
// sampled is empty, else --tracing with the sampler traceidratio at
// sampled (requests carry no traceparent, so each is a root) and the
// OTLP/gRPC exporter pointed at a receiver in the same process, whose
// work is counted too.
func tracingArgs(b *testing.B, sampled string) []string {
	if sampled == "" {
		return nil
	}
	r := otlptest.StartGRPC(b)
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
	b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	b.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
	b.Setenv("OTEL_TRACES_SAMPLER_ARG", sampled)
	return []string{"--tracing"}
}

// BenchmarkTracingCost measures POST /v1/check through the whole app (its
// handler, in process: no network, so that the figure is the service's
// own work) on the memory store, in the tracingRuns. Compare decisions/s
// and allocs/op between the three in one run.
func BenchmarkTracingCost(b *testing.B) {
	for _, run := range tracingRuns {
		b.Run(run.name, func(b *testing.B) {
			a := benchApp(b, append(tracingArgs(b, run.sampled), "--store=memory")...)
			h := a.Handler()
			bodies := make([]string, 1024)
			for i := range bodies {
				bodies[i] = fmt.Sprintf(`{"policy":"bench","key":"k-%d"}`, i)
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(bodies[n%len(bodies)]))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
				n++
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// benchRules returns a folder of Envoy rules for the gRPC benchmarks: one
// descriptor of the bench domain, a limit never reached.
func benchRules(b *testing.B) string {
	rules := b.TempDir()
	if err := os.WriteFile(filepath.Join(rules, "bench.yaml"), []byte(`domain: bench
descriptors:
  - key: customer
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`), 0o600); err != nil {
		b.Fatal(err)
	}
	return rules
}

// benchRequests are 1024 requests of the bench domain, a customer each.
func benchRequests() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = request(fmt.Sprintf("c-%d", i))
		reqs[i].Domain = "bench"
	}
	return reqs
}

// BenchmarkTracingCostGRPC is BenchmarkTracingCost's gRPC twin: one
// ShouldRateLimit of one descriptor through a real gRPC client and the
// app's gRPC server on a loopback port (the network is counted, the same
// in every run), on the memory store, in the tracingRuns.
func BenchmarkTracingCostGRPC(b *testing.B) {
	rules := benchRules(b)
	for _, run := range tracingRuns {
		b.Run(run.name, func(b *testing.B) {
			a := benchApp(b, append(tracingArgs(b, run.sampled), "--store=memory", "--envoy-config", rules, "--grpc-addr=127.0.0.1:0")...)
			client := rlsv3.NewRateLimitServiceClient(grpcClient(b, a))
			reqs := benchRequests()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				answer, err := client.ShouldRateLimit(context.Background(), reqs[n%len(reqs)])
				if err != nil {
					b.Fatal(err)
				}
				if answer.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("answer %s", answer.GetOverallCode())
				}
				n++
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkGRPCConnBounds measures ShouldRateLimit through a real gRPC
// client and the app's gRPC server on a loopback port, the listener raw
// and bounded as the service bounds it (connlimit, --max-conns), from one
// caller and from 64 at once on the client's one connection: the bounds'
// cost per call. Compare decisions/s and allocs/op in one run.
func BenchmarkGRPCConnBounds(b *testing.B) {
	rules := benchRules(b)
	for _, bounded := range []bool{false, true} {
		for _, callers := range []int{1, 64} {
			name := fmt.Sprintf("%s/callers%d", map[bool]string{false: "raw", true: "bounded"}[bounded], callers)
			b.Run(name, func(b *testing.B) {
				a := benchApp(b, "--store=memory", "--envoy-config", rules, "--grpc-addr=127.0.0.1:0")
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				if bounded {
					ln = a.bound([]string{listenerGRPC}, []net.Listener{ln})[0]
				}
				client := rlsv3.NewRateLimitServiceClient(grpcClientOn(b, a, ln))
				reqs := benchRequests()
				var n atomic.Int64
				call := func() bool {
					_, err := client.ShouldRateLimit(context.Background(), reqs[int(n.Add(1))%len(reqs)])
					if err != nil {
						b.Error(err)
					}
					return err == nil
				}
				b.ReportAllocs()
				if callers == 1 {
					for b.Loop() && call() {
					}
				} else {
					b.SetParallelism(callers / runtime.GOMAXPROCS(0))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() && call() {
						}
					})
				}
				b.ReportMetric(float64(n.Load())/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}
