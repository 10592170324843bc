package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
	_ "modernc.org/sqlite" // the "sqlite" driver the lab's own connections use
)

// Stores `lab cost` measures.
const (
	storeMemory = "memory"
	storeSQLite = "sqlite"
	storeRedis  = "redis"
)

// costConfig is the workload of `lab cost`: keys keys, each sent
// 2×limit attempts one millisecond apart at the start of a window: the
// first limit pass under every algorithm, the next limit are refused. A
// sliding log then holds limit events per key, its largest state.
type costConfig struct {
	keys    int
	limit   int64
	window  time.Duration
	stores  []string
	clients int // goroutines sending attempts, each its own keys
}

func defaultCostConfig() costConfig {
	return costConfig{keys: 500, limit: 100, window: time.Minute, stores: []string{storeMemory, storeSQLite, storeRedis}, clients: 16}
}

func (c costConfig) attempts() int64  { return 2 * c.limit }
func (c costConfig) decisions() int64 { return int64(c.keys) * c.attempts() }

// costRow is one (algorithm, store) measurement, as printed with --json.
type costRow struct {
	Algorithm         string  `json:"algorithm"`
	Store             string  `json:"store"`
	BytesPerKey       float64 `json:"bytes_per_key"`
	WritesPerDecision float64 `json:"writes_per_decision"`
	Keys              int     `json:"keys"`
	Decisions         int64   `json:"decisions"`
	Admitted          int64   `json:"admitted"`
	// Detail says what was measured beyond the two figures.
	Detail string `json:"detail,omitempty"`
}

// costReport is the result of `lab cost`.
type costReport struct {
	Command  string    `json:"command"`
	Keys     int       `json:"keys"`
	Limit    int64     `json:"limit"`
	Window   float64   `json:"window_seconds"`
	Attempts int64     `json:"attempts_per_key"`
	Rows     []costRow `json:"rows"`
	Skipped  []string  `json:"skipped,omitempty"`
}

// costStart is the virtual time of the workload's first attempt: a window
// start, so that every attempt falls in one window.
func (c costConfig) costStart() time.Time {
	return limiter.WindowStart(time.Unix(0, traceOrigin), c.window).Add(c.window)
}

// workload sends every key its attempts through store under p, from
// c.clients goroutines (each a share of the keys, in time order per key),
// calling each(key, attempt, decision) after each decision (under no lock:
// it must be safe for concurrent use). It returns how many were admitted.
func (c costConfig) workload(ctx context.Context, store limiter.Store, p limiter.Policy, keys []limiter.Key, prog *progress,
	around func(k limiter.Key, now time.Time, decide func() (limiter.Decision, error)) (limiter.Decision, error),
) (int64, error) {
	start := c.costStart()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int64
		firstErr error
	)
	for g := range c.clients {
		wg.Go(func() {
			var n int64
			for i := g; i < len(keys); i += c.clients {
				for j := range c.attempts() {
					now := start.Add(time.Duration(j) * time.Millisecond)
					r := limiter.Request{Key: keys[i], Cost: 1, Now: now}
					decide := func() (limiter.Decision, error) { return store.Allow(ctx, p, r) }
					d, err := around(keys[i], now, decide)
					if err != nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
						return
					}
					if d.Allowed {
						n++
					}
				}
			}
			mu.Lock()
			admitted += n
			mu.Unlock()
		})
	}
	wg.Wait()
	prog.Add(int64(len(keys)) * c.attempts())
	return admitted, firstErr
}

func cmpErr(old, new error) error {
	if old != nil {
		return old
	}
	return new
}

// plainDecide runs the decision and nothing else.
func plainDecide(_ limiter.Key, _ time.Time, decide func() (limiter.Decision, error)) (limiter.Decision, error) {
	return decide()
}

// costKeys returns the workload's keys, made before any measurement.
func costKeys(n int) []limiter.Key {
	keys := make([]limiter.Key, n)
	for i := range keys {
		keys[i] = limiter.Key{Subject: "client-" + strconv.Itoa(i)}
	}
	return keys
}

