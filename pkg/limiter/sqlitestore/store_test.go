package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

// t0 is the tests' time: 45 s into a minute, so that one-minute windows
// started at t0-45s.
var t0 = time.Date(2026, 1, 1, 0, 0, 45, 0, time.UTC)

func policy(name string, a limiter.Algorithm, limit int64) limiter.Policy {
	return limiter.Policy{Name: name, Algorithm: a, Limit: limit, Window: time.Minute}
}

// open opens path and closes the store when the test ends.
func open(t testing.TB, path string, opts ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, limiter.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// newStore opens a store on a new file in a temporary directory.
func newStore(t testing.TB, opts ...sqlitestore.Option) (*sqlitestore.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limiter.db")
	return open(t, path, opts...), path
}

// rawDB opens path directly, to inspect the tables or hold the write lock.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, db.Close()) })
	return db
}

func queryInt(t testing.TB, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(query, args...).Scan(&n))
	return n
}

func queryStrings(t testing.TB, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// holdWriteLock takes the database's write lock from another connection, as
// another process would, and returns the function that releases it.
func holdWriteLock(t testing.TB, path string) (release func()) {
	t.Helper()
	conn, err := rawDB(t, path).Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	return func() {
		_, err := conn.ExecContext(context.Background(), "COMMIT")
		assert.NoError(t, err)
		assert.NoError(t, conn.Close())
	}
}

// allowN runs n attempts at once, fn(i) making the i-th, and returns how many
// were allowed. Every attempt must succeed.
func allowN(t testing.TB, n int, fn func(i int) (limiter.Decision, error)) int64 {
	t.Helper()
	var (
		allowed atomic.Int64
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			d, err := fn(i)
			if assert.NoError(t, err) && d.Allowed {
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return allowed.Load()
}

func TestSchema(t *testing.T) {
	_, path := newStore(t)
	db := rawDB(t, path)

	objects := queryStrings(t, db, `SELECT type || ' ' || name FROM sqlite_master
		WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name`)
	assert.Equal(t, []string{
		"index idx_api_calls_called_at",
		"index idx_rate_events_user_endpoint",
		"index idx_rl_key_window",
		"table api_calls",
		"table rate_buckets",
		"table rate_events",
		"table rate_limit_windows",
		"table store_health",
	}, objects)

	columns := map[string][]string{
		"rate_limit_windows": {"policy", "key", "endpoint", "window_start", "count"},
		"rate_events":        {"id", "policy", "user_id", "endpoint", "created_at", "cost"},
		"rate_buckets":       {"policy", "key", "endpoint", "tat", "held"},
		"api_calls":          {"id", "key", "endpoint", "called_at"},
	}
	for table, want := range columns {
		assert.Equal(t, want, queryStrings(t, db, "SELECT name FROM pragma_table_info(?) ORDER BY cid", table), table)
	}
	assert.Equal(t, []string{"policy", "key", "endpoint", "window_start"},
		queryStrings(t, db, "SELECT name FROM pragma_table_info('rate_limit_windows') WHERE pk > 0 ORDER BY pk"))
	assert.Equal(t, []string{"policy", "user_id", "endpoint", "created_at"},
		queryStrings(t, db, "SELECT name FROM pragma_index_info('idx_rate_events_user_endpoint') ORDER BY seqno"))
	assert.Equal(t, []string{"wal"}, queryStrings(t, db, "PRAGMA journal_mode"))
	assert.Equal(t, int64(2), queryInt(t, db, "PRAGMA auto_vacuum"), "INCREMENTAL")

	// A second store on the open file, and a reopened file, find the schema
	// in place and keep it as it is.
	second := open(t, path)
	require.NoError(t, second.Ping(context.Background()))
	require.NoError(t, second.Close())
	third := open(t, path)
	require.NoError(t, third.Ping(context.Background()))
	assert.Equal(t, objects, queryStrings(t, db, `SELECT type || ' ' || name FROM sqlite_master
		WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name`))
}

func TestOpenRefusesBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		path string
		opts []sqlitestore.Option
	}{
		"empty path":        {path: ""},
		"memory":            {path: ":memory:"},
		"negative busy":     {path: filepath.Join(dir, "a.db"), opts: []sqlitestore.Option{sqlitestore.WithBusyTimeout(-time.Second)}},
		"synchronous OFF":   {path: filepath.Join(dir, "b.db"), opts: []sqlitestore.Option{sqlitestore.WithSynchronous("OFF")}},
		"synchronous junk":  {path: filepath.Join(dir, "c.db"), opts: []sqlitestore.Option{sqlitestore.WithSynchronous("NORMAL); DROP TABLE x; --")}},
		"zero batch":        {path: filepath.Join(dir, "d.db"), opts: []sqlitestore.Option{sqlitestore.WithMaxBatch(0)}},
		"missing directory": {path: filepath.Join(dir, "no", "such", "dir", "e.db")},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := sqlitestore.Open(tc.path, tc.opts...)
			assert.Error(t, err)
			assert.Nil(t, s)
		})
	}
}

func TestOpenEscapesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "odd ?name#with%25 chars.db")
	s := open(t, path, sqlitestore.WithSynchronous("full"))
	d, err := s.Allow(context.Background(), policy("p", limiter.FixedWindow, 3), limiter.Request{Key: limiter.Key{Subject: "a"}, Cost: 1, Now: t0})
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Count)

	fi, err := os.Stat(path)
	require.NoError(t, err, "the database is the file named, not a truncated name")
	size, err := s.FileSize()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, size, fi.Size())
	assert.Equal(t, int64(1), queryInt(t, rawDB(t, path), "SELECT count FROM rate_limit_windows"))
}

func TestInvalidInputIsAnError(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	good := policy("p", limiter.SlidingLog, 3)
	key := limiter.Key{Subject: "a"}

	_, err := s.Allow(ctx, limiter.Policy{Name: "p", Algorithm: "leaky", Limit: 1, Window: time.Second}, limiter.Request{Key: key, Cost: 1, Now: t0})
	assert.ErrorIs(t, err, limiter.ErrInvalidPolicy)
	_, err = s.Allow(ctx, good, limiter.Request{Cost: 1, Now: t0})
	assert.ErrorIs(t, err, limiter.ErrInvalidKey)
	_, err = s.Allow(ctx, good, limiter.Request{Key: key, Cost: 4, Now: t0})
	assert.ErrorIs(t, err, limiter.ErrInvalidCost)
	_, err = s.Peek(ctx, good, limiter.Key{}, t0)
	assert.ErrorIs(t, err, limiter.ErrInvalidKey)
	_, err = s.Reset(ctx, limiter.Policy{}, key)
	assert.ErrorIs(t, err, limiter.ErrInvalidPolicy)
	_, err = s.ResetSubject(ctx, good, "")
	assert.ErrorIs(t, err, limiter.ErrInvalidKey)
	_, err = s.Prune(ctx, t0, []limiter.Policy{good, {Name: "bad"}})
	assert.ErrorIs(t, err, limiter.ErrInvalidPolicy)
}

// Two Stores are two *sql.DB on one file, each with its own writer: only
// SQLite's write lock (BEGIN IMMEDIATE + busy timeout) keeps them exact.
func TestTwoStoresOnOneFileAreExact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	stores := []*sqlitestore.Store{open(t, path), open(t, path)}
	db := rawDB(t, path)
	ctx := context.Background()

	log := policy("check", limiter.SlidingLog, 10)
	allowed := allowN(t, 500, func(i int) (limiter.Decision, error) {
		return stores[i%2].Allow(ctx, log, limiter.Request{Key: limiter.Key{Subject: "42", Scope: "/search"}, Cost: 1, Now: t0})
	})
	assert.Equal(t, int64(10), allowed)
	assert.Equal(t, int64(10), queryInt(t, db, "SELECT COUNT(*) FROM rate_events WHERE policy = 'check'"))

	fixed := policy("ping", limiter.FixedWindow, 50)
	allowed = allowN(t, 500, func(i int) (limiter.Decision, error) {
		return stores[i%2].Allow(ctx, fixed, limiter.Request{Key: limiter.Key{Subject: "10.0.0.1"}, Cost: 1, Now: t0})
	})
	assert.Equal(t, int64(50), allowed)
	assert.Equal(t, int64(500), queryInt(t, db, "SELECT count FROM rate_limit_windows WHERE policy = 'ping'"))
}

