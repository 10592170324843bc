package httpapi

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the service's Prometheus collectors. They are registered on a
// registry the caller owns (never the global one), so tests read exact
// counts. Safe for concurrent use.
type Metrics struct {
	decisions   *prometheus.CounterVec   // policy, result
	storeErrors *prometheus.CounterVec   // store
	duration    *prometheus.HistogramVec // store
	requests    *prometheus.CounterVec   // route, code_class
}

// Decision results, the values of tollgate_decisions_total's result label.
const (
	ResultAllowed       = "allowed"
	ResultLimited       = "limited"
	ResultShadowLimited = "shadow_limited" // refused by a shadow policy, let through
)

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_decisions_total",
			Help: "Rate-limit decisions by policy and result (allowed, limited, shadow_limited).",
		}, []string{"policy", "result"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_store_errors_total",
			Help: "Store operations that failed: the store could not decide (answered 503).",
		}, []string{"store"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_decision_duration_seconds",
			Help:    "Time the store took to decide one attempt, in seconds.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50µs .. ~1.6s
		}, []string{"store"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_http_requests_total",
			Help: "HTTP requests by route template (unmatched for unknown paths) and status class.",
		}, []string{"route", "code_class"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.storeErrors, m.duration, m.requests} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("httpapi: register metrics"), err)
		}
	}
	return m, nil
}
