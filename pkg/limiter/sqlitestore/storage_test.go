package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

// fileBytes returns the size of the database file plus its WAL.
func fileBytes(t testing.TB, path string) int64 {
	t.Helper()
	var total int64
	for _, name := range []string{path, path + "-wal"} {
		fi, err := os.Stat(name)
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		total += fi.Size()
	}
	return total
}

// longKey is the i-th of distinct 1000-byte keys.
func longKey(i int) string {
	return fmt.Sprintf("%01000d", i)
}

// flood makes n allowed attempts with audit rows, each on its own long key,
// at now.
func flood(t testing.TB, s *sqlitestore.Store, p limiter.Policy, n int, now time.Time) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		key := limiter.Key{Subject: longKey(i)}
		d, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: now, Audit: "/ping"})
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
}

// TestAuditRowsArePrunedAfterTheRetention: api_calls rows older than the
// retention go with the rest of the expired state; newer ones stay.
func TestAuditRowsArePrunedAfterTheRetention(t *testing.T) {
	for _, tt := range []struct {
		name      string
		opts      []sqlitestore.Option
		retention time.Duration
	}{
		{"default", nil, sqlitestore.DefaultAuditRetention},
		{"one hour", []sqlitestore.Option{sqlitestore.WithAuditRetention(time.Hour)}, time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, path := newStore(t, tt.opts...)
			db := rawDB(t, path)
			ctx := context.Background()
			p := policy("ping", limiter.FixedWindow, 10)
			for _, at := range []time.Time{t0.Add(-tt.retention - time.Second), t0.Add(-tt.retention), t0.Add(-tt.retention + time.Second), t0} {
				_, err := s.Allow(ctx, p, limiter.Request{Key: limiter.Key{Subject: "c"}, Cost: 1, Now: at, Audit: "/ping"})
				require.NoError(t, err)
			}
			n, err := s.Prune(ctx, t0, []limiter.Policy{p})
			require.NoError(t, err)
			assert.Equal(t, []string{sqlitestore.EventTimeText(t0.Add(-tt.retention + time.Second)), sqlitestore.EventTimeText(t0)},
				queryStrings(t, db, "SELECT called_at FROM api_calls ORDER BY called_at"))
			assert.Equal(t, int64(2+1), n, "two audit rows and the window of the first three (the one of t0 stays)")
		})
	}
}

// TestPruneGivesTheSpaceBack floods the file with long keys, then prunes
// everything: the file (database plus WAL) shrinks to a fraction of its
// peak, because freed pages go back to the file system.
func TestPruneGivesTheSpaceBack(t *testing.T) {
	n := 5_000
	if raceEnabled || testing.Short() {
		n = 1_000
	}
	s, path := newStore(t, sqlitestore.WithAuditRetention(time.Hour))
	p := policy("ping", limiter.FixedWindow, 10)
	flood(t, s, p, n, t0)
	peak := fileBytes(t, path)
	require.Greater(t, peak, int64(n*1000), "each key takes its bytes at least once")

	removed, err := s.Prune(context.Background(), t0.Add(2*time.Hour), []limiter.Policy{p})
	require.NoError(t, err)
	assert.Equal(t, int64(2*n), removed, "a window row and an audit row per key")
	after := fileBytes(t, path)
	assert.Less(t, after, peak/4, "peak %d bytes, after prune %d", peak, after)
	t.Logf("%d keys: peak %d bytes, after prune %d bytes", n, peak, after)
}

// TestPruneConvertsAnOldFile: a file created before auto_vacuum (by an
// older version, or by hand) opens as it is, and the first prune converts
// it, after which it shrinks like a new one.
func TestPruneConvertsAnOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	old := rawDB(t, path)
	_, err := old.Exec("PRAGMA journal_mode = WAL; CREATE TABLE api_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, endpoint TEXT NOT NULL, called_at TEXT NOT NULL)")
	require.NoError(t, err)
	require.Equal(t, int64(0), queryInt(t, old, "PRAGMA auto_vacuum"), "NONE, as before this version")
	require.NoError(t, old.Close())

	s := open(t, path, sqlitestore.WithAuditRetention(time.Hour))
	db := rawDB(t, path)
	assert.Equal(t, int64(0), queryInt(t, db, "PRAGMA auto_vacuum"), "a start does not rewrite the file")
	p := policy("ping", limiter.FixedWindow, 10)
	flood(t, s, p, 500, t0)
	peak := fileBytes(t, path)

	_, err = s.Prune(context.Background(), t0.Add(2*time.Hour), []limiter.Policy{p})
	require.NoError(t, err)
	assert.Equal(t, int64(2), queryInt(t, rawDB(t, path), "PRAGMA auto_vacuum"), "INCREMENTAL after the first prune")
	assert.Less(t, fileBytes(t, path), peak/4)

	flood(t, s, p, 500, t0.Add(3*time.Hour))
	peak = fileBytes(t, path)
	_, err = s.Prune(context.Background(), t0.Add(5*time.Hour), []limiter.Policy{p})
	require.NoError(t, err)
	assert.Less(t, fileBytes(t, path), peak/4, "and at every prune after it")
}

