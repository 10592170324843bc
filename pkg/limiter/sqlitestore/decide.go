package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// decide reads r.Key's state under p with q, calls the algorithm's arithmetic
// and writes the new state. r.Cost 0 is a peek: nothing is written, so q may
// be the read-only pool. It is atomic only when the caller makes it so (the
// writer's transaction); sliding_log_unsafe calls it on the pool on purpose.
func (q *stmts) decide(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	var (
		d   limiter.Decision
		err error
	)
	switch p.Algorithm {
	case limiter.FixedWindow:
		d, err = q.fixedWindow(ctx, p, r)
	case limiter.SlidingWindow:
		d, err = q.slidingWindow(ctx, p, r)
	case limiter.SlidingLog, limiter.SlidingLogUnsafe:
		d, err = q.slidingLog(ctx, p, r)
	case limiter.TokenBucket:
		d, err = q.tokenBucket(ctx, p, r)
	default:
		return limiter.Decision{}, fmt.Errorf("%q: %w", p.Algorithm, limiter.ErrUnknownAlgorithm)
	}
	if err != nil {
		return limiter.Decision{}, err
	}
	if r.Cost > 0 && d.Allowed && r.Audit != "" {
		if _, err := q.audit.ExecContext(ctx, r.Key.Subject, r.Audit, eventTimeText(r.Now)); err != nil {
			return limiter.Decision{}, fmt.Errorf("audit: %w", err)
		}
	}
	return d, nil
}

// fixedWindow is seed 000's upsert (docs/seeds.md), then a read of the
// count after it, in the writer's transaction (a peek only reads it): every
// attempt is counted, refused ones too. The upsert does not return the count
// (RETURNING): SQLite gathers a RETURNING statement's rows in a temporary
// table first, which costs more than the second lookup of a row whose page
// the upsert has just read (docs/benchmarks.md, BenchmarkAllowManyKeys).
func (q *stmts) fixedWindow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	start := windowStartText(limiter.WindowStart(r.Now, p.Window))
	k := r.Key
	var (
		count int64
		err   error
	)
	if r.Cost > 0 {
		_, err = q.windowAdd.ExecContext(ctx, p.Name, k.Subject, k.Scope, start, r.Cost)
	}
	if err == nil {
		err = q.windowCount.QueryRowContext(ctx, p.Name, k.Subject, k.Scope, start).Scan(&count)
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return limiter.Decision{}, fmt.Errorf("fixed window: %w", err)
	}
	return limiter.FixedWindowDecide(p, count-r.Cost, r.Cost, r.Now), nil
}

// slidingWindow reads the previous and current window rows; an allowed
// attempt adds its cost to the current one.
func (q *stmts) slidingWindow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	cur := limiter.WindowStart(r.Now, p.Window)
	curText := windowStartText(cur)
	k := r.Key
	var prevCount, curCount int64
	err := q.windowPair.QueryRowContext(ctx, p.Name, k.Subject, k.Scope,
		windowStartText(cur.Add(-p.Window)), curText).Scan(&prevCount, &curCount)
	if err != nil {
		return limiter.Decision{}, fmt.Errorf("sliding window: %w", err)
	}
	d := limiter.SlidingWindowDecide(p, prevCount, curCount, r.Cost, r.Now)
	if d.Allowed && r.Cost > 0 {
		if _, err := q.windowAdd.ExecContext(ctx, p.Name, k.Subject, k.Scope, curText, r.Cost); err != nil {
			return limiter.Decision{}, fmt.Errorf("sliding window: %w", err)
		}
	}
	return d, nil
}

