package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/services/limiter/internal/envoy"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// errNoEnvoy is returned by ServeGRPC when the configuration asks for no
// Envoy API.
var errNoEnvoy = errors.New("app: no Envoy rate-limit API: set --grpc-addr, --envoy-config or --envoy-xds-server")

// ServeGRPC answers Envoy's rate-limit API and grpc.health.v1 on ln, over
// TLS when the gRPC listener has a certificate, until ctx is done. Health
// follows /readyz: SERVING while it would answer 200, NOT_SERVING while it
// would answer 503 (the store cannot decide), checked before the first
// call and then every healthInterval, with Watch streams told of each
// change. Then it stops gracefully: health turns NOT_SERVING, calls in
// flight get up to the shutdown timeout to finish, then are cut. It returns
// nil after a clean stop.
func (a *App) ServeGRPC(ctx context.Context, ln net.Listener) error {
	if a.current.Load().Envoy == nil {
		return errors.Join(errNoEnvoy, ln.Close())
	}
	creds := grpcCreds{TransportCredentials: insecure.NewCredentials()}
	if a.grpcTLS != nil {
		creds = grpcCreds{credentials.NewTLS(a.grpcTLS.Config()), a.handshakeErrors.WithLabelValues(listenerGRPC)}
	}
	opts := append(grpcOptions(a.cfg, ln), grpc.Creds(creds))
	if a.tracing != nil {
		opts = append(opts, a.tracing.GRPC())
	}
	srv, hs := envoy.NewGRPCServer(envoy.NewService(a.current.Load), a.log, opts...)
	healthCtx, stopHealth := context.WithCancel(ctx)
	var following sync.WaitGroup
	defer following.Wait()
	defer stopHealth()
	serving := a.setHealth(healthCtx, hs, true)
	following.Go(func() { a.followReadiness(healthCtx, hs, serving) })
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		srv.Stop() // its stream workers
		return fmt.Errorf("app: grpc serve: %w", err)
	case <-ctx.Done():
	}
	stopHealth()
	following.Wait()
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(a.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		a.log.Warn("gRPC calls still running after the shutdown timeout; cutting them")
		srv.Stop()
		<-stopped
	}
	// ErrServerStopped: the stop came before Serve began, which is clean.
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("app: grpc serve: %w", err)
	}
	return nil
}

// healthInterval is how often the gRPC health service asks what /readyz
// would answer.
const healthInterval = time.Second

// followReadiness sets hs's statuses every healthInterval to what /readyz
// answers (see setHealth) until ctx is done; serving is the status set last.
func (a *App) followReadiness(ctx context.Context, hs *health.Server, serving bool) {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			serving = a.setHealth(ctx, hs, serving)
		}
	}
}

// setHealth sets the statuses of hs (the server's, "", and Envoy's
// service's) to SERVING when /readyz would answer 200, NOT_SERVING when it
// would answer 503, and returns whether it is serving. A change from was
// (the status set before) is logged; a check cut short by ctx changes
// nothing.
func (a *App) setHealth(ctx context.Context, hs *health.Server, was bool) bool {
	err := httpapi.Ready(ctx, a.current.Load(), a.draining)
	if ctx.Err() != nil {
		return was
	}
	st := healthpb.HealthCheckResponse_SERVING
	if err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	hs.SetServingStatus("", st)
	hs.SetServingStatus(envoy.ServiceName, st)
	switch {
	case err != nil && was:
		a.log.Warn("gRPC health: NOT_SERVING (/readyz answers 503)", "error", err.Error())
	case err == nil && !was:
		a.log.Info("gRPC health: SERVING again")
	}
	return err == nil
}
