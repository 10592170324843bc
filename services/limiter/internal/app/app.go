// Package app wires the limiter service together: configuration → store →
// HTTP engine, the background pruning job, the HTTP server with its timeouts,
// and a graceful shutdown that lets in-flight requests finish and closes the
// store last.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/connlimit"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
	"github.com/tollgate/tollgate/services/limiter/internal/telemetry"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
	"github.com/tollgate/tollgate/services/limiter/internal/xds"
)

// probeTimeout bounds the start-up check that the store can decide.
const probeTimeout = 5 * time.Second

// App is one service instance: a store, its HTTP engine and the pruning job.
// Create it with New, run it with Serve, release it with Close. Its methods
// are safe for concurrent use.
type App struct {
	cfg   config.Config
	clock limiter.Clock
	log   *slog.Logger
	stack *storeStack // the configured store and what wraps it
	// engine serves every route, or the public ones with --internal-addr,
	// and internal the internal listener's (nil without --internal-addr):
	// the Gin engines, traced with --tracing.
	engine, internal http.Handler
	tracing          *telemetry.Tracing // --tracing; nil: off
	pruned           prometheus.Counter
	pruneErr         prometheus.Counter
	registry         *prometheus.Registry // what /metrics serves

	// The TLS of the public, internal and gRPC listeners; nil: plain TCP.
	publicTLS, internalTLS, grpcTLS *tlsfiles.Reloader
	handshakeErrors                 *prometheus.CounterVec // tollgate_tls_handshake_errors_total

	// current is the configuration in force: every request, the pruning
	// job and the gRPC server read it, Reload alone replaces it.
	current   atomic.Pointer[snapshot.Snapshot]
	running   config.Config     // the configuration of current; guarded by reloading
	xds       *xds.Client       // --envoy-xds-server's subscription; nil without
	metrics   *decide.Metrics   // shared by every snapshot
	offenders *decide.Offenders // shared by every snapshot

	reloads       *prometheus.CounterVec        // tollgate_config_reloads_total
	load          func() (config.Config, error) // WithReload's source; nil: Reload fails
	reloadSignals <-chan os.Signal              // each one calls Reload
	reloading     sync.Mutex                    // one Reload at a time

	stopOnce sync.Once
	stopping chan struct{} // closed when the server starts shutting down

	clockOffset time.Duration // test only: added to clock, see ClockOffsetEnv
}

// Option configures New.
type Option func(*App)

// WithClock makes the app read time from c; the default is the system clock.
func WithClock(c limiter.Clock) Option { return func(a *App) { a.clock = c } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(a *App) { a.log = l } }

// NewLogger returns the logger the configuration asks for, writing to w.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// New opens the configured store, checks that it can decide every policy,
// and builds the HTTP engine. Errors due to the configuration wrap
// config.ErrInvalid; others are runtime failures (a file that cannot be
// opened, ...). On error nothing is left open.
func New(ctx context.Context, cfg config.Config, opts ...Option) (*App, error) {
	a := &App{
		cfg:      cfg,
		clock:    limiter.SystemClock{},
		log:      slog.New(slog.DiscardHandler),
		stopping: make(chan struct{}),
	}
	for _, o := range opts {
		o(a)
	}
	var err error
	if a.xds, err = a.newXDS(cfg); err != nil {
		return nil, err
	}
	rules, err := loadEnvoyRules(cfg)
	if err != nil {
		return nil, err
	}
	if err := a.loadTLS(); err != nil {
		return nil, err
	}
	warnPlainDecisions(a.log, cfg)

	_, systemClock := a.clock.(limiter.SystemClock)
	if a.clockOffset != 0 {
		a.clock = shiftedClock{clock: a.clock, d: a.clockOffset}
		a.log.Warn("TEST ONLY: "+ClockOffsetEnv+" shifts this instance's clock; never set it in production", "offset", a.clockOffset.String())
	}
	if cfg.Tracing {
		if a.tracing, err = telemetry.New(ctx, telemetry.Options{ClientKey: cfg.TracingClientKey, Peer: cfg.TracingPeer, Store: string(cfg.Store)}); err != nil {
			return nil, err
		}
	}
	a.registry = prometheus.NewRegistry()
	if a.stack, err = openStack(cfg, cfg.RedisClientTime || !systemClock, a.registry, a.log, a.tracing); err != nil {
		return nil, errors.Join(err, a.shutdownTracing())
	}
	if err := a.build(ctx, rules); err != nil {
		return nil, errors.Join(err, a.stack.bounded.Close(), a.shutdownTracing())
	}
	a.stack.warnEviction(ctx, a.log)
	return a, nil
}

