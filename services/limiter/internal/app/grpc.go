package app

import (
	"context"
	"net"
	"runtime"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/connlimit"
)

// grpcOptions bound what one gRPC client can hold on ln: a connection must
// finish its HTTP/2 handshake within the read-header timeout, an idle one
// is closed after the idle timeout, pings more often than every 10 s (or
// with no call in flight) are refused, a connection carries at most 256
// concurrent calls, a call must end within the read timeout (see
// callDeadline), and when ln is bounded a connection with no call in
// flight may be reclaimed for another client (see keepBusy). Calls run on
// one of GOMAXPROCS worker goroutines when one is free, whose stack has
// already grown, rather than each on a new goroutine that grows its own
// (about a sixth more calls a second from one caller; see
// docs/benchmarks.md).
func grpcOptions(cfg config.Config, ln net.Listener) []grpc.ServerOption {
	taps := []tap.ServerInHandle{callDeadline(cfg.ReadTimeout)}
	if l, ok := ln.(*connlimit.Listener); ok {
		// Last: grpc-go does not cancel the context of a stream a tap
		// refuses, so a tap after keepBusy refusing one would leave its
		// connection busy until the call's deadline.
		taps = append(taps, keepBusy(l))
	}
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(cfg.ReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second}),
		grpc.MaxConcurrentStreams(256),
		grpc.InTapHandle(eachTap(taps)),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
}

// eachTap runs taps in turn, each on the context the one before returned:
// a server has one tap.
func eachTap(taps []tap.ServerInHandle) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		for _, t := range taps {
			var err error
			if ctx, err = t(ctx, info); err != nil {
				return ctx, err
			}
		}
		return ctx, nil
	}
}

// staysOpen reports whether a call to method is a stream meant to stay
// open as long as its client wants (grpc.health.v1.Health/Watch): it has no
// deadline, and does not keep its connection busy.
func staysOpen(method string) bool {
	return method == healthpb.Health_Watch_FullMethodName
}

// callDeadline bounds every call but those that stay open (staysOpen) by d
// from the arrival of its headers: a call whose request message never
// arrives ends with DeadlineExceeded instead of holding its goroutine until
// the client leaves. A client's own shorter deadline still applies; d <= 0
// bounds nothing.
func callDeadline(d time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if d <= 0 || staysOpen(info.FullMethodName) {
			return ctx, nil
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		// The stream's own context, this one's parent, is cancelled when
		// the call ends, which releases the timer: nothing to call here.
		_ = cancel
		return ctx, nil
	}
}

// keepBusy keeps a connection of l busy, not to be reclaimed for another
// client, from the arrival of a call's headers until the call ends (its
// stream's context, cancelled then, ends it): an open connection with no
// call in flight is idle, as an HTTP keep-alive between requests is (see
// connlimit.Options.IdleBetweenCalls), so connections that finished their
// handshake but make no call cannot hold every slot until the idle
// timeout. A call that stays open (staysOpen) is not counted: it has no
// deadline, and would hold its slot for good. It works in the tap, on the
// goroutine reading the connection, and adds no frame to the call's own.
func keepBusy(l *connlimit.Listener) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if staysOpen(info.FullMethodName) {
			return ctx, nil
		}
		if p, ok := peer.FromContext(ctx); ok {
			if end := l.BeginCall(p.LocalAddr, p.Addr); end != nil {
				context.AfterFunc(ctx, end)
			}
		}
		return ctx, nil
	}
}
