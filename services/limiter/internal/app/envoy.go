package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/envoy"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// errNoEnvoy is returned by ServeGRPC when the configuration asks for no
// Envoy API.
var errNoEnvoy = errors.New("app: no Envoy rate-limit API: set --grpc-addr or --envoy-config")

// loadEnvoyRules reads --envoy-config when set. It returns nil rules when
// neither --grpc-addr nor --envoy-config is set, and empty rules (every
// descriptor answers OK) for a gRPC server without configuration. A policy
// named like one of the service's own would share its counters: refused.
func loadEnvoyRules(cfg config.Config) (*envoy.Rules, error) {
	if cfg.EnvoyConfig == "" {
		if cfg.GRPCAddr == "" {
			return nil, nil
		}
		return envoy.NewRules(), nil
	}
	rules, err := envoy.LoadDir(cfg.EnvoyConfig)
	if err != nil {
		return nil, err
	}
	if err := envoyClash(rules, cfg); err != nil {
		return nil, err
	}
	return rules, nil
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

// newEnvoyService returns the Envoy API on the app's store, clock, metrics
// and offenders tracker, or nil when the configuration asks for none.
func (a *App) newEnvoyService(m *httpapi.Metrics, off *httpapi.Offenders) (*envoy.Service, error) {
	if a.envoyRules == nil {
		return nil, nil
	}
	if len(a.envoyRules.Domains()) == 0 {
		a.log.Warn("the gRPC server has no Envoy configuration (--envoy-config): every descriptor answers OK")
	}
	svc, err := envoy.New(envoy.Options{
		Rules: a.envoyRules, Store: a.store, StoreName: string(a.cfg.Store), Clock: a.clock, Metrics: m, Offenders: off,
	})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return svc, nil
}

// envoyAPI returns the service as the HTTP engine's /json backend: a nil
// interface, not a typed nil, when there is none.
func (a *App) envoyAPI() httpapi.EnvoyService {
	if a.envoy == nil {
		return nil
	}
	return a.envoy
}

// storedPolicies returns every policy whose state the store keeps: the
// configuration's and the Envoy descriptors', for the pruning job.
func (a *App) storedPolicies() []limiter.Policy {
	a.policiesMu.Lock()
	defer a.policiesMu.Unlock()
	return withEnvoy(a.policies, a.envoyRules)
}

// withEnvoy returns policies followed by the policies rules derive (rules
// may be nil).
func withEnvoy(policies []limiter.Policy, rules *envoy.Rules) []limiter.Policy {
	if rules == nil {
		return policies
	}
	return slices.Concat(policies, rules.Policies())
}

// ServeGRPC answers Envoy's rate-limit API (and grpc.health.v1) on ln until
// ctx is done, then stops gracefully: health turns NOT_SERVING, calls in
// flight get up to the shutdown timeout to finish, then are cut. It returns
// nil after a clean stop.
func (a *App) ServeGRPC(ctx context.Context, ln net.Listener) error {
	if a.envoy == nil {
		return errors.Join(errNoEnvoy, ln.Close())
	}
	srv, hs := envoy.NewGRPCServer(a.envoy, a.log)
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

// serveBoth runs Serve on ln and ServeGRPC on grpcLn until ctx is done or
// either fails, which stops the other.
func (a *App) serveBoth(ctx context.Context, ln, grpcLn net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var grpcErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		grpcErr = a.ServeGRPC(ctx, grpcLn)
		cancel()
	})
	err := a.Serve(ctx, ln)
	cancel()
	wg.Wait()
	return errors.Join(err, grpcErr)
}
