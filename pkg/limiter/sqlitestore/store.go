// Package sqlitestore keeps rate-limit state in one SQLite file (docs/seeds.md's
// schema, modernc.org/sqlite, no cgo), in WAL mode.
//
// Every decision, reset and prune goes through one writer goroutine that owns
// one connection. It takes the queued requests, up to a batch bound, opens
// one BEGIN IMMEDIATE transaction, applies them in arrival order (read the
// key's state, call the algorithm's arithmetic from package limiter, write the
// new state), commits, and only then answers each caller: a decision returned
// by Allow is durable (to the synchronous mode's guarantee). Decisions are
// exact inside a process by construction, and across processes or other
// *sql.DB handles on the same file because BEGIN IMMEDIATE takes SQLite's
// write lock and the busy timeout waits for it. Group commit amortises the
// commit over the batch; see the package benchmarks.
//
// Peek reads through a separate read-only pool: WAL readers never wait for
// the writer. sliding_log_unsafe is seed 001's check-then-insert (docs/seeds.md) on the pool
// with no transaction; it over-admits under concurrency on purpose.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Defaults of the options.
const (
	DefaultBusyTimeout = 5 * time.Second
	DefaultSynchronous = "NORMAL"
	DefaultMaxBatch    = 256
	// DefaultAuditRetention is how long api_calls rows are kept.
	DefaultAuditRetention = 24 * time.Hour
)

// poolConns bounds each connection pool beside the writer's connection: the
// read-only pool (Peek) and the read-write pool (sliding_log_unsafe).
const poolConns = 4

type config struct {
	busyTimeout    time.Duration
	synchronous    string
	maxBatch       int
	auditRetention time.Duration
	diskReserve    int64
}

// Option configures Open.
type Option func(*config)

// WithBusyTimeout sets how long a connection waits for another one (another
// process, another *Store on the file) holding the write lock before it fails
// with limiter.ErrUnavailable. Default 5s; negative durations are refused by
// Open; 0 fails at once. Milliseconds are the resolution.
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) { c.busyTimeout = d }
}

// WithSynchronous sets SQLite's synchronous pragma: "NORMAL" (the default: in
// WAL mode a commit survives a process crash but the last commits may be lost
// on power failure) or "FULL" (every commit is fsynced). Any other value is
// refused by Open. Case does not matter.
func WithSynchronous(mode string) Option {
	return func(c *config) { c.synchronous = strings.ToUpper(mode) }
}

// WithMaxBatch bounds how many queued requests the writer applies in one
// transaction (group commit). Default 256; n < 1 is refused by Open; 1
// disables group commit.
func WithMaxBatch(n int) Option {
	return func(c *config) { c.maxBatch = n }
}

// WithAuditRetention sets how long the audit rows (api_calls) are kept:
// Prune deletes those written at or before now − d. Default 24h;
// d <= 0 is refused by Open.
func WithAuditRetention(d time.Duration) Option {
	return func(c *config) { c.auditRetention = d }
}

// WithDiskReserve keeps a file of n bytes beside the database (its name
// plus "-reserve") as room to recover from a full disk. When a write fails
// because the disk is full, the store deletes that file, checkpoints the
// WAL into the database with the room it gave, and then refuses every
// decision (limiter.ErrUnavailable, "disk full", and Ping fails too) while
// prunes and resets still run: they free pages without needing new ones.
// Each prune tries to write the reserve again; once it can, decisions
// resume. Without a reserve, a WAL that cannot be checkpointed into a full
// disk would stay stuck until someone frees space by hand. n should exceed
// the largest WAL, about 4 MiB (SQLite's auto-checkpoint at 1000 pages)
// plus one batch; the service sets 8 MiB. Default 0: no reserve. n < 0 is
// refused by Open.
func WithDiskReserve(n int64) Option {
	return func(c *config) { c.diskReserve = n }
}

