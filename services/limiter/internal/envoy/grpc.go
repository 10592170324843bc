package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// Service answers Envoy's rate-limit gRPC API: it adapts each call to
// Decide. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	current func() *snapshot.Snapshot
}

// NewService returns a Service deciding with the configuration current
// returns, as the HTTP routes do (httpapi.Options.Snapshot): each call
// loads one snapshot and finishes on it, whatever a reload publishes
// meanwhile. Its Envoy rules must not be nil.
func NewService(current func() *snapshot.Snapshot) *Service { return &Service{current: current} }

// ShouldRateLimit answers one gRPC call (see Decide), its error as a
// status (see grpcStatus).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	snap := s.current()
	resp, err := Decide(ctx, snap.Decider, snap.Envoy, req)
	if err != nil {
		return nil, grpcStatus(err)
	}
	return resp, nil
}

// grpcStatus is the status of an error of Decide, the one place errors
// become statuses: InvalidArgument for an invalid request; for a decision
// the store could not make, Canceled when the caller went away (nothing to
// blame on the store; tested first, as POST /json does, since a store may
// wrap it with ErrOverloaded), ResourceExhausted when this instance shed it,
// Unavailable else. Envoy's failure_mode_deny decides what an error means
// for the request.
func grpcStatus(err error) error {
	switch {
	case errors.Is(err, ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "envoy: the call was cancelled: "+err.Error())
	case errors.Is(err, limiter.ErrOverloaded):
		return status.Error(codes.ResourceExhausted, "envoy: this instance is overloaded: "+err.Error())
	}
	return status.Error(codes.Unavailable, "envoy: the rate-limit store could not decide: "+err.Error())
}

// MaxMessageBytes bounds a received gRPC message (1 MiB); a larger one is
// refused with ResourceExhausted before it is decoded.
const MaxMessageBytes = 1 << 20

// ServiceName is the gRPC service Envoy calls, also the name its health is
// reported under.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// NewGRPCServer returns a gRPC server answering Envoy's rate-limit API with
// svc, and the standard health service (grpc.health.v1) reporting SERVING
// for "" and ServiceName until its owner sets otherwise (the service follows
// /readyz). Call the health server's Shutdown when a graceful stop begins,
// so that health checks fail while in-flight calls finish. A
// panic in a call is logged to log (nil discards) and answered Internal.
// opts are added before the server's own (connection bounds, keepalive):
// an interceptor among them runs around the server's (a trace span sees
// the Internal of a recovered panic).
func NewGRPCServer(svc *Service, log *slog.Logger, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := grpc.NewServer(slices.Concat(opts, []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.ChainUnaryInterceptor(recoverUnary(log)),
	})...)
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	return srv, hs
}

// recoverUnary turns a panic in a handler into an Internal status that says
// nothing of the panic; the value and the stack go to the log.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.LogAttrs(ctx, slog.LevelError, "panic in gRPC handler",
					slog.String("method", info.FullMethod),
					slog.String("panic", fmt.Sprint(r)),
					slog.String("stack", string(debug.Stack())))
				resp, err = nil, status.Error(codes.Internal, "envoy: internal error")
			}
		}()
		return handler(ctx, req)
	}
}
