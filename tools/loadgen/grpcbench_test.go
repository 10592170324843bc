package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// countingRLS answers ShouldRateLimit OK, or OVER_LIMIT for the values
// ending in "-7", and remembers every value it was asked for.
type countingRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	mu     sync.Mutex
	values map[string]int
}

func (s *countingRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	v := req.GetDescriptors()[0].GetEntries()[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.GetDomain() == "bench" && v.GetKey() == envoyDescriptorKey {
		s.values[v.GetValue()]++
	}
	code := rlsv3.RateLimitResponse_OK
	if strings.HasSuffix(v.GetValue(), "-7") {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code}, nil
}

// TestRunGRPCCountsEveryCall drives a real gRPC server on loopback with 16
// callers over 2 connections: every call the server answered is counted,
// OK or failed (OVER_LIMIT), and the keys go round the 10 of the run.
func TestRunGRPCCountsEveryCall(t *testing.T) {
	svc := &countingRLS{values: map[string]int{}}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	run, err := runGRPC(context.Background(), ln.Addr().String(), "bench", "r1", 10, 16, 2, 300*time.Millisecond, 5*time.Second)
	require.NoError(t, err)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	total, failed := 0, 0
	for v, n := range svc.values {
		if strings.HasPrefix(v, "r1-") && v != "r1-connect" {
			total += n
		}
		if v == "r1-7" {
			failed = n
		}
	}
	assert.Equal(t, total, run.OK+run.Failed, "every call answered is counted")
	assert.Equal(t, failed, run.Failed, "OVER_LIMIT answers fail")
	assert.Equal(t, "OVER_LIMIT", run.FirstFailure)
	assert.Equal(t, 2, svc.values["r1-connect"], "one call per connection to connect")
	assert.Len(t, svc.values, 11, "keys r1-0..r1-9 and the connection calls")
	assert.Positive(t, run.OK)
}

func TestGRPCBenchFlags(t *testing.T) {
	o := benchOptions{rounds: 1, duration: time.Second, connections: 64, fixedFor: time.Second, keys: 1, timeout: time.Second,
		policy: "bench", generator: "grpc", route: "grpc", grpcConns: 4}
	require.NoError(t, o.targets.Set("t=grpc://127.0.0.1:1"))
	require.NoError(t, o.validate())
	o.fixedRate = 100
	assert.EqualError(t, o.validate(), "loadgen: --fixed-rate must be 0 with --generator grpc (the fixed-rate run is vegeta's, over HTTP)")
	o.fixedRate, o.route = 0, "json"
	assert.EqualError(t, o.validate(), "loadgen: --route must be grpc exactly when --generator is grpc")
	o.route = "grpc"
	require.NoError(t, o.targets.Set("h=http://127.0.0.1:2"))
	assert.EqualError(t, o.validate(), "loadgen: --target must be grpc://HOST:PORT with --generator grpc")
}
