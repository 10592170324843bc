package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// schema is the tables and indexes of seeds 000 and 001 (docs/seeds.md),
// extended with policy (one database hosts many policies), endpoint and
// cost. Every statement is idempotent.
const schema = `
CREATE TABLE IF NOT EXISTS rate_limit_windows (
    policy       TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    endpoint     TEXT    NOT NULL DEFAULT '',
    window_start TEXT    NOT NULL,
    count        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (policy, key, endpoint, window_start)
);
CREATE INDEX IF NOT EXISTS idx_rl_key_window ON rate_limit_windows(policy, window_start);
CREATE TABLE IF NOT EXISTS rate_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    policy     TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    endpoint   TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    cost       INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS idx_rate_events_user_endpoint ON rate_events (policy, user_id, endpoint, created_at);
CREATE TABLE IF NOT EXISTS rate_buckets (
    policy   TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    endpoint TEXT    NOT NULL DEFAULT '',
    tat      INTEGER NOT NULL,
    held     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (policy, key, endpoint)
);
CREATE TABLE IF NOT EXISTS api_calls (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    key       TEXT NOT NULL,
    endpoint  TEXT NOT NULL,
    called_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_api_calls_called_at ON api_calls (called_at);
CREATE TABLE IF NOT EXISTS store_health (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    pings INTEGER NOT NULL
);
`

// stmts holds the store's statements prepared on one handle: the writer's
// connection, the read-only pool or the read-write pool. Arguments are always
// bound, never formatted into the SQL.
type stmts struct {
	// rate_limit_windows (fixed_window, sliding_window)
	windowAdd   *sql.Stmt // (policy, key, endpoint, window_start, cost)
	windowCount *sql.Stmt // (policy, key, endpoint, window_start) -> count
	windowPair  *sql.Stmt // (policy, key, endpoint, prev_start, cur_start) -> prev, cur
	// rate_events (sliding_log, sliding_log_unsafe)
	logSum    *sql.Stmt // (policy, user_id, endpoint, since) -> units, newest created_at
	logList   *sql.Stmt // (policy, user_id, endpoint, since) -> created_at, cost oldest first
	logInsert *sql.Stmt // (policy, user_id, endpoint, created_at, cost)
	// rate_buckets (token_bucket)
	bucketGet *sql.Stmt // (policy, key, endpoint) -> tat
	bucketPut *sql.Stmt // (policy, key, endpoint, tat, held)
	// api_calls
	audit *sql.Stmt // (key, endpoint, called_at)
	// Reset: (policy, key, endpoint); ResetSubject: (policy, key). Each
	// returns the units of the rows it deletes.
	resetKey     [3]*sql.Stmt
	resetSubject [3]*sql.Stmt
}

// preparer is what *sql.DB and *sql.Conn have in common.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// defs pairs every statement field with its SQL.
func (q *stmts) defs() []struct {
	dst   **sql.Stmt
	query string
} {
	return []struct {
		dst   **sql.Stmt
		query string
	}{
		{&q.windowAdd, `INSERT INTO rate_limit_windows (policy, key, endpoint, window_start, count) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(policy, key, endpoint, window_start) DO UPDATE SET count = count + excluded.count`},
		{&q.windowCount, `SELECT count FROM rate_limit_windows WHERE policy = ? AND key = ? AND endpoint = ? AND window_start = ?`},
		{&q.windowPair, `SELECT
				COALESCE(SUM(CASE WHEN window_start = ?4 THEN count END), 0),
				COALESCE(SUM(CASE WHEN window_start = ?5 THEN count END), 0)
			FROM rate_limit_windows WHERE policy = ?1 AND key = ?2 AND endpoint = ?3 AND window_start IN (?4, ?5)`},
		{&q.logSum, `SELECT COALESCE(SUM(cost), 0), COALESCE(MAX(created_at), '')
			FROM rate_events WHERE policy = ? AND user_id = ? AND endpoint = ? AND created_at > ?`},
		{&q.logList, `SELECT created_at, cost FROM rate_events
			WHERE policy = ? AND user_id = ? AND endpoint = ? AND created_at > ? ORDER BY created_at`},
		{&q.logInsert, `INSERT INTO rate_events (policy, user_id, endpoint, created_at, cost) VALUES (?, ?, ?, ?, ?)`},
		{&q.bucketGet, `SELECT tat FROM rate_buckets WHERE policy = ? AND key = ? AND endpoint = ?`},
		{&q.bucketPut, `INSERT INTO rate_buckets (policy, key, endpoint, tat, held) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(policy, key, endpoint) DO UPDATE SET tat = excluded.tat, held = excluded.held`},
		{&q.audit, `INSERT INTO api_calls (key, endpoint, called_at) VALUES (?, ?, ?)`},
		{&q.resetKey[0], `DELETE FROM rate_limit_windows WHERE policy = ? AND key = ? AND endpoint = ? RETURNING count`},
		{&q.resetKey[1], `DELETE FROM rate_events WHERE policy = ? AND user_id = ? AND endpoint = ? RETURNING cost`},
		{&q.resetKey[2], `DELETE FROM rate_buckets WHERE policy = ? AND key = ? AND endpoint = ? RETURNING held`},
		{&q.resetSubject[0], `DELETE FROM rate_limit_windows WHERE policy = ? AND key = ? RETURNING count`},
		{&q.resetSubject[1], `DELETE FROM rate_events WHERE policy = ? AND user_id = ? RETURNING cost`},
		{&q.resetSubject[2], `DELETE FROM rate_buckets WHERE policy = ? AND key = ? RETURNING held`},
	}
}

// prepare prepares every statement on p.
func prepare(ctx context.Context, p preparer) (*stmts, error) {
	q := &stmts{}
	for _, d := range q.defs() {
		st, err := p.PrepareContext(ctx, d.query)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("prepare: %w", err), q.close())
		}
		*d.dst = st
	}
	return q, nil
}

// close closes the statements prepared so far.
func (q *stmts) close() error {
	var errs []error
	for _, d := range q.defs() {
		if *d.dst != nil {
			errs = append(errs, (*d.dst).Close())
		}
	}
	return errors.Join(errs...)
}