// build probes the store, creates the other metrics, the first snapshot
// and the engine. rules are the Envoy rules; nil when no Envoy API is
// asked for.
func (a *App) build(ctx context.Context, rules *envoyrules.Rules) error {
	reg := a.registry
	a.pruned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_pruned_records_total",
		Help: "Expired windows and events deleted by the pruning job.",
	})
	a.pruneErr = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_prune_errors_total",
		Help: "Runs of the pruning job that failed.",
	})
	a.reloads = newReloadsCounter()
	a.handshakeErrors = newHandshakeErrors(a.publicTLS, a.internalTLS, a.grpcTLS)
	for _, c := range []prometheus.Collector{
		a.pruned, a.pruneErr, a.reloads, a.handshakeErrors,
		tlsCollector{listenerPublic: a.publicTLS, listenerInternal: a.internalTLS, listenerGRPC: a.grpcTLS},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("app: register metrics: %w", err)
		}
	}
	var err error
	if a.metrics, err = decide.NewMetrics(reg); err != nil {
		return err
	}
	hasher, err := offenders.NewHasher(a.cfg.HashSecret)
	if err != nil {
		return &config.Error{Field: config.HashSecretEnv, Reason: err.Error()}
	}
	if a.offenders, err = decide.NewOffenders(a.cfg.OffendersWindow, a.cfg.OffendersRawKeys, hasher); err != nil {
		return err
	}
	warnCatchAll(a.log, a.cfg.TrustedProxies)
	snap, err := a.snapshot(a.cfg.Live, rules)
	if err != nil {
		return err
	}
	// The probe asks the primary itself, which must show its own errors.
	if err := a.probe(ctx, a.stack.bounded, snap.Stored()); err != nil {
		// A remote store that cannot answer yet is an outage, not a
		// configuration error: crash-looping would defeat on_store_error,
		// so serve degraded (/readyz answers 503 until the store does).
		if !a.stack.remote() || !errors.Is(err, limiter.ErrUnavailable) {
			return err
		}
		a.log.Warn("the "+string(a.cfg.Store)+" store cannot decide at start; serving anyway: each policy's on_store_error applies and /readyz answers 503 until it answers", "error", err)
	}
	a.current.Store(snap)
	a.running = a.cfg
	switch {
	case a.cfg.EnvoyXDSServer != "":
		a.log.Info("the Envoy rules come from xDS: every descriptor answers OK until the first version is applied", "server", a.cfg.EnvoyXDSServer, "node", a.cfg.EnvoyXDSNodeID)
	case rules != nil && len(rules.Domains()) == 0:
		a.log.Warn("the gRPC server has no Envoy configuration (--envoy-config): every descriptor answers OK")
	}
	opts := httpapi.Options{
		Snapshot:          a.current.Load,
		AdminKey:          a.cfg.AdminKey,
		AdminFailureStore: adminFailureStore(),
		Logger:            a.log,
		Registry:          reg,
		Draining:          a.draining,
		PingSources:       a.cfg.PingKey,
		RateSources:       a.cfg.RateKey,
		EndpointFold:      a.cfg.EndpointFold,
		AccessLog:         accessLog(a.cfg.AccessLog),
	}
	if a.tracing != nil {
		opts.Trace = a.tracing.Gin
	}
	if a.cfg.InternalAddr != "" {
		opts.Listener = httpapi.InternalRoutes
		if a.internal, err = newEngine(opts); err != nil {
			return err
		}
		opts.Listener = httpapi.PublicRoutes
	}
	a.engine, err = newEngine(opts)
	return err
}

// newEngine returns the Gin engine of opts (traced by opts.Trace with
// --tracing).
func newEngine(opts httpapi.Options) (http.Handler, error) {
	e, err := httpapi.New(opts)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return e, nil
}

// tracingFlush bounds the time the spans still queued at stop have to
// reach the collector: one that is down must not hold the stop long.
const tracingFlush = 5 * time.Second

// shutdownTracing sends the spans still queued and stops the exporter,
// within tracingFlush; without --tracing it does nothing.
func (a *App) shutdownTracing() error {
	if a.tracing == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
	defer cancel()
	return a.tracing.Shutdown(ctx)
}

