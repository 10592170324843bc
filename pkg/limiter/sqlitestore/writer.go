package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
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
}

type result struct {
	d   limiter.Decision
	n   int64
	err error
}

// writer owns the store's one write connection and its statements.
type writer struct {
	conn                    *sql.Conn
	q                       *stmts
	begin, commit, rollback *sql.Stmt
	pruneAudit              *sql.Stmt // (cutoff) deletes api_calls rows at or before it
	shrink                  *sql.Stmt // moves free pages to the end of the file and cuts them off
	auditRetention          time.Duration
	vacuumed                bool // the file is in an auto_vacuum mode; see incrementalVacuum
	batch                   []*op
}

func newWriter(ctx context.Context, c *sql.Conn, cfg config, vacuumed bool) (*writer, error) {
	q, err := prepare(ctx, c)
	if err != nil {
		return nil, err
	}
	w := &writer{conn: c, q: q, auditRetention: cfg.auditRetention, vacuumed: vacuumed, batch: make([]*op, 0, cfg.maxBatch)}
	for _, tx := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&w.begin, "BEGIN IMMEDIATE"}, {&w.commit, "COMMIT"}, {&w.rollback, "ROLLBACK"},
		{&w.pruneAudit, "DELETE FROM api_calls WHERE called_at <= ?"},
		{&w.shrink, "PRAGMA incremental_vacuum"},
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
	for _, st := range []*sql.Stmt{w.begin, w.commit, w.rollback, w.pruneAudit, w.shrink} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// run is the writer goroutine. It returns when s.queue is closed and empty.
//
// For each batch it takes the first queued request, begins the transaction
// (waiting, up to the busy timeout, for other processes to release the write
// lock, while more requests queue up), then takes whatever else is queued up
// to the batch bound, applies all in arrival order, commits, and answers.
func (w *writer) run(s *Store) {
	defer close(s.stopped)
	for first := range s.queue {
		s.batches.Add(1)
		_, beginErr := w.begin.Exec()
		// Let the callers answered by the last batch queue their next
		// request before this batch is closed: larger batches, fewer commits.
		runtime.Gosched()
		batch := w.fill(append(w.batch[:0], first), s.queue)
		switch {
		case beginErr != nil:
			for _, o := range batch {
				o.res.err = fmt.Errorf("begin: %w", unavailable(beginErr))
			}
		case !w.apply(batch) && len(batch) > 1:
			// One request failed and the transaction was rolled back: apply
			// each alone so that only the failing one gets an error.
			s.replays.Add(1)
			for i := range batch {
				if _, err := w.begin.Exec(); err != nil {
					batch[i].res.err = fmt.Errorf("begin: %w", unavailable(err))
					continue
				}
				w.apply(batch[i : i+1])
			}
		}
		w.afterPrune(batch)
		s.applied.Add(int64(len(batch)))
		for _, o := range batch {
			o.done <- struct{}{}
		}
		clear(batch) // drop the references until the next batch
	}
}

// fill appends queued requests to batch, without waiting, up to its capacity.
func (w *writer) fill(batch []*op, queue <-chan *op) []*op {
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
		if err := o.ctx.Err(); err != nil {
			o.res = result{err: err}
			continue
		}
		o.res = w.do(ctx, o)
		if o.res.err != nil {
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
		r.n, r.err = w.q.resetKeyRows(ctx, o.policy, o.req.Key)
	case opResetSubject:
		r.n, r.err = w.q.resetSubjectRows(ctx, o.policy, o.req.Key.Subject)
	case opPrune:
		r.n, r.err = w.prune(ctx, o.req.Now, o.policies)
	case opPing:
		// The write lock taken by BEGIN IMMEDIATE is the proof.
	}
	return r
}

// prune deletes the expired state of policies and the audit rows older than
// the retention, then moves the pages this freed to the end of the file,
// where the next checkpoint cuts them off (afterPrune).
func (w *writer) prune(ctx context.Context, now time.Time, policies []limiter.Policy) (int64, error) {
	n, err := w.q.pruneRows(ctx, now, policies)
	if err != nil {
		return 0, err
	}
	audit, err := affected(ctx, w.pruneAudit, limiter.EventTimeText(now.Add(-w.auditRetention)))
	if err != nil {
		return 0, fmt.Errorf("audit: %w", err)
	}
	if _, err := w.shrink.ExecContext(ctx); err != nil {
		return 0, fmt.Errorf("incremental vacuum: %w", err)
	}
	return n + audit, nil
}

// afterPrune, when batch holds a prune that committed, gives the freed space
// back to the file system: it converts a file that has no auto_vacuum mode
// yet (one VACUUM), then checkpoints the WAL into the file and truncates
// both. A failure is reported to the prune; its deletions stay committed.
func (w *writer) afterPrune(batch []*op) {
	var pruned []*op
	for _, o := range batch {
		if o.kind == opPrune && o.res.err == nil {
			pruned = append(pruned, o)
		}
	}
	if len(pruned) == 0 {
		return
	}
	ctx := context.Background()
	var err error
	if !w.vacuumed {
		if err = convert(ctx, w.conn); err == nil {
			w.vacuumed = true
		} else {
			err = fmt.Errorf("vacuum into auto_vacuum=INCREMENTAL: %w", err)
		}
	}
	if err == nil {
		// Busy (a reader in another process) is not an error: the file
		// shrinks at a later checkpoint.
		var busy, frames, done int64
		if err = w.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &done); err != nil {
			err = fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err != nil {
		for _, o := range pruned {
			o.res = result{err: fmt.Errorf("after prune: %w", unavailable(err))}
		}
	}
}
