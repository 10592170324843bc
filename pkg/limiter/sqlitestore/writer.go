package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

type opKind uint8

const (
	opAllow opKind = iota
	opReset
	opResetSubject
	opPrune
	opPing
)

// op is one request to the writer. The caller owns it until it is queued;
// then the writer fills res and signals done (buffered, so the writer never
// waits for a caller that gave up).
type op struct {
	kind     opKind
	ctx      context.Context
	policy   limiter.Policy
	req      limiter.Request // Key for resets, Now for prune
	policies []limiter.Policy
	res      result
	done     chan struct{}
	// state is opQueued until the writer takes the op to apply it
	// (opTaken) or its caller, out of time, abandons it first
	// (opAbandoned); changed only by compare-and-swap, so the two agree on
	// whether the op was applied.
	state uint32
}

// The states of an op.
const (
	opQueued uint32 = iota
	opTaken
	opAbandoned
)

// take marks o as taken by the writer, unless its caller abandoned it first;
// it reports whether o may be applied (also when taken already: a replay).
func (o *op) take() bool {
	return atomic.CompareAndSwapUint32(&o.state, opQueued, opTaken) || atomic.LoadUint32(&o.state) == opTaken
}

// abandon marks o as abandoned by its caller, unless the writer took it
// first; it reports whether o will never be applied.
func (o *op) abandon() bool { return atomic.CompareAndSwapUint32(&o.state, opQueued, opAbandoned) }

type result struct {
	d     limiter.Decision
	n     int64
	err   error
	batch int // the requests committed in the request's transaction
}

// writer owns the store's one write connection and its statements.
type writer struct {
	conn                    *sql.Conn
	q                       *stmts
	begin, commit, rollback *sql.Stmt
	// prune deletes up to pruneChunk expired rows: (policy, cutoff) for
	// windows, events and buckets, (cutoff) for the audit rows.
	prune          [4]*sql.Stmt
	shrink         *sql.Stmt // moves up to pruneChunk free pages to the end of the file and cuts them off
	health         *sql.Stmt // a commit for Ping to make
	auditRetention time.Duration
	vacuumed       bool // the file is in an auto_vacuum mode; see incrementalVacuum
	// batch, todo and prunes are batch's lists, kept for their capacity;
	// prunes holds the prunes to run once the batch is answered.
	batch, todo, prunes []*op
}

func newWriter(ctx context.Context, c *sql.Conn, cfg config, vacuumed bool) (*writer, error) {
	q, err := prepare(ctx, c)
	if err != nil {
		return nil, err
	}
	w := &writer{conn: c, q: q, auditRetention: cfg.auditRetention, vacuumed: vacuumed, batch: make([]*op, 0, cfg.maxBatch), todo: make([]*op, 0, cfg.maxBatch)}
	for _, tx := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&w.begin, "BEGIN IMMEDIATE"}, {&w.commit, "COMMIT"}, {&w.rollback, "ROLLBACK"},
		{&w.prune[0], chunked("rate_limit_windows", "policy = ? AND window_start < ?")},
		{&w.prune[1], chunked("rate_events", "policy = ? AND created_at <= ?")},
		{&w.prune[2], chunked("rate_buckets", "policy = ? AND tat <= ?")},
		{&w.prune[3], chunked("api_calls", "called_at <= ?")},
		{&w.shrink, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", pruneChunk)},
		{&w.health, "INSERT INTO store_health (id, pings) VALUES (1, 1) ON CONFLICT(id) DO UPDATE SET pings = pings + 1"},
	} {
		if *tx.dst, err = c.PrepareContext(ctx, tx.query); err != nil {
			return nil, errors.Join(fmt.Errorf("prepare: %w", err), w.close())
		}
	}
	return w, nil
}