func TestRestartKeepsTheCurrentWindow(t *testing.T) {
	for _, a := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		t.Run(string(a), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "limiter.db")
			ctx := context.Background()
			p := policy("p", a, 5)
			key := limiter.Key{Subject: "7", Scope: "/x"}
			first := open(t, path)
			for range 3 {
				d, err := first.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0})
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			require.NoError(t, first.Close())

			second := open(t, path)
			d, err := second.Peek(ctx, p, key, t0)
			require.NoError(t, err)
			assert.Equal(t, int64(3), d.Count)
			assert.Equal(t, int64(2), d.Remaining)
			for i := range 3 {
				d, err := second.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0})
				require.NoError(t, err)
				assert.Equal(t, i < 2, d.Allowed, "attempt %d after the restart", i+4)
			}
		})
	}
}

func TestAuditRowsForAllowedAttemptsOnly(t *testing.T) {
	s, path := newStore(t)
	db := rawDB(t, path)
	ctx := context.Background()
	const allowed, refused = 7, 5
	for _, a := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket, limiter.SlidingLogUnsafe} {
		t.Run(string(a), func(t *testing.T) {
			p := policy("audit-"+string(a), a, allowed)
			subject := "client-" + string(a)
			n := allowN(t, allowed+refused, func(int) (limiter.Decision, error) {
				return s.Allow(ctx, p, limiter.Request{Key: limiter.Key{Subject: subject}, Cost: 1, Now: t0, Audit: "/ping"})
			})
			if a != limiter.SlidingLogUnsafe { // the unsafe one may over-admit, see TestUnsafeSlidingLogOverAdmits
				require.Equal(t, int64(allowed), n)
			}
			_, err := s.Peek(ctx, p, limiter.Key{Subject: subject}, t0)
			require.NoError(t, err)
			assert.Equal(t, n, queryInt(t, db, "SELECT COUNT(*) FROM api_calls WHERE key = ?", subject))
			assert.Equal(t, n, queryInt(t, db, "SELECT COUNT(*) FROM api_calls WHERE key = ? AND endpoint = '/ping' AND called_at = ?",
				subject, sqlitestore.EventTimeText(t0)))
		})
	}
}

