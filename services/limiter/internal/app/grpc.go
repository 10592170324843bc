package app

import (
	"context"
	"runtime"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// grpcOptions bound what one gRPC client can hold: a connection must finish
// its HTTP/2 handshake within the read-header timeout, an idle one is closed
// after the idle timeout, pings more often than every 10 s (or with no call
// in flight) are refused, a connection carries at most 256 concurrent
// calls, and a call must end within the read timeout (see callDeadline).
// Calls run on a worker goroutine per CPU when one is free, whose stack
// has already grown, rather than each on a new goroutine that grows its
// own (about a sixth more calls a second from one caller; see
// docs/benchmarks.md).
func grpcOptions(cfg config.Config) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(cfg.ReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second}),
		grpc.MaxConcurrentStreams(256),
		grpc.InTapHandle(callDeadline(cfg.ReadTimeout)),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
}

// callDeadline bounds every call but grpc.health.v1.Health/Watch (a stream
// meant to stay open) by d from the arrival of its headers: a call whose
// request message never arrives ends with DeadlineExceeded instead of
// holding its goroutine until the client leaves. A client's own shorter
// deadline still applies; d <= 0 bounds nothing.
func callDeadline(d time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if d <= 0 || info.FullMethodName == healthpb.Health_Watch_FullMethodName {
			return ctx, nil
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		// The stream's own context, this one's parent, is cancelled when
		// the call ends, which releases the timer: nothing to call here.
		_ = cancel
		return ctx, nil
	}
}
