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

	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/envoy"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// errNoEnvoy is returned by ServeGRPC when the configuration asks for no
// Envoy API.
var errNoEnvoy = errors.New("app: no Envoy rate-limit API: set --grpc-addr or --envoy-config")

// loadEnvoyRules reads --envoy-config when set. It returns nil rules when
// neither --grpc-addr nor --envoy-config is set, and empty rules (every
// descriptor answers OK) for a gRPC server without configuration.
func loadEnvoyRules(cfg config.Config) (*envoy.Rules, error) {
	if cfg.EnvoyConfig == "" {
		if cfg.GRPCAddr == "" {
			return nil, nil
		}
		return envoy.NewRules(envoyOptions(cfg)), nil
	}
	return envoy.LoadDir(cfg.EnvoyConfig, envoyOptions(cfg))
}

// envoyOptions are cfg's settings of the Envoy API.
func envoyOptions(cfg config.Config) envoy.Options {
	return envoy.Options{
		MergeDomains:               cfg.EnvoyMergeDomainConfig,
		ResponseHeaders:            cfg.EnvoyResponseHeaders,
		DynamicMetadata:            cfg.EnvoyResponseDynamicMetadata,
		StopIncrementWhenOverLimit: cfg.EnvoyStopIncrementWhenOverLimit,
		QuotaMode:                  cfg.EnvoyQuotaMode,
		LimitHeaders:               cfg.EnvoyLimitHeaders,
		LimitHeaderNames: envoy.LimitHeaderNames{
			Limit: cfg.EnvoyLimitLimitHeader, Remaining: cfg.EnvoyLimitRemainingHeader, Reset: cfg.EnvoyLimitResetHeader,
		},
		ShadowMode: cfg.EnvoyShadowMode,
	}
}

// envoyClash refuses a configuration with a policy named like one that
// rules derive from an Envoy descriptor: the two would share counters. It
// runs at start and on every reload; rules may be nil.
func envoyClash(rules *envoy.Rules, cfg config.Config) error {
	if rules == nil {
		return nil
	}
	for _, p := range rules.Policies() {
		if _, clash := cfg.Policies[p.Name]; clash {
			return &config.Error{Field: "policies." + p.Name, Reason: "an Envoy descriptor in " + cfg.EnvoyConfig + " derives the same policy name; rename one"}
		}
	}
	return nil
}

// ServeGRPC answers Envoy's rate-limit API (and grpc.health.v1) on ln, over
// TLS when the gRPC listener has a certificate, until ctx is done, then
// stops gracefully: health turns NOT_SERVING, calls in flight get up to the
// shutdown timeout to finish, then are cut. It returns nil after a clean
// stop.
func (a *App) ServeGRPC(ctx context.Context, ln net.Listener) error {
	if a.current.Load().Envoy == nil {
		return errors.Join(errNoEnvoy, ln.Close())
	}
	opts := grpcOptions(a.cfg)
	if a.grpcTLS != nil {
		opts = append(opts, grpc.Creds(countedCreds{credentials.NewTLS(a.grpcTLS.Config()), a.handshakeErrors.WithLabelValues(listenerGRPC)}))
	}
	srv, hs := envoy.NewGRPCServer(envoy.NewService(snapshot.EnvoySource(a.current.Load)), a.log, opts...)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("app: grpc serve: %w", err)
	case <-ctx.Done():
	}
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
	if err := <-served; err != nil {
		return fmt.Errorf("app: grpc serve: %w", err)
	}
	return nil
}

// serveAll runs serve[i] on lns[i], each in its goroutine, until ctx is
// done or one fails, which stops the others.
func (a *App) serveAll(ctx context.Context, lns []net.Listener, serve []func(context.Context, net.Listener) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(lns))
	var wg sync.WaitGroup
	for i := range lns {
		wg.Go(func() {
			errs[i] = serve[i](ctx, lns[i])
			cancel()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