func TestPruneDeletesExpiredRowsOnly(t *testing.T) {
	s, path := newStore(t)
	db := rawDB(t, path)
	ctx := context.Background()
	fixed := policy("fixed", limiter.FixedWindow, 10)
	log := policy("log", limiter.SlidingLog, 10)
	bucket := policy("bucket", limiter.TokenBucket, 10) // one token per 6 s
	other := policy("other", limiter.SlidingWindow, 10)
	allow := func(p limiter.Policy, subject string, at time.Time) {
		t.Helper()
		d, err := s.Allow(ctx, p, limiter.Request{Key: limiter.Key{Subject: subject, Scope: "/e"}, Cost: 1, Now: at})
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	for _, ago := range []time.Duration{3 * time.Minute, 2 * time.Minute, time.Minute, 0} {
		allow(fixed, "a", t0.Add(-ago))
	}
	for _, ago := range []time.Duration{2 * time.Minute, time.Minute, 59 * time.Second, 0} {
		allow(log, "a", t0.Add(-ago))
	}
	allow(bucket, "old", t0.Add(-2*time.Minute)) // tat = t0-114s: full again
	allow(bucket, "new", t0)                     // tat = t0+6s
	allow(other, "a", t0.Add(-time.Hour))        // not pruned: not in the list

	n, err := s.Prune(ctx, t0, []limiter.Policy{fixed, log, bucket})
	require.NoError(t, err)
	assert.Equal(t, int64(2+2+1), n)
	// Cutoff 23:58:45: the windows of 23:57 and 23:58 go, 23:59 and 00:00 stay.
	assert.Equal(t, []string{"2025-12-31T23:59:00Z", "2026-01-01T00:00:00Z"},
		queryStrings(t, db, "SELECT window_start FROM rate_limit_windows WHERE policy = 'fixed' ORDER BY window_start"))
	// An event exactly one window old no longer counts, so it goes.
	assert.Equal(t, []string{sqlitestore.EventTimeText(t0.Add(-59 * time.Second)), sqlitestore.EventTimeText(t0)},
		queryStrings(t, db, "SELECT created_at FROM rate_events WHERE policy = 'log' ORDER BY created_at"))
	assert.Equal(t, []string{"new"}, queryStrings(t, db, "SELECT key FROM rate_buckets WHERE policy = 'bucket'"))
	assert.Equal(t, int64(1), queryInt(t, db, "SELECT COUNT(*) FROM rate_limit_windows WHERE policy = 'other'"))

	n, err = s.Prune(ctx, t0, []limiter.Policy{fixed, log, bucket})
	require.NoError(t, err)
	assert.Equal(t, int64(0), n, "a second prune at the same time finds nothing")
}

// A file whose rate_buckets table predates the held column gets it on open:
// its buckets count 0 units until their next admitted attempt, then what
// they hold.
func TestOpenAddsTheHeldColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db := rawDB(t, path)
	_, err := db.Exec(`CREATE TABLE rate_buckets (policy TEXT NOT NULL, key TEXT NOT NULL, endpoint TEXT NOT NULL DEFAULT '',
		tat INTEGER NOT NULL, PRIMARY KEY (policy, key, endpoint))`)
	require.NoError(t, err)
	bucket := policy("bucket", limiter.TokenBucket, 10)
	old, fresh := limiter.Key{Subject: "old"}, limiter.Key{Subject: "fresh"}
	_, err = db.Exec(`INSERT INTO rate_buckets (policy, key, endpoint, tat) VALUES (?, ?, '', ?)`,
		bucket.Name, old.Subject, t0.Add(30*time.Second).UnixNano())
	require.NoError(t, err)

	s := open(t, path)
	ctx := context.Background()
	for range 4 {
		_, err := s.Allow(ctx, bucket, limiter.Request{Key: fresh, Cost: 1, Now: t0})
		require.NoError(t, err)
	}
	n, err := s.Reset(ctx, bucket, old)
	require.NoError(t, err)
	assert.Equal(t, int64(0), n, "a bucket written before the column")
	n, err = s.Reset(ctx, bucket, fresh)
	require.NoError(t, err)
	assert.Equal(t, int64(4), n, "4 units in flight")
}

func TestResetReturnsUnitsDeleted(t *testing.T) {
	s, path := newStore(t)
	db := rawDB(t, path)
	ctx := context.Background()
	log := policy("log", limiter.SlidingLog, 10)
	for _, scope := range []string{"/a", "/a", "/a", "/b", "/b"} {
		_, err := s.Allow(ctx, log, limiter.Request{Key: limiter.Key{Subject: "u", Scope: scope}, Cost: 1, Now: t0})
		require.NoError(t, err)
	}
	_, err := s.Allow(ctx, log, limiter.Request{Key: limiter.Key{Subject: "v", Scope: "/a"}, Cost: 1, Now: t0})
	require.NoError(t, err)

	n, err := s.Reset(ctx, log, limiter.Key{Subject: "u", Scope: "/a"})
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
	n, err = s.ResetSubject(ctx, log, "u")
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
	n, err = s.ResetSubject(ctx, log, "u")
	require.NoError(t, err)
	assert.Equal(t, int64(0), n)
	assert.Equal(t, []string{"v"}, queryStrings(t, db, "SELECT user_id FROM rate_events"))
}

