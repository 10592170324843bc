package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/nearcache"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

// The collectors of each store's own metrics (memory, SQLite, Redis, the
// near cache in front of Redis), read at scrape time; openStack registers
// those of the store it opens.

var (
	memoryKeysDesc = prometheus.NewDesc("tollgate_memory_keys",
		"Keys the memory store holds, across every policy; bounded by --memory-max-keys.", nil, nil)
	memoryEvictionsDesc = prometheus.NewDesc("tollgate_memory_evictions_total",
		"Keys the memory store evicted because their shard was full.", nil, nil)
	memoryRefusedEvictionsDesc = prometheus.NewDesc("tollgate_memory_refused_evictions_total",
		"Exhausted keys the memory store evicted anyway (every sampled key was exhausted): their holders got a fresh budget.", nil, nil)
	memoryRefusedNewDesc = prometheus.NewDesc("tollgate_memory_refused_new_keys_total",
		"New keys a full memory store refused (--memory-refuse-when-full).", nil, nil)
	sqliteFileDesc = prometheus.NewDesc("tollgate_sqlite_file_bytes",
		"Size of the SQLite database file plus its write-ahead log, in bytes.", nil, nil)
	sqliteDiskFullDesc = prometheus.NewDesc("tollgate_sqlite_disk_full",
		"1 while the SQLite store refuses decisions because the disk filled (its --sqlite-disk-reserve file is used up), else 0.", nil, nil)
	sqliteBatchesDesc = prometheus.NewDesc("tollgate_sqlite_writer_batches_total",
		"Transactions the SQLite writer began, each for a batch of queued requests (group commit).", nil, nil)
	sqliteRequestsDesc = prometheus.NewDesc("tollgate_sqlite_writer_requests_total",
		"Requests (decisions, resets, prunes, pings) the SQLite writer answered; divided by batches, the mean batch size.", nil, nil)
	sqliteReplaysDesc = prometheus.NewDesc("tollgate_sqlite_writer_replays_total",
		"Batches applied again one request per transaction because one of their requests failed.", nil, nil)
)

// memoryCollector reads a memory store's size and evictions at scrape time.
type memoryCollector struct{ s *memstore.Store }

func (c memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- memoryKeysDesc
	ch <- memoryEvictionsDesc
	ch <- memoryRefusedEvictionsDesc
	ch <- memoryRefusedNewDesc
}

func (c memoryCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(memoryKeysDesc, prometheus.GaugeValue, float64(c.s.Len()))
	ch <- prometheus.MustNewConstMetric(memoryEvictionsDesc, prometheus.CounterValue, float64(c.s.Evictions()))
	ch <- prometheus.MustNewConstMetric(memoryRefusedEvictionsDesc, prometheus.CounterValue, float64(c.s.RefusedEvictions()))
	ch <- prometheus.MustNewConstMetric(memoryRefusedNewDesc, prometheus.CounterValue, float64(c.s.RefusedNew()))
}

// sqliteCollector reads a SQLite store's file size and writer counters at
// scrape time. A file size that cannot be read is left out of the scrape
// (and logged) rather than failing the whole scrape.
type sqliteCollector struct {
	s   *sqlitestore.Store
	log *slog.Logger
}

func (c sqliteCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sqliteFileDesc, sqliteDiskFullDesc, sqliteBatchesDesc, sqliteRequestsDesc, sqliteReplaysDesc} {
		ch <- d
	}
}

func (c sqliteCollector) Collect(ch chan<- prometheus.Metric) {
	if n, err := c.s.FileSize(); err != nil {
		c.log.Warn("metrics: sqlite file size", "error", err)
	} else {
		ch <- prometheus.MustNewConstMetric(sqliteFileDesc, prometheus.GaugeValue, float64(n))
	}
	full := 0.0
	if c.s.DiskFull() {
		full = 1
	}
	ch <- prometheus.MustNewConstMetric(sqliteDiskFullDesc, prometheus.GaugeValue, full)
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(sqliteBatchesDesc, prometheus.CounterValue, float64(st.Batches))
	ch <- prometheus.MustNewConstMetric(sqliteRequestsDesc, prometheus.CounterValue, float64(st.Applied))
	ch <- prometheus.MustNewConstMetric(sqliteReplaysDesc, prometheus.CounterValue, float64(st.Replays))
}

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
