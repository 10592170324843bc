package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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

// BenchmarkTracingCost measures POST /v1/check through the whole app (its
// handler, in process: no network, so that the figure is the service's
// own work) on the memory store, with tracing off, and on with 1% and
// 100% of the traces sampled (OTEL_TRACES_SAMPLER=traceidratio; requests
// carry no traceparent, so each is a root), exported over OTLP/gRPC to a
// receiver in the same process, whose work is counted too. Compare
// decisions/s and allocs/op between the three in one run.
func BenchmarkTracingCost(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampled string // OTEL_TRACES_SAMPLER_ARG; empty: tracing off
	}{{"off", ""}, {"sampled1pct", "0.01"}, {"sampled100pct", "1"}} {
		b.Run(c.name, func(b *testing.B) {
			args := []string{"--store=memory"}
			if c.sampled != "" {
				r := otlptest.StartGRPC(b)
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
				b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
				b.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
				b.Setenv("OTEL_TRACES_SAMPLER_ARG", c.sampled)
				args = append(args, "--tracing")
			}
			a := benchApp(b, args...)
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