// lineUp holds the write lock while n requests queue up, so that the writer
// takes them as one batch when the lock is released. fn(i) makes the i-th
// request; lineUp returns their errors and decisions in order.
func lineUp(t *testing.T, s *sqlitestore.Store, path string, n int, fn func(i int) (limiter.Decision, error)) ([]limiter.Decision, []error) {
	t.Helper()
	release := holdWriteLock(t, path)
	before := s.Stats()
	decisions, errs := make([]limiter.Decision, n), make([]error, n)
	var wg sync.WaitGroup
	call := func(i int) { wg.Go(func() { decisions[i], errs[i] = fn(i) }) }
	call(0)
	// The writer has taken request 0 and waits in BEGIN IMMEDIATE.
	require.Eventually(t, func() bool { return s.Stats().Batches == before.Batches+1 }, 10*time.Second, time.Millisecond)
	for i := 1; i < n; i++ {
		call(i)
	}
	require.Eventually(t, func() bool { return sqlitestore.QueueLen(s) == n-1 }, 10*time.Second, time.Millisecond)
	release()
	wg.Wait()
	after := s.Stats()
	assert.Equal(t, int64(1), after.Batches-before.Batches, "one batch")
	assert.Equal(t, int64(n), after.Applied-before.Applied)
	return decisions, errs
}

// One request failing inside a batch must not cost the others their
// decisions: the batch is rolled back and replayed one request at a time.
// The failure is real: a trigger makes SQLite refuse one user's insert.
func TestBatchFailureIsIsolated(t *testing.T) {
	for _, poisoned := range []bool{false, true} {
		name := map[bool]string{false: "clean", true: "poisoned"}[poisoned]
		t.Run(name, func(t *testing.T) {
			s, path := newStore(t, sqlitestore.WithBusyTimeout(time.Minute))
			db := rawDB(t, path)
			_, err := db.Exec(`CREATE TRIGGER poison BEFORE INSERT ON rate_events WHEN NEW.user_id = 'poison'
				BEGIN SELECT RAISE(ABORT, 'poisoned'); END`)
			require.NoError(t, err)
			ctx := context.Background()
			fixed := policy("fixed", limiter.FixedWindow, 10)
			log := policy("log", limiter.SlidingLog, 10)
			const n, bad = 60, 31
			decisions, errs := lineUp(t, s, path, n, func(i int) (limiter.Decision, error) {
				switch {
				case poisoned && i == bad:
					return s.Allow(ctx, log, limiter.Request{Key: limiter.Key{Subject: "poison"}, Cost: 1, Now: t0})
				case i%2 == 0:
					return s.Allow(ctx, fixed, limiter.Request{Key: limiter.Key{Subject: "f"}, Cost: 1, Now: t0})
				default:
					return s.Allow(ctx, log, limiter.Request{Key: limiter.Key{Subject: "l"}, Cost: 1, Now: t0})
				}
			})
			allowed := map[bool]int64{} // by "is fixed window"
			for i := range n {
				if poisoned && i == bad {
					assert.ErrorContains(t, errs[i], "poisoned")
					continue
				}
				require.NoError(t, errs[i], "request %d", i)
				if decisions[i].Allowed {
					allowed[i%2 == 0]++
				}
			}
			assert.Equal(t, map[bool]int64{true: 10, false: 10}, allowed)
			assert.Equal(t, int64(n/2), queryInt(t, db, "SELECT count FROM rate_limit_windows WHERE key = 'f'"))
			assert.Equal(t, int64(10), queryInt(t, db, "SELECT COUNT(*) FROM rate_events WHERE user_id = 'l'"))
			assert.Equal(t, int64(0), queryInt(t, db, "SELECT COUNT(*) FROM rate_events WHERE user_id = 'poison'"))
			assert.Equal(t, map[bool]int64{false: 0, true: 1}[poisoned], s.Stats().Replays)
		})
	}
}

