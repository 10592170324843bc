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
	"sync/atomic"
	"time"

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
	// Reloader, when not nil, is bound to the engine so that its Reload
	// replaces Policies, PingRoute and CheckRoute while the engine serves.
	Reloader *Reloader
	// OffendersWindow is the interval of GET /admin/offenders, which lists
	// the keys refused most in the current and the previous interval;
	// 0 means DefaultOffendersWindow.
	OffendersWindow time.Duration
	// OffendersRawKeys lists offenders by the key they sent instead of the
	// hash the access log shows. Keys can be secrets (API keys).
	OffendersRawKeys bool
	// Offenders, when set, is the refusal tracker to record into and report
	// (shared with the Envoy API); nil makes one from OffendersWindow and
	// OffendersRawKeys.
	Offenders *Offenders
	// Metrics, when not nil, are the collectors to count in (already
	// registered on Registry), shared with other front ends such as the
	// Envoy gRPC API; nil creates them on Registry.
	Metrics *Metrics
	// Envoy, when not nil, answers POST /json: envoyproxy/ratelimit's HTTP
	// form of its gRPC API.
	Envoy EnvoyService
}

// route is a list of policies evaluated in order for one kind of request.
type route struct {
	policies     []limiter.Policy
	counters     []policyCounters // policies[i]'s tollgate_decisions_total children
	policyHeader string           // RateLimit-Policy value; empty when all are shadows
	auditIndex   int              // the policy whose Request carries the audit endpoint
}

// newRoute builds a route. The audit row goes with the last enforcing
// policy: evaluation stops at the first enforcing refusal, so that policy
// allows only when every enforcing policy has allowed.
func (m *Metrics) newRoute(ps []limiter.Policy) route {
	r := route{policies: ps, policyHeader: PolicyHeader(ps), auditIndex: len(ps) - 1}
	for _, p := range ps {
		r.counters = append(r.counters, policyCounters{
			allowed: m.decisions.WithLabelValues(p.Name, ResultAllowed),
			limited: m.decisions.WithLabelValues(p.Name, ResultLimited),
			shadow:  m.decisions.WithLabelValues(p.Name, ResultShadowLimited),
		})
	}
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
	policies  atomic.Pointer[policySet] // replaced whole by a Reloader
	storeErr  prometheus.Counter
	storeTime prometheus.Observer
	adminKey  *[32]byte // SHA-256 of the admin key; nil when unset
	draining  func() bool
	offenders *Offenders
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
	// Only X-Forwarded-For, and only from a trusted proxy: Gin would also
	// believe X-Real-IP, which a proxy that does not set it passes through
	// from the client untouched.
	e.RemoteIPHeaders = []string{"X-Forwarded-For"}
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
	e.GET("/admin/offenders", h.handleOffenders)
	if o.Envoy != nil {
		e.POST("/json", h.envoyJSON(o.Envoy))
	}
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})))
	return e, nil
}

func newHandler(o Options) (*handler, error) {
	if o.Store == nil || o.Clock == nil || o.Registry == nil {
		return nil, errors.New("httpapi: options need a store, a clock and a registry")
	}
	var err error
	off := o.Offenders
	if off == nil {
		if off, err = NewOffenders(o.OffendersWindow, o.OffendersRawKeys); err != nil {
			return nil, err
		}
	}
	m := o.Metrics
	if m == nil {
		m, err = NewMetrics(o.Registry)
	}
	if err != nil {
		return nil, err
	}
	set, err := m.newPolicySet(o.Policies, o.PingRoute, o.CheckRoute)
	if err != nil {
		return nil, err
	}
	h := &handler{
		store:     o.Store,
		clock:     o.Clock,
		log:       o.Logger,
		metrics:   m,
		storeErr:  m.storeErrors.WithLabelValues(o.StoreName),
		storeTime: m.duration.WithLabelValues(o.StoreName),
		draining:  o.Draining,
		offenders: off,
	}
	h.policies.Store(set)
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if o.AdminKey != "" {
		sum := adminDigest(o.AdminKey)
		h.adminKey = &sum
	}
	if o.Reloader != nil {
		o.Reloader.h.Store(h)
	}
	return h, nil
}

// policyCounters are one policy's tollgate_decisions_total children.
type policyCounters struct {
	allowed, limited, shadow prometheus.Counter
}