// Store is a limiter.Store on one SQLite file. It is safe for concurrent use,
// and several Stores (in one or many processes) may share one file.
type Store struct {
	path    string // absolute
	cfg     config
	reserve reserve

	// The connections to the file at path, replaced together when the file
	// is deleted or replaced (see checkFile): only the writer goroutine
	// replaces them, holding connMu, which Peek and sliding_log_unsafe hold
	// for reading while they use a pool.
	connMu sync.RWMutex
	db     *sql.DB   // read-write pool: the writer's connection and sliding_log_unsafe
	ro     *sql.DB   // read-only pool: Peek
	wconn  *sql.Conn // the writer's connection, pinned
	w      *writer
	rw     *stmts         // on db, for sliding_log_unsafe
	rq     *stmts         // on ro, for Peek
	file   os.FileInfo    // the database file the connections have open
	wal    [2]os.FileInfo // its WAL and shared-memory files (walSuffixes), nil when not seen

	mu      sync.RWMutex // closed; held for reading while a call enqueues or reads the pools
	closed  bool
	queue   chan *op
	stopped chan struct{} // closed when the writer has drained the queue

	ops     sync.Pool
	yielded func() // tests only: called by yield before it looks at the queue
	batches atomic.Int64
	applied atomic.Int64
	replays atomic.Int64
}

var _ limiter.Store = (*Store)(nil)

// Open opens (creating if missing) the database at path, creates the schema
// if missing, and starts the writer. path is a file name, never ":memory:".
// Call Close to stop the writer and release the file.
func Open(path string, opts ...Option) (*Store, error) {
	cfg := config{busyTimeout: DefaultBusyTimeout, synchronous: DefaultSynchronous, maxBatch: DefaultMaxBatch, auditRetention: DefaultAuditRetention}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case path == "" || path == ":memory:":
		return nil, fmt.Errorf("sqlitestore: open: path %q: want a file name", path)
	case cfg.busyTimeout < 0:
		return nil, fmt.Errorf("sqlitestore: open: busy timeout %s is negative", cfg.busyTimeout)
	case cfg.synchronous != "NORMAL" && cfg.synchronous != "FULL":
		return nil, fmt.Errorf("sqlitestore: open: synchronous %q: want NORMAL or FULL", cfg.synchronous)
	case cfg.maxBatch < 1:
		return nil, fmt.Errorf("sqlitestore: open: max batch %d: want at least 1", cfg.maxBatch)
	case cfg.auditRetention <= 0:
		return nil, fmt.Errorf("sqlitestore: open: audit retention %s: want a positive duration", cfg.auditRetention)
	case cfg.diskReserve < 0:
		return nil, fmt.Errorf("sqlitestore: open: disk reserve %d: want 0 or more bytes", cfg.diskReserve)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open: %w", err)
	}
	s := &Store{
		path:    abs,
		cfg:     cfg,
		reserve: reserve{path: abs + "-reserve", size: cfg.diskReserve},
		queue:   make(chan *op, cfg.maxBatch),
		stopped: make(chan struct{}),
	}
	s.ops.New = func() any { return &op{done: make(chan struct{}, 1)} }
	if err := s.open(); err != nil {
		return nil, fmt.Errorf("sqlitestore: open: %w", errors.Join(whyNotCreated(abs, err), s.release()))
	}
	// A reserve that does not fit leaves the store refusing decisions (and
	// Ping saying why) until a prune makes room: not a reason to fail.
	_ = s.reserve.restore()
	go s.run()
	return s, nil
}

// open connects the pools, creates the schema, prepares the statements,
// and proves that the file takes a commit: a file that can be read but not
// written fails here rather than at the first decision.
func (s *Store) open() error {
	ctx, cfg := context.Background(), s.cfg
	var err error
	if s.db, err = sql.Open("sqlite", dsn(s.path, cfg, false)); err != nil {
		return err
	}
	s.db.SetMaxOpenConns(1 + poolConns)
	s.db.SetMaxIdleConns(1 + poolConns)
	if s.wconn, err = s.db.Conn(ctx); err != nil {
		return unavailable(err)
	}
	vacuumed, err := incrementalVacuum(ctx, s.wconn)
	if err != nil {
		return err
	}
	if err := createSchema(ctx, s.wconn); err != nil {
		return err
	}
	if s.w, err = newWriter(ctx, s.wconn, cfg, vacuumed); err != nil {
		return err
	}
	if s.rw, err = prepare(ctx, s.db); err != nil {
		return err
	}
	if s.ro, err = sql.Open("sqlite", dsn(s.path, cfg, true)); err != nil {
		return err
	}
	s.ro.SetMaxOpenConns(poolConns)
	s.ro.SetMaxIdleConns(poolConns)
	if s.rq, err = prepare(ctx, s.ro); err != nil {
		return err
	}
	if err := s.w.alone(&op{kind: opPing, ctx: ctx}); err != nil {
		return err
	}
	return s.identify()
}