// ending is a context that ends, with the error the test gives, when the
// test says so.
type ending struct {
	context.Context
	done chan struct{}
	err  error
}

func newEnding() *ending { return &ending{Context: context.Background(), done: make(chan struct{})} }

func (e *ending) Done() <-chan struct{} { return e.done }
func (e *ending) end(err error)         { e.err = err; close(e.done) }
func (e *ending) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return nil
	}
}

// A request whose context ends while it waits for the writer is never
// applied, whether it was still queued or already in a batch the writer had
// not begun to apply. Cancelled, it fails with context.Canceled (its caller
// went away); out of time, it is shed: limiter.ErrOverloaded, the store is
// not to blame.
func TestContextEndsWhileQueued(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error   // the context's
		want []error // what both requests' errors wrap
	}{
		{"cancelled", context.Canceled, []error{context.Canceled}},
		{"out of time", context.DeadlineExceeded, []error{limiter.ErrOverloaded, context.DeadlineExceeded}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, path := newStore(t, sqlitestore.WithBusyTimeout(time.Minute))
			p := policy("p", limiter.FixedWindow, 10)
			key := limiter.Key{Subject: "a"}
			release := holdWriteLock(t, path)
			before := s.Stats()

			ctx := newEnding()
			errs := make(chan error, 2)
			allow := func() {
				_, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0})
				errs <- err
			}
			go allow()
			require.Eventually(t, func() bool { return s.Stats().Batches == before.Batches+1 }, 10*time.Second, time.Millisecond)
			go allow()
			require.Eventually(t, func() bool { return sqlitestore.QueueLen(s) == 1 }, 10*time.Second, time.Millisecond)
			ctx.end(tt.err) // one request is in the writer's batch, one is queued
			for range 2 {
				err := <-errs
				for _, want := range tt.want {
					assert.ErrorIs(t, err, want)
				}
			}
			release()

			require.NoError(t, s.Ping(context.Background()))
			d, err := s.Peek(context.Background(), p, key, t0)
			require.NoError(t, err)
			assert.Equal(t, int64(0), d.Count, "neither was applied")

			_, err = s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0})
			assert.ErrorIs(t, err, tt.err, "an ended ctx is refused before queueing")
		})
	}
}

func TestPeekDoesNotWaitForTheWriter(t *testing.T) {
	s, path := newStore(t)
	ctx := context.Background()
	p := policy("p", limiter.SlidingLog, 10)
	key := limiter.Key{Subject: "a"}
	for range 4 {
		_, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0})
		require.NoError(t, err)
	}
	release := holdWriteLock(t, path)
	defer release()
	d, err := s.Peek(ctx, p, key, t0)
	require.NoError(t, err)
	assert.Equal(t, int64(4), d.Count)
	assert.Equal(t, int64(6), d.Remaining)
}

func TestPingNeedsTheWriteLock(t *testing.T) {
	s, path := newStore(t, sqlitestore.WithBusyTimeout(20*time.Millisecond))
	require.NoError(t, s.Ping(context.Background()))
	release := holdWriteLock(t, path)
	assert.ErrorIs(t, s.Ping(context.Background()), limiter.ErrUnavailable)
	release()
	assert.NoError(t, s.Ping(context.Background()))
}