// slidingLog sums the events in (now-window, ...] in SQL. When the attempt
// fits, the sum and the newest event are all the arithmetic needs; only a
// refusal, whose RetryAfter depends on each event, reads the events one by
// one. An allowed attempt is recorded as one event of its cost.
func (q *stmts) slidingLog(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	k := r.Key
	since := eventTimeText(r.Now.Add(-p.Window))
	var (
		units  int64
		newest string
	)
	err := q.logSum.QueryRowContext(ctx, p.Name, k.Subject, k.Scope, since).Scan(&units, &newest)
	if err != nil {
		return limiter.Decision{}, fmt.Errorf("sliding log: %w", err)
	}
	var events []limiter.Event
	if units+max(r.Cost, 1) > p.Limit {
		events, err = q.events(ctx, p, k, since)
	} else if units > 0 {
		var e limiter.Event
		e, err = event(newest, units)
		events = []limiter.Event{e}
	}
	if err != nil {
		return limiter.Decision{}, err
	}
	d := limiter.SlidingLogDecide(p, events, r.Cost, r.Now)
	if d.Allowed && r.Cost > 0 {
		_, err := q.logInsert.ExecContext(ctx, p.Name, k.Subject, k.Scope, eventTimeText(r.Now), r.Cost)
		if err != nil {
			return limiter.Decision{}, fmt.Errorf("sliding log: %w", err)
		}
	}
	return d, nil
}

// events returns k's events after since, oldest first.
func (q *stmts) events(ctx context.Context, p limiter.Policy, k limiter.Key, since string) ([]limiter.Event, error) {
	rows, err := q.logList.QueryContext(ctx, p.Name, k.Subject, k.Scope, since)
	if err != nil {
		return nil, fmt.Errorf("sliding log: %w", err)
	}
	defer rows.Close()
	var events []limiter.Event
	for rows.Next() {
		var (
			at   string
			cost int64
		)
		if err := rows.Scan(&at, &cost); err != nil {
			return nil, fmt.Errorf("sliding log: %w", err)
		}
		e, err := event(at, cost)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sliding log: %w", err)
	}
	return events, nil
}

// event parses a created_at written by eventTimeText.
func event(createdAt string, cost int64) (limiter.Event, error) {
	t, err := time.Parse(eventLayout, createdAt)
	if err != nil {
		return limiter.Event{}, fmt.Errorf("sliding log: bad created_at: %w", err)
	}
	return limiter.Event{At: t.UnixNano(), Cost: cost}, nil
}

// tokenBucket reads the key's theoretical arrival time and stores the new one
// when it moved.
func (q *stmts) tokenBucket(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	k := r.Key
	var tat int64
	err := q.bucketGet.QueryRowContext(ctx, p.Name, k.Subject, k.Scope).Scan(&tat)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return limiter.Decision{}, fmt.Errorf("token bucket: %w", err)
	}
	d, next := limiter.TokenBucketDecide(p, tat, r.Cost, r.Now)
	if next != tat {
		if _, err := q.bucketPut.ExecContext(ctx, p.Name, k.Subject, k.Scope, next, d.Count); err != nil {
			return limiter.Decision{}, fmt.Errorf("token bucket: %w", err)
		}
	}
	return d, nil
}

// resetKeyUnits deletes k's rows under p from the three state tables and returns
// their units.
func (q *stmts) resetKeyUnits(ctx context.Context, p limiter.Policy, k limiter.Key) (int64, error) {
	return unitsAll(ctx, q.resetKey[:], p.Name, k.Subject, k.Scope)
}

// resetSubjectUnits deletes every row of subject under p, whatever its scope, and
// returns their units.
func (q *stmts) resetSubjectUnits(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	return unitsAll(ctx, q.resetSubject[:], p.Name, subject)
}

// unitsAll runs each statement (a DELETE … RETURNING of one unit column)
// with args and returns the sum of the units it returned.
func unitsAll(ctx context.Context, sts []*sql.Stmt, args ...any) (int64, error) {
	var total int64
	for _, st := range sts {
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			var n int64
			if err := rows.Scan(&n); err != nil {
				_ = rows.Close() // the scan error is the one to report
				return 0, err
			}
			total += n
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// affected runs st with args and returns the rows it deleted.
func affected(ctx context.Context, st *sql.Stmt, args ...any) (int64, error) {
	res, err := st.ExecContext(ctx, args...)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("delete: %w", err)
}