// cost measures every (store, algorithm) pair of c.
func cost(ctx context.Context, c costConfig, rep reporter) (costReport, error) {
	r := costReport{Command: "cost", Keys: c.keys, Limit: c.limit, Window: c.window.Seconds(), Attempts: c.attempts()}
	ps, err := policies(c.limit, c.window)
	if err != nil {
		return r, err
	}
	keys := costKeys(c.keys)
	dir, err := os.MkdirTemp("", "tollgate-lab-cost-")
	if err != nil {
		return r, fmt.Errorf("lab: cost: %w", err)
	}
	defer os.RemoveAll(dir)
	var redisSrv *redisServer
	for _, st := range c.stores {
		if st != storeRedis {
			continue
		}
		redisSrv, err = startRedis(dir)
		switch {
		case errors.Is(err, errNoRedis):
			r.Skipped = append(r.Skipped, "redis: "+err.Error())
		case err != nil:
			return r, err
		default:
			defer redisSrv.stop()
		}
	}
	total := int64(0)
	for _, st := range c.stores {
		if st == storeRedis && redisSrv == nil {
			continue
		}
		total += nAlgs * c.decisions()
		if st == storeSQLite {
			total += nAlgs * int64(writeKeys(c.keys)) * c.attempts() // the writes pass
		}
	}
	prog := rep.start("cost", "decisions", total)
	defer prog.Finish()
	for _, st := range c.stores {
		for _, p := range ps {
			var row costRow
			var err error
			switch st {
			case storeMemory:
				row, err = c.memoryCost(ctx, p, keys, prog)
			case storeSQLite:
				row, err = c.sqliteCost(ctx, p, keys, dir, prog)
			case storeRedis:
				if redisSrv == nil {
					continue
				}
				row, err = c.redisCost(ctx, p, keys, redisSrv, prog)
			}
			if err != nil {
				return r, err
			}
			row.Algorithm, row.Store, row.Keys, row.Decisions = string(p.Algorithm), st, c.keys, c.decisions()
			r.Rows = append(r.Rows, row)
		}
	}
	return r, nil
}

// memoryCost measures the heap a memory store holds for the keys (live heap
// after a collection, less the empty store's), and the share of decisions
// that changed a key's state: a Peek at the same instant before and after
// the decision differs exactly when the decision wrote something.
func (c costConfig) memoryCost(ctx context.Context, p limiter.Policy, keys []limiter.Key, prog *progress) (costRow, error) {
	store := memstore.New(memstore.WithMaxKeys(memoryMaxKeys))
	defer store.Close()
	before := liveHeap()
	var mu sync.Mutex
	var writes int64
	admitted, err := c.workload(ctx, store, p, keys, prog, func(k limiter.Key, now time.Time, decide func() (limiter.Decision, error)) (limiter.Decision, error) {
		pre, err := store.Peek(ctx, p, k, now)
		if err != nil {
			return pre, err
		}
		d, err := decide()
		if err != nil {
			return d, err
		}
		post, err := store.Peek(ctx, p, k, now)
		if err != nil {
			return d, err
		}
		if pre != post {
			mu.Lock()
			writes++
			mu.Unlock()
		}
		return d, nil
	})
	if err != nil {
		return costRow{}, err
	}
	after := liveHeap()
	if n := store.Evictions(); n > 0 {
		return costRow{}, fmt.Errorf("lab: cost: the memory store evicted %d keys", n)
	}
	return costRow{
		BytesPerKey:       float64(after-before) / float64(len(keys)),
		WritesPerDecision: float64(writes) / float64(c.decisions()),
		Admitted:          admitted,
		Detail:            fmt.Sprintf("heap %d bytes for %d keys; writes: decisions that changed the key's state", after-before, len(keys)),
	}, nil
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// sqliteCost measures an SQLite store: the database's growth over an empty
// one after a checkpoint folds the WAL in, and, on a second file with a
// trigger on each of the store's tables, the rows inserted, updated or
// deleted per decision.
func (c costConfig) sqliteCost(ctx context.Context, p limiter.Policy, keys []limiter.Key, dir string, prog *progress) (costRow, error) {
	base := dir + "/" + string(p.Algorithm)
	empty, _, err := sqliteRun(ctx, base+"-empty.db", nil)
	if err != nil {
		return costRow{}, err
	}
	var admitted int64
	full, pages, err := sqliteRun(ctx, base+".db", func(s *sqlitestore.Store) error {
		admitted, err = c.workload(ctx, s, p, keys, prog, plainDecide)
		return err
	})
	if err != nil {
		return costRow{}, err
	}
	// Writes per decision is a ratio: a tenth of the keys measure it.
	few := keys[:writeKeys(len(keys))]
	writes, err := c.sqliteWrites(ctx, p, few, base+"-writes.db", prog)
	if err != nil {
		return costRow{}, err
	}
	return costRow{
		BytesPerKey:       float64(full-empty) / float64(len(keys)),
		WritesPerDecision: float64(writes) / float64(int64(len(few))*c.attempts()),
		Admitted:          admitted,
		Detail:            fmt.Sprintf("file %d bytes (%d pages) after a checkpoint, %d when empty; writes: rows inserted, updated or deleted", full, pages, empty),
	}, nil
}

// writeKeys is how many of n keys the SQLite writes pass uses.
func writeKeys(n int) int { return max(1, n/10) }

// sqliteRun opens a store on path, runs work (if any), closes it, folds the
// WAL into the file and returns the file's size and page count.
func sqliteRun(ctx context.Context, path string, work func(*sqlitestore.Store) error) (size, pages int64, err error) {
	s, err := sqlitestore.Open(path)
	if err != nil {
		return 0, 0, err
	}
	if work != nil {
		err = work(s)
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, 0, err
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return 0, 0, fmt.Errorf("lab: cost: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return 0, 0, fmt.Errorf("lab: cost: checkpoint: %w", err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		return 0, 0, fmt.Errorf("lab: cost: page count: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("lab: cost: %w", err)
	}
	return fi.Size(), pages, nil
}

// storeTables are the tables an SQLite store writes (the schema of
// docs/seeds.md, with rate_buckets for the token bucket).
var storeTables = []string{"rate_limit_windows", "rate_events", "rate_buckets", "api_calls"}

// sqliteWrites counts, with triggers added to the store's tables between
// two opens, the rows the workload inserts, updates or deletes.
func (c costConfig) sqliteWrites(ctx context.Context, p limiter.Policy, keys []limiter.Key, path string, prog *progress) (int64, error) {
	if _, _, err := sqliteRun(ctx, path, nil); err != nil { // the store creates its schema
		return 0, err
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return 0, fmt.Errorf("lab: cost: %w", err)
	}
	defer db.Close()
	stmts := []string{"CREATE TABLE lab_writes (n INTEGER NOT NULL)", "INSERT INTO lab_writes VALUES (0)"}
	for _, t := range storeTables {
		for _, op := range []string{"INSERT", "UPDATE", "DELETE"} {
			stmts = append(stmts, fmt.Sprintf("CREATE TRIGGER lab_%s_%s AFTER %s ON %s BEGIN UPDATE lab_writes SET n = n + 1; END",
				t, strings.ToLower(op), op, t))
		}
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return 0, fmt.Errorf("lab: cost: triggers: %w", err)
		}
	}
	if _, _, err := sqliteRun(ctx, path, func(s *sqlitestore.Store) error {
		_, err := c.workload(ctx, s, p, keys, prog, plainDecide)
		return err
	}); err != nil {
		return 0, err
	}
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT n FROM lab_writes").Scan(&n); err != nil {
		return 0, fmt.Errorf("lab: cost: count writes: %w", err)
	}
	return n, nil
}

