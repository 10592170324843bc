package envoy

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

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
// opts are added to the server's own (connection bounds, keepalive).
func NewGRPCServer(svc *Service, log *slog.Logger, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.ChainUnaryInterceptor(recoverUnary(log)),
	}, opts...)...)
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
