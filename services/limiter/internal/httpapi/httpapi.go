// Package httpapi is the limiter service's HTTP interface: a Gin engine with
// the seed routes (/ping, /status, /rate/*), the generic /v1/check, health
// and metrics. Handlers translate between HTTP and the limiter library's
// types; every error answer is an RFC 9457 problem. The store never sees Gin.
package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate/services/limiter/internal/canon"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// Options configures New. Snapshot and Registry are required.
type Options struct {
	// Snapshot returns the configuration in force; each request calls it
	// once and is served on what it returns. POST /json is served when the
	// first snapshot has Envoy rules.
	Snapshot func() *snapshot.Snapshot
	// AdminKey guards DELETE /rate/reset and GET /admin/offenders, which
	// are served where the decision APIs are (see Listener); empty means
	// always 403.
	AdminKey string
	// Logger receives errors, state changes and the access log; nil
	// discards.
	Logger *slog.Logger
	// AccessLog says which requests get a line at INFO: none (the
	// default), refusals (429) sampled per key, or all.
	AccessLog AccessLog
	// Registry receives tollgate_http_requests_total and is served on
	// /metrics.
	Registry *prometheus.Registry
	// Draining, when not nil and true, makes /readyz answer 503 so that
	// load balancers stop sending traffic during a graceful shutdown.
	Draining func() bool
	// Listener says which routes the engine serves: all of them (the
	// default), the public ones or the internal ones (see Listener).
	Listener Listener
	// PingSources are /ping's key sources, first that applies wins; empty
	// means header then peer: seed 000's X-Client-Key (docs/seeds.md), else
	// the address.
	PingSources []identity.Source
	// RateSources are /rate/check's and /rate/status's key sources, first
	// that applies wins; empty means user (seed 001's X-User-Id).
	RateSources []identity.Source
	// EndpointFold are the foldings of /rate/* endpoints beyond NFC.
	EndpointFold canon.Fold
	// AdminFailureStore counts the wrong admin keys of each client, under
	// a fixed window of a minute: a store of the process's own (the
	// service gives a bounded memory store; a full one evicts clients that
	// are not blocked first). Required unless Listener is PublicRoutes.
	AdminFailureStore Allower
	// AdminFailures bounds the wrong admin keys of one client per minute;
	// over it a wrong key is answered 429, a valid one still passes. 0
	// means DefaultAdminFailures.
	AdminFailures int64
	// Trace, when not nil, runs first on every request, its route
	// matched: it starts the request's trace span, named by the route
	// (internal/telemetry). Nil: none.
	Trace gin.HandlerFunc
}

// AccessLog says which requests the access log writes a line for.
type AccessLog uint8

const (
	// AccessLogOff writes no line per request: errors and state changes
	// are logged apart.
	AccessLogOff AccessLog = iota
	// AccessLogRefusals writes a line per 429, at most one per client key
	// a second; that line counts the refusals of the key folded since the
	// key's previous line.
	AccessLogRefusals
	// AccessLogAll writes a line per request.
	AccessLogAll
)

// Listener names the set of routes an engine serves.
type Listener uint8

const (
	// AllRoutes serves every route on one listener.
	AllRoutes Listener = iota
	// PublicRoutes serves the seed routes (but DELETE /rate/reset) and
	// health: what clients reach when the decision APIs are on an internal
	// listener.
	PublicRoutes
	// InternalRoutes serves /v1/check, /v1/forward-auth, POST /json, /metrics, every admin
	// route (DELETE /rate/reset, /admin/*) and health: for trusted callers
	// (gateways, operators, Prometheus). Being the only engine with admin
	// routes, it holds the process's one admin throttle.
	InternalRoutes
)

// DefaultAdminFailures is how many wrong admin keys per minute one client
// may send before the next ones are answered 429.
const DefaultAdminFailures = 20

// handler holds what the handlers share. It is immutable after New.
type handler struct {
	current     func() *snapshot.Snapshot
	log         *slog.Logger
	requests    *prometheus.CounterVec // route, code_class
	adminKey    *[32]byte              // SHA-256 of the admin key; nil when unset
	draining    func() bool
	listener    Listener
	pingSources []identity.Source
	rateSources []identity.Source
	fold        canon.Fold
	guard       *adminGuard
	// storeErrors samples the store-error log lines.
	storeErrors *sampler
	access      AccessLog
	// refusals samples the access log's refusal lines, per client key.
	refusals *keySampler
}