// createSchema creates the tables and indexes in one write transaction, so
// that processes opening a new file at once do not race.
func createSchema(ctx context.Context, c *sql.Conn) error {
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("schema: %w", unavailable(err))
	}
	if err := execSchema(ctx, c); err != nil {
		_, _ = c.ExecContext(ctx, "ROLLBACK") // the error above is the one to report
		return fmt.Errorf("schema: %w", err)
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("schema: %w", unavailable(err))
	}
	return nil
}

// execSchema creates what is missing of the schema, and adds the held
// column to a rate_buckets table created before it existed (its buckets
// then hold 0 units until their next admitted attempt).
func execSchema(ctx context.Context, c *sql.Conn) error {
	if _, err := c.ExecContext(ctx, schema); err != nil {
		return err
	}
	var held int
	err := c.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info('rate_buckets') WHERE name = 'held'").Scan(&held)
	if err != nil || held > 0 {
		return err
	}
	_, err = c.ExecContext(ctx, "ALTER TABLE rate_buckets ADD COLUMN held INTEGER NOT NULL DEFAULT 0")
	return err
}

// incrementalVacuum makes the file give the pages that Prune frees back to
// the file system (auto_vacuum=INCREMENTAL, then each prune runs
// incremental_vacuum). A file without tables (a new one) is converted at
// once, which costs nothing. A file created without the mode needs one
// VACUUM, which rewrites the whole file and needs as much free disk again:
// that is left to the first prune (Store.giveBack), so that a start
// never waits for it nor fails for it. It reports whether the file is in an
// auto_vacuum mode.
func incrementalVacuum(ctx context.Context, c *sql.Conn) (bool, error) {
	var mode, tables int64
	if err := c.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil {
		return false, fmt.Errorf("auto_vacuum: %w", unavailable(err))
	}
	if mode != autoVacuumNone {
		return true, nil // INCREMENTAL, or FULL, which shrinks the file by itself
	}
	if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master").Scan(&tables); err != nil {
		return false, fmt.Errorf("auto_vacuum: %w", unavailable(err))
	}
	if tables > 0 {
		return false, nil
	}
	if err := convert(ctx, c); err != nil {
		return false, fmt.Errorf("auto_vacuum: %w", unavailable(err))
	}
	return true, nil
}

// convert rewrites the file in auto_vacuum=INCREMENTAL mode.
func convert(ctx context.Context, c *sql.Conn) error {
	_, err := c.ExecContext(ctx, "PRAGMA auto_vacuum = INCREMENTAL; VACUUM")
	return err
}

// autoVacuumNone is PRAGMA auto_vacuum's value for a file that never shrinks.
const autoVacuumNone = 0

// dsn is the file URI of path with the store's pragmas. The path is escaped,
// so names holding '?', '#' or '%' open the file they name.
func dsn(path string, cfg config, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+cfg.synchronous+")")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// release closes whatever open managed to open.
func (s *Store) release() error {
	var errs []error
	for _, q := range []*stmts{s.rq, s.rw} {
		if q != nil {
			errs = append(errs, q.close())
		}
	}
	if s.w != nil {
		errs = append(errs, s.w.close())
	}
	if s.wconn != nil {
		errs = append(errs, s.wconn.Close())
	}
	for _, db := range []*sql.DB{s.ro, s.db} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	s.db, s.ro, s.wconn, s.w, s.rw, s.rq = nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}

// Close stops accepting calls, lets the writer apply and answer every request
// already queued, then closes the database. Later calls, Close included,
// return an error wrapping limiter.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("sqlitestore: close: %w", limiter.ErrClosed)
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.stopped
	if err := s.release(); err != nil {
		return fmt.Errorf("sqlitestore: close: %w", err)
	}
	return nil
}