// redisCost measures a Redis store on a private server: MEMORY USAGE of
// every key the workload left, and the keyspace changes Redis counted
// (rdb_changes_since_last_save: every write command, in scripts too).
func (c costConfig) redisCost(ctx context.Context, p limiter.Policy, keys []limiter.Key, srv *redisServer, prog *progress) (costRow, error) {
	prefix := "lab-" + strings.ReplaceAll(string(p.Algorithm), "_", "-")
	s, err := redisstore.Open(srv.url, redisstore.WithClientTime(), redisstore.WithPrefix(prefix),
		redisstore.WithTimeout(30*time.Second),
		redisstore.WithBreaker(redisstore.BreakerConfig{Ratio: 1, MinCalls: 1 << 20, Interval: time.Second, Probes: 1}))
	if err != nil {
		return costRow{}, err
	}
	defer s.Close()
	before, err := srv.changes(ctx)
	if err != nil {
		return costRow{}, err
	}
	admitted, err := c.workload(ctx, s, p, keys, prog, plainDecide)
	if err != nil {
		return costRow{}, err
	}
	after, err := srv.changes(ctx)
	if err != nil {
		return costRow{}, err
	}
	bytes, n, err := srv.memoryUsage(ctx, prefix+":*")
	if err != nil {
		return costRow{}, err
	}
	return costRow{
		BytesPerKey:       float64(bytes) / float64(len(keys)),
		WritesPerDecision: float64(after-before) / float64(c.decisions()),
		Admitted:          admitted,
		Detail:            fmt.Sprintf("MEMORY USAGE of %d Redis keys: %d bytes; writes: keyspace changes (rdb_changes_since_last_save)", n, bytes),
	}, nil
}

// writeMarkdown prints the cost table.
func (r costReport) writeMarkdown(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("## Cost: bytes per key and writes per decision\n\n")
	ew.printf("Workload: %d keys, each sent %d attempts one millisecond apart at the start of a window under a limit of %d per %s: the first %d pass, the rest are refused, so a sliding log holds %d events per key. Measured, not estimated: memory is the live heap after a collection less the empty store's; SQLite is the database file after a checkpoint less an empty database's; Redis is MEMORY USAGE of every key on a private redis-server.\n\n",
		r.Keys, r.Attempts, r.Limit, time.Duration(r.Window*float64(time.Second)), r.Limit, r.Limit)
	ew.printf("Writes per decision: memory, decisions that changed the key's state (a Peek before and after differs); SQLite, rows inserted, updated or deleted (triggers on the store's tables); Redis, keyspace changes (rdb_changes_since_last_save).\n\n")
	ew.printf("| algorithm | store | bytes per key | writes per decision | admitted |\n|---|---|---:|---:|---:|\n")
	for _, row := range r.Rows {
		ew.printf("| %s | %s | %.0f | %.3f | %d of %d |\n", row.Algorithm, row.Store, row.BytesPerKey, row.WritesPerDecision, row.Admitted, row.Decisions)
	}
	for _, s := range r.Skipped {
		ew.printf("\nSkipped: %s.\n", s)
	}
	return ew.err
}