// Close lets every queued request commit and answer; requests that come after
// are refused and leave no trace.
func TestCloseDrainsTheQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limiter.db")
	s := open(t, path)
	ctx := context.Background()
	p := policy("p", limiter.FixedWindow, 1000)
	key := limiter.Key{Subject: "a"}

	var (
		answered, refused atomic.Int64
		wg                sync.WaitGroup
	)
	for range 300 {
		wg.Go(func() {
			_, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0})
			switch {
			case err == nil:
				answered.Add(1)
			case errors.Is(err, limiter.ErrClosed):
				refused.Add(1)
			default:
				t.Errorf("allow: %v", err)
			}
		})
	}
	require.NoError(t, s.Close())
	wg.Wait()
	assert.Equal(t, int64(300), answered.Load()+refused.Load())
	assert.Equal(t, answered.Load(), queryInt(t, rawDB(t, path), "SELECT COALESCE(SUM(count), 0) FROM rate_limit_windows"))

	_, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0})
	assert.ErrorIs(t, err, limiter.ErrClosed)
	_, err = s.Allow(ctx, policy("u", limiter.SlidingLogUnsafe, 1), limiter.Request{Key: key, Cost: 1, Now: t0})
	assert.ErrorIs(t, err, limiter.ErrClosed)
	_, err = s.Peek(ctx, p, key, t0)
	assert.ErrorIs(t, err, limiter.ErrClosed)
	_, err = s.Reset(ctx, p, key)
	assert.ErrorIs(t, err, limiter.ErrClosed)
	_, err = s.ResetSubject(ctx, p, "a")
	assert.ErrorIs(t, err, limiter.ErrClosed)
	_, err = s.Prune(ctx, t0, []limiter.Policy{p})
	assert.ErrorIs(t, err, limiter.ErrClosed)
	assert.ErrorIs(t, s.Ping(ctx), limiter.ErrClosed)
	assert.ErrorIs(t, s.Close(), limiter.ErrClosed)
}

// sliding_log_unsafe is seed 001's COUNT then INSERT (docs/seeds.md), two autocommit
// statements on the pool with no transaction: between one caller's COUNT and
// its INSERT, others count the same rows and are admitted too. Whether a round
// over-admits depends on the scheduler, so the test runs rounds (fresh key
// each) until one does; with 500 callers released at once the first round
// practically always does, and 20 rounds without one would mean the race is
// gone, which is a failure. The same load on sliding_log admits exactly 10
// (TestTwoStoresOnOneFileAreExact).
func TestUnsafeSlidingLogOverAdmits(t *testing.T) {
	s, path := newStore(t)
	db := rawDB(t, path)
	ctx := context.Background()
	p := policy("unsafe", limiter.SlidingLogUnsafe, 10)
	var most int64
	for round := 0; round < 20 && most <= 10; round++ {
		key := limiter.Key{Subject: "victim", Scope: strconv.Itoa(round)}
		allowed := allowN(t, 500, func(int) (limiter.Decision, error) {
			return s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0})
		})
		assert.Equal(t, allowed, queryInt(t, db, "SELECT COUNT(*) FROM rate_events WHERE endpoint = ?", key.Scope))
		most = max(most, allowed)
	}
	assert.Greater(t, most, int64(10), "sliding_log_unsafe never over-admitted")
}