// Allow decides r under p and records it, atomically, through the writer;
// with r.Audit set, an allowed attempt also gets an api_calls row in the same
// transaction. The decision is committed before Allow returns. If ctx ends
// while the request waits, Allow returns ctx's error, but a decision the
// writer had already committed stays committed (and counted).
//
// sliding_log_unsafe does not go through the writer: it is seed 001's count
// then insert, two autocommit statements on the pool, and over-admits under
// concurrency by design.
func (s *Store) Allow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	if err := limiter.CheckRequest(p, r); err != nil {
		return limiter.Decision{}, fmt.Errorf("sqlitestore: allow: %w", err)
	}
	if p.Algorithm == limiter.SlidingLogUnsafe {
		return s.read(ctx, "allow", func(ctx context.Context) (limiter.Decision, error) {
			return s.rw.decide(ctx, p, r)
		})
	}
	res, err := s.submit(ctx, "allow", op{kind: opAllow, policy: p, req: r})
	return res.d, err
}

// Peek returns k's state under p at now without counting, read through the
// read-only pool: it never waits for the writer and sees the last committed
// state.
func (s *Store) Peek(ctx context.Context, p limiter.Policy, k limiter.Key, now time.Time) (limiter.Decision, error) {
	if err := p.Validate(); err != nil {
		return limiter.Decision{}, fmt.Errorf("sqlitestore: peek: %w", err)
	}
	if err := k.Validate(); err != nil {
		return limiter.Decision{}, fmt.Errorf("sqlitestore: peek: %w", err)
	}
	return s.read(ctx, "peek", func(ctx context.Context) (limiter.Decision, error) {
		return s.rq.decide(ctx, p, limiter.Request{Key: k, Now: now})
	})
}

// read runs f on a pool, Close waiting for it to finish.
func (s *Store) read(ctx context.Context, what string, f func(context.Context) (limiter.Decision, error)) (limiter.Decision, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return limiter.Decision{}, fmt.Errorf("sqlitestore: %s: %w", what, limiter.ErrClosed)
	}
	s.connMu.RLock()
	defer s.connMu.RUnlock()
	if s.db == nil {
		return limiter.Decision{}, fmt.Errorf("sqlitestore: %s: %w", what, unavailable(errNotOpen))
	}
	d, err := f(ctx)
	if err != nil {
		return limiter.Decision{}, fmt.Errorf("sqlitestore: %s: %w", what, err)
	}
	return d, nil
}

// Reset deletes k's rows under p (windows, events, bucket; never the audit
// log) and returns their units (see limiter.Store): window counts, event
// costs, the bucket's held units.
func (s *Store) Reset(ctx context.Context, p limiter.Policy, k limiter.Key) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("sqlitestore: reset: %w", err)
	}
	if err := k.Validate(); err != nil {
		return 0, fmt.Errorf("sqlitestore: reset: %w", err)
	}
	res, err := s.submit(ctx, "reset", op{kind: opReset, policy: p, req: limiter.Request{Key: k}})
	return res.n, err
}

// ResetSubject deletes every row of subject under p, whatever its scope, and
// returns their units, as Reset.
func (s *Store) ResetSubject(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("sqlitestore: reset subject: %w", err)
	}
	if err := (limiter.Key{Subject: subject}).Validate(); err != nil {
		return 0, fmt.Errorf("sqlitestore: reset subject: %w", err)
	}
	res, err := s.submit(ctx, "reset subject", op{kind: opResetSubject, policy: p, req: limiter.Request{Key: limiter.Key{Subject: subject}}})
	return res.n, err
}

// Prune deletes, for each of policies, the rows that can no longer affect a
// decision at now: window rows whose window_start is before now − 2×window,
// events created at or before now − window, buckets whose theoretical arrival
// time is at or before now (a full bucket). Rows of policies not in the list
// are left alone, so a policy removed from the configuration keeps its rows
// until it is pruned by name. It returns how many rows it deleted, in one
// transaction.
func (s *Store) Prune(ctx context.Context, now time.Time, policies []limiter.Policy) (int64, error) {
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return 0, fmt.Errorf("sqlitestore: prune: %w", err)
		}
	}
	res, err := s.submit(ctx, "prune", op{kind: opPrune, policies: policies, req: limiter.Request{Now: now}})
	return res.n, err
}