// New returns the service's Gin engine. The engine is safe for concurrent
// use; New itself does not start anything.
func New(o Options) (*gin.Engine, error) {
	if o.Snapshot == nil || o.Registry == nil {
		return nil, errors.New("httpapi: options need a snapshot and a registry")
	}
	h := &handler{current: o.Snapshot, log: o.Logger, draining: o.Draining, listener: o.Listener, pingSources: o.PingSources, rateSources: o.RateSources, fold: o.EndpointFold,
		storeErrors: newSampler(storeErrorBurst, storeErrorInterval, time.Now), access: o.AccessLog, refusals: newKeySampler(refusalKeys)}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if len(h.rateSources) == 0 {
		h.rateSources = []identity.Source{identity.User}
	}
	if len(h.pingSources) == 0 {
		h.pingSources = []identity.Source{identity.Header, identity.Peer}
	}
	if o.AdminFailures == 0 {
		o.AdminFailures = DefaultAdminFailures
	}
	var err error
	if o.Listener != PublicRoutes {
		if h.guard, err = newAdminGuard(o.AdminFailureStore, o.AdminFailures); err != nil {
			return nil, err
		}
	}
	if o.AdminKey != "" {
		sum := adminDigest(o.AdminKey)
		h.adminKey = &sum
	}
	h.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_http_requests_total",
		Help: "HTTP requests by route template (unmatched for unknown paths) and status class.",
	}, []string{"route", "code_class"})
	if err := o.Registry.Register(h.requests); err != nil {
		// A second engine (the internal listener's) counts into the first's.
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, errors.Join(errors.New("httpapi: register metrics"), err)
		}
		h.requests = are.ExistingCollector.(*prometheus.CounterVec)
	}
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	// Gin's c.ClientIP is never used: the snapshot's client rules
	// (identity.Resolver, httplimit.Clients) name the client. Trusting no
	// proxy keeps it harmless should a handler call it.
	if err := e.SetTrustedProxies(nil); err != nil {
		return nil, fmt.Errorf("httpapi: trusted proxies: %w", err)
	}
	if o.Trace != nil {
		e.Use(o.Trace)
	}
	e.Use(h.requestID, h.observe, h.recover)
	e.NoRoute(func(c *gin.Context) { h.writeProblem(c, fail(http.StatusNotFound, "no such route")) })
	e.NoMethod(func(c *gin.Context) {
		h.writeProblem(c, fail(http.StatusMethodNotAllowed, "method "+c.Request.Method+" is not allowed here; see the Allow header"))
	})

	// HEAD is served wherever GET is (RFC 9110 section 9.3.2): net/http
	// sends the headers and drops the body.
	get := func(path string, f gin.HandlerFunc) {
		e.GET(path, f)
		e.HEAD(path, f)
	}
	get("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	get("/readyz", h.serve(h.handleReady))
	// envoyproxy/ratelimit's readiness path, which Envoy Gateway probes.
	get("/healthcheck", h.serve(h.handleReady))
	get("/openapi.json", handleOpenAPI)
	if o.Listener != InternalRoutes {
		get("/ping", h.serve(h.handlePing))
		get("/status", h.serve(h.handleStatus))
		e.POST("/rate/check", h.serve(h.handleCheck))
		get("/rate/status", h.serve(h.handleRateStatus))
	}
	if o.Listener != PublicRoutes {
		e.DELETE("/rate/reset/:userId", h.serve(h.handleReset))
		e.POST("/v1/check", h.serve(h.handleV1Check))
		for _, m := range forwardAuthMethods {
			e.Handle(m, ForwardAuthPath, h.serve(h.handleForwardAuth))
		}
		get("/admin/offenders", h.serve(h.handleOffenders))
		if o.Snapshot().Envoy != nil {
			e.POST("/json", h.serve(h.handleEnvoyJSON))
		}
		get("/metrics", gin.WrapH(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})))
	}
	return e, nil
}
