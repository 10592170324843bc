package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/limiter/nearcache"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
)

var (
	breakerStateDesc = prometheus.NewDesc("tollgate_redis_breaker_state",
		"The Redis circuit breaker's state: 1 for the state it is in (closed, open, half_open), 0 for the others.", []string{"state"}, nil)
	breakerOpensDesc = prometheus.NewDesc("tollgate_redis_breaker_opens_total",
		"Times the Redis circuit breaker opened (failed round trips reached the ratio, or a half-open probe failed).", nil, nil)
	nodeErrorsDesc = prometheus.NewDesc("tollgate_redis_node_errors_total",
		"Round trips to a Redis node that failed because of Redis (refused, reset, error reply, no reply within --redis-timeout), by node (host:port; sentinel:MASTER for Sentinel).", []string{"node"}, nil)
	redisCallsDesc = prometheus.NewDesc("tollgate_redis_calls_total",
		"Decision scripts sent to Redis.", nil, nil)
	nearCacheHitsDesc = prometheus.NewDesc("tollgate_near_cache_hits_total",
		"Attempts refused by this instance's near cache, from a refusal the store gave until its retry time, without asking the store.", nil, nil)
	nearCacheKeysDesc = prometheus.NewDesc("tollgate_near_cache_keys",
		"Refusals held by this instance's near cache.", nil, nil)
)

// redisCollector reads a Redis store's breaker and per-node counters at
// scrape time.
type redisCollector struct{ s *redisstore.Store }

func (c redisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{breakerStateDesc, breakerOpensDesc, nodeErrorsDesc, redisCallsDesc} {
		ch <- d
	}
}

func (c redisCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, state := range []redisstore.BreakerState{redisstore.BreakerClosed, redisstore.BreakerOpen, redisstore.BreakerHalfOpen} {
		v := 0.0
		if st.Breaker == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, v, state.String())
	}
	ch <- prometheus.MustNewConstMetric(breakerOpensDesc, prometheus.CounterValue, float64(st.BreakerOpens))
	ch <- prometheus.MustNewConstMetric(redisCallsDesc, prometheus.CounterValue, float64(st.Calls))
	for node, n := range st.NodeErrors {
		ch <- prometheus.MustNewConstMetric(nodeErrorsDesc, prometheus.CounterValue, float64(n), node)
	}
}

// nearCacheCollector reads a near cache's hits and size at scrape time.
type nearCacheCollector struct{ s *nearcache.Store }

func (c nearCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nearCacheHitsDesc
	ch <- nearCacheKeysDesc
}

func (c nearCacheCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(nearCacheHitsDesc, prometheus.CounterValue, float64(c.s.Hits()))
	ch <- prometheus.MustNewConstMetric(nearCacheKeysDesc, prometheus.GaugeValue, float64(c.s.Len()))
}