// BenchmarkBytesPerKey measures what one key costs on disk, per algorithm,
// with a key of 16 bytes and one of 256 (the service's --max-key-bytes; a
// longer key is stored as a 71-byte digest), with and without the audit row
// an allowed /ping adds: each iteration is one allowed attempt on a new key
// (ten for sliding_log/events=10: a sliding log costs per event); the file (database plus WAL, after a TRUNCATE checkpoint) divided by
// the keys is reported as file-bytes/key. Run it with a fixed count, e.g.
// go test -run '^$' -bench BytesPerKey -benchtime 20000x ./sqlitestore/
func BenchmarkBytesPerKey(b *testing.B) {
	for _, c := range bytesCases {
		a, events := c.alg, c.events
		for _, size := range []int{16, 256} {
			for _, audit := range []string{"", "/ping"} {
				name := fmt.Sprintf("%s/events=%d/key=%d/audit=%t", a, events, size, audit != "")
				b.Run(name, func(b *testing.B) {
					s, path := newStore(b)
					p := policy("p", a, 10)
					ctx := context.Background()
					keys := 0
					for b.Loop() {
						key := limiter.Key{Subject: fmt.Sprintf("%0*d", size, keys)}
						for range events {
							if _, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0, Audit: audit}); err != nil {
								b.Fatal(err)
							}
						}
						keys++
					}
					b.StopTimer()
					// A prune that deletes nothing still checkpoints and truncates.
					if _, err := s.Prune(ctx, t0, nil); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(fileBytes(b, path))/float64(keys), "file-bytes/key")
				})
			}
		}
	}
}

// bytesCases are the algorithms BenchmarkBytesPerKey measures, with the
// attempts made on each key.
var bytesCases = []struct {
	alg    limiter.Algorithm
	events int
}{
	{limiter.FixedWindow, 1}, {limiter.SlidingLog, 1}, {limiter.SlidingLog, 10},
	{limiter.SlidingWindow, 1}, {limiter.TokenBucket, 1},
}

// A prune of many chunks lets the decisions queued meanwhile through between
// two chunks, instead of making them wait for all of them: under load, a
// prune of a minute's expired windows took seconds, and every decision
// waiting behind it failed on the service's decision budget.
func TestPruneLetsDecisionsThroughBetweenChunks(t *testing.T) {
	s, path := newStore(t)
	ctx := context.Background()
	p := policy("fixed", limiter.FixedWindow, 10)
	// Three chunks and a half of expired windows, written directly.
	db := rawDB(t, path)
	_, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3500)
		INSERT INTO rate_limit_windows (policy, key, endpoint, window_start, count)
		SELECT 'fixed', 'old-' || i, '', ?, 1 FROM n`, sqlitestore.WindowStartText(t0.Add(-time.Hour)))
	require.NoError(t, err)

	decided := make(chan limiter.Decision, 1)
	var during limiter.Decision // answered while the prune still had chunks to go
	yields := 0
	sqlitestore.OnYield(s, func() {
		yields++
		switch yields {
		case 1:
			// After the first chunk: a decision arrives, and is queued
			// before the writer looks at the queue.
			go func() {
				d, err := s.Allow(ctx, p, limiter.Request{Key: limiter.Key{Subject: "new"}, Cost: 1, Now: t0})
				assert.NoError(t, err)
				decided <- d
			}()
			for sqlitestore.QueueLen(s) == 0 {
				runtime.Gosched()
			}
		case 2:
			// After the second: it has been answered.
			select {
			case during = <-decided:
			case <-time.After(time.Minute):
				t.Error("the decision queued after the first chunk was not answered before the third")
			}
		}
	})
	n, err := s.Prune(ctx, t0, []limiter.Policy{p})
	require.NoError(t, err)
	assert.Equal(t, int64(3500), n)
	assert.GreaterOrEqual(t, yields, 3, "a yield after each full chunk (and after each step giving the pages back)")
	assert.True(t, during.Allowed)
	assert.Equal(t, int64(1), during.Count)
}
