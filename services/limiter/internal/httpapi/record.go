package httpapi

import (
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// CountDecision adds one to tollgate_decisions_total for a decision of
// policy p: allowed, limited, or shadow_limited when a shadow policy
// refused. Other front ends (the Envoy gRPC API) call it so that every
// decision of the service is counted once, whatever asked for it. Safe for
// concurrent use.
func (m *Metrics) CountDecision(p limiter.Policy, allowed bool) {
	result := ResultAllowed
	switch {
	case allowed:
	case p.Shadow:
		result = ResultShadowLimited
	default:
		result = ResultLimited
	}
	m.decisions.WithLabelValues(p.Name, result).Inc()
}

// ObserveStore records one store call on store (the store label) that took
// took, in tollgate_decision_duration_seconds, and counts it in
// tollgate_store_errors_total when failed. Safe for concurrent use.
func (m *Metrics) ObserveStore(store string, took time.Duration, failed bool) {
	m.duration.WithLabelValues(store).Observe(took.Seconds())
	if failed {
		m.storeErrors.WithLabelValues(store).Inc()
	}
}