// snapshot builds, validated whole, the snapshot of cfg's policies, routes,
// on_store_error modes and identity rules with the Envoy rules (nil: no
// Envoy API). It reads nothing else of a reloaded configuration: what is
// not in cfg is the running one's (a.cfg), so that a reload applies a
// setting wholly or not at all. It publishes nothing.
func (a *App) snapshot(cfg config.Live, rules *envoyrules.Rules) (*snapshot.Snapshot, error) {
	if err := envoyClash(rules, cfg.Policies, a.cfg.EnvoyConfig); err != nil {
		return nil, err
	}
	policies := a.policiesOf(cfg)
	ids, err := resolver(cfg, a.cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	store := a.stack.forPolicies(cfg, policies)
	var tracer decide.Tracer // a nil *telemetry.Tracing would be a Tracer
	if a.tracing != nil {
		tracer = a.tracing
	}
	snap, err := snapshot.New(snapshot.Parts{
		Policies:    policies,
		PingRoute:   cfg.RoutePolicies[config.RoutePing],
		CheckRoute:  cfg.RoutePolicies[config.RouteCheck],
		Envoy:       rules,
		Store:       store,
		StoreName:   string(a.cfg.Store),
		Clock:       a.clock,
		Metrics:     a.metrics,
		Offenders:   a.offenders,
		Identity:    ids,
		DecisionAPI: decisionAPI(cfg),
		Budget:      decisionBudget(a.cfg, store),
		Gateway:     cfg.Gateway,
		Tracer:      tracer,
	})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return snap, nil
}

// accessLog is the engine's access-log mode of the configured one.
func accessLog(mode config.AccessLog) httpapi.AccessLog {
	switch mode {
	case config.AccessLogAll:
		return httpapi.AccessLogAll
	case config.AccessLogRefusals:
		return httpapi.AccessLogRefusals
	}
	return httpapi.AccessLogOff
}

// decisionBudget is the decision layer's bound on one request's decisions
// on store: --decision-timeout, but none on a store that never waits for a
// turn (the memory store: a shard lock held for one map update), where a
// bound would only cost every request a context and a timer.
func decisionBudget(cfg config.Config, store limiter.Store) time.Duration {
	if limiter.CapabilitiesOf(store).NeverWaits {
		return 0
	}
	return cfg.DecisionTimeout
}

// probe peeks every one of policies once, so that a store that cannot run a
// policy's algorithm, or cannot read at all, fails the start (or the reload)
// rather than the first request.
func (a *App) probe(ctx context.Context, store limiter.Store, policies []limiter.Policy) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	now := a.clock.Now()
	for _, p := range policies {
		_, err := store.Peek(ctx, p, limiter.Key{Subject: "tollgate-start-probe"}, now)
		switch {
		case errors.Is(err, limiter.ErrUnsupported):
			return &config.Error{Field: "policies." + p.Name + ".algorithm", Reason: fmt.Sprintf("%s is not supported by the %s store", p.Algorithm, a.cfg.Store)}
		case err != nil:
			return fmt.Errorf("app: store check: %w", err)
		}
	}
	return nil
}

// Handler returns the HTTP handler (the Gin engine, traced with
// --tracing): every route, or with --internal-addr the public ones.
func (a *App) Handler() http.Handler { return a.engine }

// InternalHandler returns the internal listener's handler, nil without
// --internal-addr.
func (a *App) InternalHandler() http.Handler { return a.internal }

// Stopping returns a channel closed once the server has begun its graceful
// shutdown: its listeners are closed and in-flight requests are finishing.
func (a *App) Stopping() <-chan struct{} { return a.stopping }

func (a *App) draining() bool {
	select {
	case <-a.stopping:
		return true
	default:
		return false
	}
}

// Prune deletes the state that can no longer affect a decision at the
// clock's now, for every policy, and returns how many records went.
func (a *App) Prune(ctx context.Context) (int64, error) {
	snap := a.current.Load()
	n, err := snap.Store.Prune(ctx, a.clock.Now(), snap.Stored())
	if err != nil {
		a.pruneErr.Inc()
		return n, fmt.Errorf("app: prune: %w", err)
	}
	a.pruned.Add(float64(n))
	return n, nil
}

// pruneLoop calls Prune every interval until ctx is done.
func (a *App) pruneLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := a.Prune(ctx); err != nil {
				a.log.Warn("prune failed", "error", err)
			} else {
				a.log.Debug("pruned", "records", n)
			}
		}
	}
}

// Serve answers HTTP (HTTPS with --tls-cert) on ln and runs the pruning job
// until ctx is done, then shuts down gracefully: the listener closes,
// in-flight requests get up to the configured shutdown timeout to finish,
// the pruning job stops. It does not close the store (Close does). It
// returns nil after a clean shutdown.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	pruneCtx, stopPrune := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { a.pruneLoop(pruneCtx, a.cfg.PruneInterval) })
	wg.Go(func() { a.reloadLoop(pruneCtx) })
	wg.Go(func() { a.watchEnvoy(pruneCtx) })
	wg.Go(func() { a.followXDS(pruneCtx) })
	defer func() {
		stopPrune()
		wg.Wait()
	}()
	return a.serveHTTP(ctx, ln, a.engine, a.publicTLS, true)
}

