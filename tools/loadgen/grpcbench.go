package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// grpcScheme is the scheme of a --target that speaks Envoy's rate-limit
// gRPC API (--generator grpc): grpc://host:port.
const grpcScheme = "grpc"

// grpcRequest is the ShouldRateLimit request for key: one descriptor of
// the domain, keyed like POST /json's (envoyDescriptorKey).
func grpcRequest(domain, key string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: envoyDescriptorKey, Value: key}},
	}}}
}

// grpcConns opens n client connections to addr (host:port, plaintext) and
// connects each with one call for key, which must answer OK: a target that
// is down or does not know the domain is not ready.
func grpcConns(ctx context.Context, addr, domain, key string, n int, timeout time.Duration) ([]rlsv3.RateLimitServiceClient, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	clients := make([]rlsv3.RateLimitServiceClient, n)
	for i := range clients {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("loadgen: grpc %s: %w", addr, err)
		}
		conns = append(conns, c)
		clients[i] = rlsv3.NewRateLimitServiceClient(c)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := clients[i].ShouldRateLimit(cctx, grpcRequest(domain, key))
		cancel()
		if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			err = fmt.Errorf("%s on a fresh key (does the config have domain %q with key %q?)", resp.GetOverallCode(), domain, envoyDescriptorKey)
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("loadgen: grpc ShouldRateLimit on %s: %w", addr, err)
		}
	}
	return clients, closeAll, nil
}

// runGRPC drives ShouldRateLimit on addr with callers closed-loop callers
// spread over conns connections (HTTP/2 multiplexes the calls of one
// connection, as Envoy's do) for du, over keys keys of the run named prefix
// in turn. An answer other than OK, or an error, counts as failed.
func runGRPC(ctx context.Context, addr, domain, prefix string, keys, callers, conns int, du, timeout time.Duration) (benchRun, error) {
	clients, closeAll, err := grpcConns(ctx, addr, domain, prefix+"-connect", conns, timeout)
	if err != nil {
		return benchRun{}, err
	}
	defer closeAll()
	type tally struct {
		ok, failed int
		first      string
		lat        []time.Duration
	}
	tallies := make([]tally, callers)
	var next atomic.Uint64
	var wg sync.WaitGroup
	began := time.Now()
	deadline := began.Add(du)
	for w := range callers {
		wg.Go(func() {
			client, t := clients[w%conns], &tallies[w]
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := (next.Add(1) - 1) % uint64(keys)
				req := grpcRequest(domain, prefix+"-"+strconv.FormatUint(i, 10))
				cctx, cancel := context.WithTimeout(ctx, timeout)
				sent := time.Now()
				resp, err := client.ShouldRateLimit(cctx, req)
				took := time.Since(sent)
				cancel()
				if err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					t.ok++
					t.lat = append(t.lat, took)
					continue
				}
				t.failed++
				if t.first == "" {
					t.first = resp.GetOverallCode().String()
					if err != nil {
						t.first = err.Error()
					}
				}
			}
		})
	}
	wg.Wait()
	run := benchRun{Elapsed: time.Since(began)}
	if err := ctx.Err(); err != nil {
		return run, fmt.Errorf("loadgen: bench: %w", err)
	}
	var lat []time.Duration
	for _, t := range tallies {
		run.OK += t.ok
		run.Failed += t.failed
		if run.FirstFailure == "" {
			run.FirstFailure = t.first
		}
		lat = append(lat, t.lat...)
	}
	run.Lat = summarize(lat)
	return run, nil
}
