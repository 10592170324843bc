package decide

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tollgate/tollgate/pkg/limiter"
)

// Decision results, the values of tollgate_decisions_total's result label.
const (
	ResultAllowed       = "allowed"
	ResultLimited       = "limited"
	ResultShadowLimited = "shadow_limited" // refused by a shadow policy, let through
)

// Metrics are the decision layer's Prometheus collectors, shared by every
// transport so that each decision of the service is counted once, whatever
// asked for it. They are registered on a registry the caller owns (never
// the global one), so tests read exact counts. Safe for concurrent use.
type Metrics struct {
	decisions   *prometheus.CounterVec   // policy, result
	storeErrors *prometheus.CounterVec   // store
	duration    *prometheus.HistogramVec // store
	health      health                   // the recent error rate, for Ping
	overloaded  prometheus.Counter
}

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
		overloaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_overloaded_total",
			Help: "Store calls shed because this instance could not send them within --decision-timeout (answered 503 overloaded); never counted as store errors.",
		}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.storeErrors, m.duration, m.overloaded} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("decide: register metrics"), err)
		}
	}
	return m, nil
}

// counters are one policy's tollgate_decisions_total children.
type counters struct {
	allowed, limited, shadow prometheus.Counter
}

func (m *Metrics) countersOf(p limiter.Policy) counters {
	return counters{
		allowed: m.decisions.WithLabelValues(p.Name, ResultAllowed),
		limited: m.decisions.WithLabelValues(p.Name, ResultLimited),
		shadow:  m.decisions.WithLabelValues(p.Name, ResultShadowLimited),
	}
}

// count adds one decision of p: allowed, limited, or shadow_limited when a
// shadow policy refused. c holds p's children when resolved in advance (a
// Plan's); nil looks them up.
func (m *Metrics) count(c *counters, p limiter.Policy, over bool) {
	if c == nil {
		result := ResultAllowed
		switch {
		case !over:
		case p.Shadow:
			result = ResultShadowLimited
		default:
			result = ResultLimited
		}
		m.decisions.WithLabelValues(p.Name, result).Inc()
		return
	}
	switch {
	case !over:
		c.allowed.Inc()
	case p.Shadow:
		c.shadow.Inc()
	default:
		c.limited.Inc()
	}
}
