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

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/envoy"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// errNoEnvoy is returned by ServeGRPC when the configuration asks for no
// Envoy API.
var errNoEnvoy = errors.New("app: no Envoy rate-limit API: set --grpc-addr, --envoy-config or --envoy-xds-server")

// loadEnvoyRules reads --envoy-config when set. It returns nil rules when
// none of --grpc-addr, --envoy-config and --envoy-xds-server is set, and
// empty rules (every descriptor answers OK) for a gRPC server without
// configuration or before xDS pushes the first version.
func loadEnvoyRules(cfg config.Config) (*envoyrules.Rules, error) {
	if cfg.EnvoyConfig == "" {
		if cfg.GRPCAddr == "" && cfg.EnvoyXDSServer == "" {
			return nil, nil
		}
		return envoyrules.NewRules(envoyOptions(cfg)), nil
	}
	return rulesInvalid(envoyrules.LoadDir(cfg.EnvoyConfig, envoyOptions(cfg)))
}

// rulesInvalid makes a problem of the Envoy rules (envoyrules.ErrRules) a
// configuration error (config.ErrInvalid): the service exits with status 2
// and a reload is refused, as for any other setting.
func rulesInvalid(rules *envoyrules.Rules, err error) (*envoyrules.Rules, error) {
	if errors.Is(err, envoyrules.ErrRules) {
		return rules, config.Invalid(err)
	}
	return rules, err
}

// envoyOptions are cfg's settings of the Envoy API.
func envoyOptions(cfg config.Config) envoyrules.Options {
	return envoyrules.Options{
		MergeDomains:               cfg.EnvoyMergeDomainConfig,
		ResponseHeaders:            cfg.EnvoyResponseHeaders,
		DynamicMetadata:            cfg.EnvoyResponseDynamicMetadata,
		StopIncrementWhenOverLimit: cfg.EnvoyStopIncrementWhenOverLimit,
		QuotaMode:                  cfg.EnvoyQuotaMode,
		LimitHeaders:               cfg.EnvoyLimitHeaders,
		LimitHeaderNames: envoyrules.LimitHeaderNames{
			Limit: cfg.EnvoyLimitLimitHeader, Remaining: cfg.EnvoyLimitRemainingHeader, Reset: cfg.EnvoyLimitResetHeader,
		},
		ShadowMode: cfg.EnvoyShadowMode,
	}
}

// envoyClash refuses policies of which one is named like one that rules
// (read from folder, or pushed by xDS when folder is empty) derive from an
// Envoy descriptor: the two would share counters. It runs at start and on
// every reload; rules may be nil.
func envoyClash(rules *envoyrules.Rules, policies map[string]limiter.Policy, folder string) error {
	if rules == nil {
		return nil
	}
	source := folder
	if source == "" {
		source = "the xDS version"
	}
	for _, p := range rules.Policies() {
		if _, clash := policies[p.Name]; clash {
			return &config.Error{Field: "policies." + p.Name, Reason: "an Envoy descriptor in " + source + " derives the same policy name; rename one"}
		}
	}
	return nil
}

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
	opts := append(grpcOptions(a.cfg), grpc.Creds(creds))
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