// ServeInternal answers the internal listener's routes on ln until ctx is
// done, then shuts down gracefully as Serve does. Without --internal-addr
// it closes ln and returns an error.
func (a *App) ServeInternal(ctx context.Context, ln net.Listener) error {
	if a.internal == nil {
		return errors.Join(errors.New("app: no internal listener: set --internal-addr"), ln.Close())
	}
	return a.serveHTTP(ctx, ln, a.internal, a.internalTLS, false)
}

// serveHTTP serves h on ln with the configured timeouts until ctx is done,
// then shuts down gracefully; with tlsFiles (not nil) it serves HTTPS,
// HTTP/2 included; main marks the server whose shutdown starts the
// draining (readiness 503).
func (a *App) serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, tlsFiles *tlsfiles.Reloader, main bool) error {
	errLog := httpErrorLog{log: a.log}
	if tlsFiles != nil {
		listener := listenerInternal
		if main {
			listener = listenerPublic
		}
		errLog.handshakeErrors = a.handshakeErrors.WithLabelValues(listener)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: a.cfg.ReadHeaderTimeout,
		ReadTimeout:       a.cfg.ReadTimeout,
		WriteTimeout:      a.cfg.WriteTimeout,
		IdleTimeout:       a.cfg.IdleTimeout,
		MaxHeaderBytes:    a.cfg.MaxHeaderBytes,
		ConnState:         connlimit.TrackState,
		ErrorLog:          log.New(errLog, "", 0),
	}
	if main {
		srv.RegisterOnShutdown(func() { a.stopOnce.Do(func() { close(a.stopping) }) })
	}

	serve := srv.Serve
	if tlsFiles != nil {
		// http.Server bounds a handshake by the shortest of the read-header,
		// read and write timeouts.
		srv.TLSConfig = tlsFiles.Config()
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	served := make(chan error, 1)
	go func() { served <- serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("app: serve: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down", "timeout", a.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("app: shutdown: %w", err), srv.Close())
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("app: serve: %w", serr))
	}
	return err
}

// Close closes the store, then, with --tracing, sends the spans still
// queued and stops the exporter. Call it after Serve has returned.
func (a *App) Close() error {
	var err error
	if cerr := a.current.Load().Store.Close(); cerr != nil {
		err = fmt.Errorf("app: close store: %w", cerr)
	}
	return errors.Join(err, a.shutdownTracing())
}

// Run is the whole service: New, listen on the configured address, Serve
// until ctx is done, Close. It logs the configuration (the admin key only as
// set/unset) and the address it listens on.
func Run(ctx context.Context, cfg config.Config, opts ...Option) (err error) {
	a, err := New(ctx, cfg, opts...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.Close()) }()
	names, addrs := []string{listenerPublic}, []string{cfg.Addr}
	serve := []func(context.Context, net.Listener) error{a.Serve}
	if cfg.InternalAddr != "" {
		names, addrs, serve = append(names, listenerInternal), append(addrs, cfg.InternalAddr), append(serve, a.ServeInternal)
	}
	if cfg.GRPCAddr != "" {
		names, addrs, serve = append(names, listenerGRPC), append(addrs, cfg.GRPCAddr), append(serve, a.ServeGRPC)
	}
	var lns []net.Listener
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return errors.Join(fmt.Errorf("app: %w", err), closeAll(lns))
		}
		lns = append(lns, ln)
	}
	lns = a.bound(names, lns)
	if err := a.registry.Register(connCollector{names: names, lns: lns}); err != nil {
		return errors.Join(fmt.Errorf("app: register metrics: %w", err), closeAll(lns))
	}
	perListener, perClient := connBounds(cfg, len(lns))
	attrs := []any{}
	for i, ln := range lns {
		attrs = append(attrs, names[i], ln.Addr().String())
	}
	a.log.Info("listening", append(attrs, "max_conns", perListener, "max_conns_per_client", perClient, "config", cfg)...)
	warnRoot(a.log, os.Geteuid())
	a.logFiles()
	return a.serveAll(ctx, lns, serve)
}

// warnRoot warns when the process runs as root (euid 0): nothing in the
// service needs it (ports under 1024 need CAP_NET_BIND_SERVICE alone), and
// the image's user is 65532.
func warnRoot(log *slog.Logger, euid int) {
	if euid == 0 {
		log.Warn("running as root (UID 0): the service needs no privilege; run it as an unprivileged user (the image's is 65532)")
	}
}

// logFiles says at start what the store writes to disk, so that no file
// appears unexplained.
func (a *App) logFiles() {
	if f := a.stack.backend.logFiles; f != nil {
		f(a.log)
	}
}
