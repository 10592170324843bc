package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

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