// The WAL is checkpointed and reused as the writer commits: no statement or
// read transaction is left open that would pin it. A pinned WAL grows by every
// commit (at least a page each) and never shrinks, so the bound is far below
// what the commits would take; a healthy one stays near the auto-checkpoint
// size, 1000 pages (about 4 MiB). Under the race detector the transpiled
// SQLite is about twenty times slower, so the test makes fewer decisions with
// one commit each (batch bound 1): as many commits as possible, which is what
// a pinned WAL would grow by. Without -race and -short it makes the million
// decisions issue #6 asks for (about 10 s); .ci/run runs it that way.
func TestWALStaysBounded(t *testing.T) {
	decisions, opts := 1_000_000, []sqlitestore.Option(nil)
	switch {
	case raceEnabled:
		decisions, opts = 5_000, []sqlitestore.Option{sqlitestore.WithMaxBatch(1)}
	case testing.Short():
		decisions = 200_000
	}
	s, path := newStore(t, opts...)
	ctx := context.Background()
	p := policy("wal", limiter.FixedWindow, 1<<30)
	const callers = 32
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range decisions / callers {
				key := limiter.Key{Subject: "k", Scope: strconv.Itoa((c*7 + i) % 1000)}
				if _, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: t0}); err != nil {
					t.Errorf("allow: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	assert.Less(t, fi.Size(), int64(64<<20))
	assert.Less(t, fi.Size(), int64(16<<20), "the WAL outgrew the auto-checkpoint size")
	db := rawDB(t, path)
	st := s.Stats()
	assert.Equal(t, int64(decisions/callers*callers), st.Applied)
	assert.Equal(t, st.Applied, queryInt(t, db, "SELECT SUM(count) FROM rate_limit_windows"))

	// While the store is open and idle, a TRUNCATE checkpoint succeeds at
	// once: none of the store's connections holds a read transaction.
	var busy, frames, done int64
	require.NoError(t, db.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &done))
	assert.Equal(t, int64(0), busy)
	assert.Equal(t, frames, done)
	t.Logf("WAL %d bytes after %d decisions in %d batches (%.1f per batch)",
		fi.Size(), st.Applied, st.Batches, float64(st.Applied)/float64(st.Batches))
}

// batchHeard is a limiter.StoreObserver that keeps the batch sizes it
// hears.
type batchHeard struct {
	mu      sync.Mutex
	batches []int
}

func (h *batchHeard) ObserveStore(c limiter.StoreCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches = append(h.batches, c.Batch)
}

// A request made with an observer on its context tells it how many
// requests shared its transaction: all those lined up behind the write
// lock, one for a request alone, one each when a failed batch was replayed
// one request at a time; a peek (read pool, no transaction) tells nothing.
func TestObserverHearsTheBatch(t *testing.T) {
	s, path := newStore(t, sqlitestore.WithBusyTimeout(time.Minute))
	fixed := policy("fixed", limiter.FixedWindow, 10)
	k := limiter.Key{Subject: "u"}
	const n = 5
	heard := make([]batchHeard, n)
	_, errs := lineUp(t, s, path, n, func(i int) (limiter.Decision, error) {
		return s.Allow(limiter.WithStoreObserver(context.Background(), &heard[i]), fixed, limiter.Request{Key: k, Cost: 1, Now: t0})
	})
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, []int{n}, heard[i].batches, "request %d", i)
	}
	var alone batchHeard
	ctx := limiter.WithStoreObserver(context.Background(), &alone)
	_, err := s.Allow(ctx, fixed, limiter.Request{Key: k, Cost: 1, Now: t0})
	require.NoError(t, err)
	_, err = s.Peek(ctx, fixed, k, t0)
	require.NoError(t, err)
	assert.Equal(t, []int{1}, alone.batches)

	db := rawDB(t, path)
	_, err = db.Exec(`CREATE TRIGGER poison BEFORE INSERT ON rate_events WHEN NEW.user_id = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poisoned'); END`)
	require.NoError(t, err)
	log := policy("log", limiter.SlidingLog, 10)
	replayed := make([]batchHeard, n)
	_, errs = lineUp(t, s, path, n, func(i int) (limiter.Decision, error) {
		subject := "l"
		if i == 2 {
			subject = "poison"
		}
		return s.Allow(limiter.WithStoreObserver(context.Background(), &replayed[i]), log, limiter.Request{Key: limiter.Key{Subject: subject}, Cost: 1, Now: t0})
	})
	for i := range n {
		if i == 2 {
			assert.ErrorContains(t, errs[i], "poisoned")
			assert.Empty(t, replayed[i].batches, "a failed request tells nothing")
			continue
		}
		require.NoError(t, errs[i])
		assert.Equal(t, []int{1}, replayed[i].batches, "request %d, replayed alone", i)
	}
}