// Ping proves the store can decide: it goes through the writer, which
// checks that the file at the path is still the one open (reopening it
// otherwise), takes the write lock (BEGIN IMMEDIATE) and commits a change to
// a one-row table. It returns an error wrapping limiter.ErrUnavailable when
// any of that fails, when the lock cannot be had within the busy timeout, or
// while the disk is full (see WithDiskReserve); limiter.ErrClosed after
// Close.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.submit(ctx, "ping", op{kind: opPing})
	return err
}

// Files returns the absolute paths of the database file and of its disk
// reserve, "" when the store keeps none (see WithDiskReserve). While the
// store is open SQLite also keeps the database's -wal and -shm files beside
// it.
func (s *Store) Files() (database, reserve string) {
	if s.reserve.size > 0 {
		reserve = s.reserve.path
	}
	return s.path, reserve
}

// FileSize returns the bytes of the database file plus its write-ahead log,
// for a metrics gauge. It is safe to call at any time, also after Close.
func (s *Store) FileSize() (int64, error) {
	var total int64
	for _, name := range []string{s.path, s.path + "-wal"} {
		fi, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("sqlitestore: file size: %w", err)
		}
		total += fi.Size()
	}
	return total, nil
}

// DiskFull reports whether the store refuses decisions because the disk
// filled: its reserve (WithDiskReserve) is used up or could not be written
// again yet. Always false without a reserve. It is safe to call at any time,
// for a metrics gauge.
func (s *Store) DiskFull() bool { return s.reserve.missing() != nil }

// Stats counts the writer's work since Open, for metrics.
type Stats struct {
	// Batches is how many groups of requests the writer took from its queue;
	// each is one transaction, unless it was replayed.
	Batches int64
	// Applied is how many requests the writer answered. Applied/Batches is
	// the mean group-commit batch size.
	Applied int64
	// Replays is how many batches failed because one request failed, and were
	// applied again one request per transaction so that the others still
	// commit.
	Replays int64
}

// Stats returns the writer's counters. It is safe for concurrent use.
func (s *Store) Stats() Stats {
	return Stats{Batches: s.batches.Load(), Applied: s.applied.Load(), Replays: s.replays.Load()}
}

// submit queues o for the writer and waits for its answer.
func (s *Store) submit(ctx context.Context, what string, o op) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, fmt.Errorf("sqlitestore: %s: %w", what, err)
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return result{}, fmt.Errorf("sqlitestore: %s: %w", what, limiter.ErrClosed)
	}
	q := s.ops.Get().(*op)
	o.ctx, o.done = ctx, q.done
	*q = o
	select {
	case s.queue <- q:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		s.ops.Put(q)
		return result{}, fmt.Errorf("sqlitestore: %s: %w", what, ctx.Err())
	}
	select {
	case <-o.done:
		res := q.res
		*q = op{done: o.done} // drop the references while pooled
		s.ops.Put(q)
		if res.err != nil {
			return result{}, fmt.Errorf("sqlitestore: %s: %w", what, res.err)
		}
		if obs := limiter.StoreObserverOf(ctx); obs != nil && res.batch > 0 {
			obs.ObserveStore(limiter.StoreCall{Batch: res.batch})
		}
		return res, nil
	case <-ctx.Done():
		// q is not reused: the writer may still answer on its buffered
		// channel, which nobody reads any more.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && q.abandon() {
			// The writer had not taken it, and now never will: the
			// caller's time ran out while it waited for its turn.
			return result{}, fmt.Errorf("sqlitestore: %s: %w: %w", what, limiter.ErrOverloaded, ctx.Err())
		}
		// Cancelled, or in the writer's hands: it may still be applied.
		return result{}, fmt.Errorf("sqlitestore: %s: %w", what, ctx.Err())
	}
}

// unavailable marks an error that kept the store from deciding at all.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", limiter.ErrUnavailable, err)
}

// whyNotCreated returns err, the store's failure to open path, or, when
// path does not exist, the system's reason it cannot be created (a
// read-only folder, a missing one), with the path: SQLite only says
// "unable to open database file (14)".
func whyNotCreated(path string, err error) error {
	if _, serr := os.Stat(path); !errors.Is(serr, fs.ErrNotExist) {
		return err
	}
	f, cerr := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if cerr != nil {
		return cerr
	}
	return errors.Join(err, f.Close(), os.Remove(path))
}