// close closes the writer's statements.
func (w *writer) close() error {
	errs := []error{w.q.close()}
	for _, st := range append(w.prune[:], w.begin, w.commit, w.rollback, w.shrink, w.health) {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// run is the writer goroutine. It returns when s.queue is closed and empty.
//
// For each batch it takes the first queued request and applies it with
// whatever else is queued (see batch). Prunes are run after the batch that
// brought them, one at a time, and between two of their chunks the writer
// applies one batch of the requests queued meanwhile (see yield): a prune of
// a million expired rows takes a thousand chunks, and the decisions that
// arrive during it must not wait for all of them (they would pass the
// service's decision budget and fail).
func (s *Store) run() {
	defer close(s.stopped)
	for first := range s.queue {
		s.batch(first)
		for len(s.w.prunes) > 0 {
			o := s.w.prunes[0]
			s.w.prunes = s.w.prunes[1:]
			o.res = s.prune(o)
			s.applied.Add(1)
			o.done <- struct{}{}
		}
		s.w.prunes = s.w.prunes[:0]
	}
}

// yield applies one batch of the requests queued meanwhile, if any, without
// waiting: called between two chunks of a prune.
func (s *Store) yield() {
	if s.yielded != nil {
		s.yielded()
	}
	select {
	case o, ok := <-s.queue:
		if ok {
			s.batch(o)
		}
	default:
	}
}

// batch makes sure the file at the path is the one open (checkFile), begins
// the transaction (waiting, up to the busy timeout, for other processes to
// release the write lock, while more requests queue up), then takes
// whatever else is queued up to the batch bound, applies all in arrival
// order, commits and answers, but for the prunes, which it leaves in
// s.w.prunes for run. While the disk is full (the reserve is missing) it
// refuses decisions and pings, and still applies resets, which free room.
func (s *Store) batch(first *op) {
	s.batches.Add(1)
	fileErr := s.checkFile()
	var fullErr, beginErr error
	if fileErr == nil {
		fullErr = s.reserve.missing()
	}
	begun := false
	if fileErr == nil && first.kind != opPrune && (fullErr == nil || first.frees()) {
		_, beginErr = s.w.begin.Exec()
		begun = beginErr == nil
	}
	// Let the callers answered by the last batch queue their next
	// request before this batch is closed: larger batches, fewer commits.
	runtime.Gosched()
	batch := fill(append(s.w.batch[:0], first), s.queue)
	todo := s.w.todo[:0]
	answered := 0
	for _, o := range batch {
		switch {
		case fileErr != nil:
			o.res.err = fileErr
		case fullErr != nil && !o.frees():
			o.res.err = fullErr
		case o.kind == opPrune:
			s.w.prunes = append(s.w.prunes, o)
			continue // answered by run once done
		case beginErr != nil:
			o.res.err = fmt.Errorf("begin: %w", unavailable(beginErr))
		default:
			todo = append(todo, o) // first among them when begun
		}
		batch[answered] = o
		answered++
	}
	s.w.applyAll(s, todo, begun)
	for _, o := range todo {
		if isFull(o.res.err) {
			s.onFull()
			break
		}
	}
	s.applied.Add(int64(answered))
	for _, o := range batch[:answered] {
		o.done <- struct{}{}
	}
	// Drop the references until the next batch.
	clear(batch)
	clear(todo)
	s.w.batch, s.w.todo = batch[:0], todo[:0]
}

// frees reports whether o only deletes (a prune or a reset): it runs while
// the disk is full.
func (o *op) frees() bool {
	return o.kind == opPrune || o.kind == opReset || o.kind == opResetSubject
}

// applyAll applies todo in the transaction begun when begun is true (else it
// begins one), isolating a failing request by replaying the others one per
// transaction.
func (w *writer) applyAll(s *Store, todo []*op, begun bool) {
	if len(todo) == 0 {
		return
	}
	if !begun {
		if _, err := w.begin.Exec(); err != nil {
			for _, o := range todo {
				o.res.err = fmt.Errorf("begin: %w", unavailable(err))
			}
			return
		}
	}
	if w.apply(todo) || len(todo) == 1 {
		return
	}
	// One request failed and the transaction was rolled back: apply each
	// alone so that only the failing one gets an error.
	s.replays.Add(1)
	for _, o := range todo {
		if err := w.alone(o); err != nil {
			o.res.err = err
		}
	}
}

// alone applies o in a transaction of its own, setting its result, and
// returns its error.
func (w *writer) alone(o *op) error {
	if _, err := w.begin.Exec(); err != nil {
		o.res.err = fmt.Errorf("begin: %w", unavailable(err))
		return o.res.err
	}
	w.apply([]*op{o})
	return o.res.err
}

// fill appends queued requests to batch, without waiting, up to its capacity.
func fill(batch []*op, queue <-chan *op) []*op {
	for len(batch) < cap(batch) {
		select {
		case o, ok := <-queue:
			if !ok {
				return batch
			}
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

// apply runs batch inside the transaction just begun and commits it, setting
// each request's result. A request whose caller has gone is skipped. It
// returns false when one request failed: the transaction is then rolled
// back, and results already set are void.
func (w *writer) apply(batch []*op) bool {
	ctx := context.Background() // a caller's ctx must not abort the others' transaction
	for _, o := range batch {
		if !o.take() {
			continue // its caller has answered: never applied
		}
		if err := o.ctx.Err(); err != nil {
			o.res = result{err: err}
			continue
		}
		o.res = w.do(ctx, o)
		if o.res.err != nil {
			o.res.err = storageFailure(o.res.err)
			// ROLLBACK fails only when SQLite has already rolled back.
			_, _ = w.rollback.Exec()
			return false
		}
	}
	if _, err := w.commit.Exec(); err != nil {
		_, _ = w.rollback.Exec() // as above
		for _, o := range batch {
			o.res = result{err: fmt.Errorf("commit: %w", unavailable(err))}
		}
		return true
	}
	for _, o := range batch {
		o.res.batch = len(batch)
	}
	return true
}

// do applies one request.
func (w *writer) do(ctx context.Context, o *op) result {
	var r result
	switch o.kind {
	case opAllow:
		r.d, r.err = w.q.decide(ctx, o.policy, o.req)
	case opReset:
		r.n, r.err = w.q.resetKeyUnits(ctx, o.policy, o.req.Key)
	case opResetSubject:
		r.n, r.err = w.q.resetSubjectUnits(ctx, o.policy, o.req.Key.Subject)
	case opPing:
		_, r.err = w.health.ExecContext(ctx)
	}
	return r
}

// pruneChunk bounds the rows one prune transaction deletes and the pages
// one incremental vacuum moves.
const pruneChunk = 1000

// chunked is a DELETE of up to pruneChunk rows of table matching where.
func chunked(table, where string) string {
	return fmt.Sprintf("DELETE FROM %[1]s WHERE rowid IN (SELECT rowid FROM %[1]s WHERE %[2]s LIMIT %[3]d)", table, where, pruneChunk)
}

// prune deletes, for each of o's policies, the rows that can no longer
// affect a decision at o's time, and the audit rows older than the
// retention; then it gives the pages this freed back to the file system. It
// works in transactions of at most pruneChunk rows or pages, each followed
// by a checkpoint, so that the WAL never holds more than one of them: on a
// full disk, the room of the reserve is enough (see WithDiskReserve). Then
// it converts a file that has no auto_vacuum mode yet (one VACUUM),
// truncates the WAL, and writes the reserve again if it is missing. Rows
// deleted stay deleted when a later step fails.
func (s *Store) prune(o *op) result {
	if err := o.ctx.Err(); err != nil {
		return result{err: err}
	}
	ctx := context.Background() // the job must not stop between two chunks for one caller
	audit := eventTimeText(o.req.Now.Add(-s.cfg.auditRetention))
	var total int64
	step := func(st *sql.Stmt, args ...any) error {
		for {
			n, err := s.chunk(ctx, st, args...)
			total += n
			if err != nil || n < pruneChunk {
				return err
			}
			s.yield()
		}
	}
	for _, p := range o.policies {
		cutoffs := [3]any{
			windowStartText(o.req.Now.Add(-2 * p.Window)),
			eventTimeText(o.req.Now.Add(-p.Window)),
			o.req.Now.UnixNano(),
		}
		for i, cutoff := range cutoffs {
			if err := step(s.w.prune[i], p.Name, cutoff); err != nil {
				return result{err: err}
			}
		}
	}
	if err := step(s.w.prune[3], audit); err != nil {
		return result{err: fmt.Errorf("audit: %w", err)}
	}
	if err := s.giveBack(ctx); err != nil {
		return result{err: fmt.Errorf("after prune: %w", unavailable(err))}
	}
	return result{n: total}
}

// chunk runs st (one chunk of a prune) in a transaction of its own and
// checkpoints. On a full disk it gives the reserve's room to the file and
// tries once more. It returns the rows st deleted.
func (s *Store) chunk(ctx context.Context, st *sql.Stmt, args ...any) (int64, error) {
	var n int64
	err := s.w.inTx(func() (err error) {
		n, err = affected(ctx, st, args...)
		return err
	})
	if isFull(err) {
		s.onFull()
		err = s.w.inTx(func() (err error) {
			n, err = affected(ctx, st, args...)
			return err
		})
	}
	if err != nil {
		return 0, storageFailure(err)
	}
	return n, s.checkpoint(ctx, "PASSIVE")
}

// giveBack moves the free pages to the end of the file and cuts them off,
// converting the file to auto_vacuum=INCREMENTAL first if it is not yet,
// then writes the reserve if it is missing.
func (s *Store) giveBack(ctx context.Context) error {
	if !s.w.vacuumed {
		if err := convert(ctx, s.wconn); err != nil {
			return fmt.Errorf("vacuum into auto_vacuum=INCREMENTAL: %w", err)
		}
		s.w.vacuumed = true
	}
	for {
		var free int64
		if err := s.wconn.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
			return fmt.Errorf("freelist: %w", err)
		}
		if free == 0 {
			break
		}
		if err := s.w.inTx(func() error { _, err := s.w.shrink.ExecContext(ctx); return err }); err != nil {
			return fmt.Errorf("incremental vacuum: %w", err)
		}
		if err := s.checkpoint(ctx, "PASSIVE"); err != nil {
			return err
		}
		s.yield()
	}
	if err := s.checkpoint(ctx, "TRUNCATE"); err != nil {
		return err
	}
	if err := s.reserve.restore(); err != nil {
		return fmt.Errorf("%w: writing the reserve %s: %w", errDiskFull, s.reserve.path, err)
	}
	return nil
}

// onFull gives the reserve's room to the database and checkpoints the WAL
// into it: from then on only prunes and resets run, until a prune writes
// the reserve again.
func (s *Store) onFull() {
	s.reserve.release()
	_ = s.checkpoint(context.Background(), "TRUNCATE") // best effort: every prune chunk tries again
}

// inTx runs f in a transaction of its own on the writer's connection.
func (w *writer) inTx(f func() error) error {
	if _, err := w.begin.Exec(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := f(); err != nil {
		_, _ = w.rollback.Exec() // the error to report is f's
		return err
	}
	if _, err := w.commit.Exec(); err != nil {
		_, _ = w.rollback.Exec()
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
