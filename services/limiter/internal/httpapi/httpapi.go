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

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Options configures New. Store, Clock, Registry and the routes' policies
// are required.
type Options struct {
	// Store decides; the handlers call it with the time read from Clock.
	Store limiter.Store
	// StoreName labels the store's metrics ("sqlite", "memory", "redis").
	StoreName string
	// Clock is read once per request.
	Clock limiter.Clock
	// Policies are every configured policy; /v1/check accepts their names.
	Policies []limiter.Policy
	// PingRoute and CheckRoute name the policies of the seed routes, in
	// evaluation order: /ping and /status use PingRoute, /rate/* CheckRoute.
	PingRoute, CheckRoute []string
	// AdminKey guards DELETE /rate/reset; empty means always 403.
	AdminKey string
	// TrustedProxies are the CIDRs whose forwarding headers c.ClientIP
	// believes; empty means none: the peer address is the client.
	TrustedProxies []string
	// Logger receives one line per request; nil discards.
	Logger *slog.Logger
	// Registry receives the metrics and is served on /metrics.
	Registry *prometheus.Registry
	// Draining, when not nil and true, makes /readyz answer 503 so that
	// load balancers stop sending traffic during a graceful shutdown.
	Draining func() bool
}

// route is a list of policies evaluated in order for one kind of request.
type route struct {
	policies     []limiter.Policy
	policyHeader string // RateLimit-Policy value; empty when all are shadows
	auditIndex   int    // the policy whose Request carries the audit endpoint
}

// newRoute builds a route. The audit row goes with the last enforcing
// policy: evaluation stops at the first enforcing refusal, so that policy
// allows only when every enforcing policy has allowed.
func newRoute(ps []limiter.Policy) route {
	r := route{policies: ps, policyHeader: PolicyHeader(ps), auditIndex: len(ps) - 1}
	for i := len(ps) - 1; i >= 0; i-- {
		if !ps[i].Shadow {
			r.auditIndex = i
			break
		}
	}
	return r
}

// handler holds what the handlers share. It is immutable after New.
type handler struct {
	store     limiter.Store
	clock     limiter.Clock
	log       *slog.Logger
	metrics   *Metrics
	counters  map[string]*policyCounters
	storeErr  prometheus.Counter
	storeTime prometheus.Observer
	ping      route
	check     route
	single    map[string]route // /v1/check: one route per policy
	adminKey  *[32]byte        // SHA-256 of the admin key; nil when unset
	draining  func() bool
}

// New returns the service's Gin engine. The engine is safe for concurrent
// use; New itself does not start anything.
func New(o Options) (*gin.Engine, error) {
	h, err := newHandler(o)
	if err != nil {
		return nil, err
	}
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	if len(o.TrustedProxies) == 0 {
		err = e.SetTrustedProxies(nil)
	} else {
		err = e.SetTrustedProxies(o.TrustedProxies)
	}
	if err != nil {
		return nil, fmt.Errorf("httpapi: trusted proxies: %w", err)
	}
	e.Use(h.requestID, h.observe, h.recover)
	e.NoRoute(func(c *gin.Context) { abortProblem(c, http.StatusNotFound, "no such route") })
	e.NoMethod(func(c *gin.Context) {
		abortProblem(c, http.StatusMethodNotAllowed, "method "+c.Request.Method+" is not allowed here; see the Allow header")
	})

	e.GET("/ping", h.handlePing)
	e.GET("/status", h.handleStatus)
	e.POST("/rate/check", h.handleCheck)
	e.GET("/rate/status", h.handleRateStatus)
	e.DELETE("/rate/reset/:userId", h.handleReset)
	e.POST("/v1/check", h.handleV1Check)
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", h.handleReady)
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})))
	return e, nil
}

func newHandler(o Options) (*handler, error) {
	if o.Store == nil || o.Clock == nil || o.Registry == nil {
		return nil, errors.New("httpapi: options need a store, a clock and a registry")
	}
	byName := make(map[string]limiter.Policy, len(o.Policies))
	for _, p := range o.Policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
		if _, dup := byName[p.Name]; dup {
			return nil, fmt.Errorf("httpapi: policy %q given twice", p.Name)
		}
		byName[p.Name] = p
	}
	resolve := func(what string, names []string) (route, error) {
		if len(names) == 0 {
			return route{}, fmt.Errorf("httpapi: route %s has no policy", what)
		}
		ps := make([]limiter.Policy, len(names))
		for i, n := range names {
			p, ok := byName[n]
			if !ok {
				return route{}, fmt.Errorf("httpapi: route %s: unknown policy %q", what, n)
			}
			ps[i] = p
		}
		return newRoute(ps), nil
	}
	ping, err := resolve("ping", o.PingRoute)
	if err != nil {
		return nil, err
	}
	check, err := resolve("check", o.CheckRoute)
	if err != nil {
		return nil, err
	}
	m, err := NewMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	h := &handler{
		store:     o.Store,
		clock:     o.Clock,
		log:       o.Logger,
		metrics:   m,
		counters:  make(map[string]*policyCounters, len(byName)),
		storeErr:  m.storeErrors.WithLabelValues(o.StoreName),
		storeTime: m.duration.WithLabelValues(o.StoreName),
		ping:      ping,
		check:     check,
		single:    make(map[string]route, len(byName)),
		draining:  o.Draining,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	for name, p := range byName {
		h.single[name] = newRoute([]limiter.Policy{p})
		h.counters[name] = &policyCounters{
			allowed: m.decisions.WithLabelValues(name, ResultAllowed),
			limited: m.decisions.WithLabelValues(name, ResultLimited),
			shadow:  m.decisions.WithLabelValues(name, ResultShadowLimited),
		}
	}
	if o.AdminKey != "" {
		sum := adminDigest(o.AdminKey)
		h.adminKey = &sum
	}
	return h, nil
}

// policyCounters are one policy's tollgate_decisions_total children.
type policyCounters struct {
	allowed, limited, shadow prometheus.Counter
}
