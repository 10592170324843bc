package httpapi_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

func (s *server) ready() int {
	s.t.Helper()
	return s.do(req{method: http.MethodGet, target: "/readyz"}).Code
}

// TestReadyzFollowsTheSQLiteWriteLock holds SQLite's write lock from another
// connection (BEGIN EXCLUSIVE) beyond the store's busy timeout: the store
// cannot write, /readyz answers 503 while /healthz stays 200; once the lock
// is released /readyz is 200 again and decisions go on.
func TestReadyzFollowsTheSQLiteWriteLock(t *testing.T) {
	path := sqliteDB(t)
	store, err := sqlitestore.Open(path, sqlitestore.WithBusyTimeout(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { closeStore(t, store) })
	s := newServer(t, store)
	require.Equal(t, http.StatusOK, s.ready())

	other, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, other.Close()) })
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, conn.Close()) })
	_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
	require.NoError(t, err)

	assertProblem(t, s.do(req{method: http.MethodGet, target: "/readyz"}), http.StatusServiceUnavailable, "unavailable")
	assertProblem(t, s.ping("locked-out"), http.StatusServiceUnavailable, "unavailable")
	assert.Equal(t, http.StatusOK, s.do(req{method: http.MethodGet, target: "/healthz"}).Code, "alive, not ready")

	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, s.ready(), "ready again once the lock is released")
	assert.Equal(t, 1.0, countOf(t, s.ping("locked-out")), "the refused attempt was not counted")
}

// TestReadyzFollowsRedis stops the Redis server: /readyz answers 503, and
// keeps answering 503 while the circuit breaker is open even once Redis is
// back; after the cooldown (a fake clock) the probe succeeds and it is 200.
func TestReadyzFollowsRedis(t *testing.T) {
	srv := redistest.Start(t)
	clock := limitertest.NewClock(t0)
	const failures, cooldown = 2, 5 * time.Second
	store, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(srv.Prefix()),
		redisstore.WithBreaker(redisstore.BreakerConfig{Ratio: 0.5, MinCalls: failures, Interval: time.Minute, Cooldown: cooldown, Probes: 1}), redisstore.WithBreakerClock(clock))
	require.NoError(t, err)
	t.Cleanup(func() { closeStore(t, store) })
	s := newServer(t, store)
	require.Equal(t, http.StatusOK, s.ready())

	srv.Stop()
	for i := range failures + 1 {
		assert.Equal(t, http.StatusServiceUnavailable, s.ready(), "check %d while Redis is down", i)
	}
	srv.Restart()
	assert.Equal(t, http.StatusServiceUnavailable, s.ready(), "the breaker is still open")
	clock.Advance(cooldown)
	assert.Equal(t, http.StatusOK, s.ready(), "the probe succeeded")
}

// TestReadyzFollowsFailingDecisions: a store can commit its ping and still
// fail every decision (here a trigger refuses every new window row): once
// decisions fail more often than not, /readyz answers 503 and says why;
// when they work again and the failures are out of the window, 200.
func TestReadyzFollowsFailingDecisions(t *testing.T) {
	s, db, body := failingDecisions(t)
	assert.Equal(t, "not ready: decide: 6 of the last 6 store calls failed in 10s", body["detail"])

	_, err := db.Exec(`DROP TRIGGER refuse`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, s.ready(), "the failures are recent")
	s.clock.Advance(11 * time.Second)
	assert.Equal(t, http.StatusOK, s.ready(), "out of the window")
	assert.Equal(t, http.StatusOK, s.ping("after").Code)
}

// TestPublicReadyzHidesTheStoreError: with an internal listener, the
// public one's /readyz says not ready without the store's error (which
// names Redis nodes' addresses), while the internal one still says why.
func TestPublicReadyzHidesTheStoreError(t *testing.T) {
	_, _, body := failingDecisions(t, func(o *options) { o.Listener = httpapi.PublicRoutes })
	assert.Equal(t, "not ready: the store cannot decide; the internal listener's /readyz and the log say why", body["detail"])
	assert.NotContains(t, fmt.Sprint(body), "store calls failed", "the store's error stays off the public listener")
}

// failingDecisions starts a server on SQLite, ready, then makes every
// decision fail (a trigger refuses every new window row) until six /ping
// have failed; it returns the server, the database (to drop the trigger
// "refuse") and /readyz's problem body.
func failingDecisions(t *testing.T, opts ...func(*options)) (*server, *sql.DB, map[string]any) {
	t.Helper()
	path := sqliteDB(t)
	store, err := sqlitestore.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { closeStore(t, store) })
	s := newServer(t, store, opts...)
	require.Equal(t, http.StatusOK, s.ready())

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, db.Close()) })
	_, err = db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON rate_limit_windows BEGIN SELECT RAISE(ABORT, 'refused'); END`)
	require.NoError(t, err)
	for i := range 6 {
		assertProblem(t, s.ping(fmt.Sprint("k", i)), http.StatusServiceUnavailable, "unavailable")
	}
	return s, db, assertProblem(t, s.do(req{method: http.MethodGet, target: "/readyz"}), http.StatusServiceUnavailable, "unavailable")
}

// TestStoreErrorLogsAreSampled: a store failing every request logs the
// first few errors of each interval, not one line per request.
func TestStoreErrorLogsAreSampled(t *testing.T) {
	store := openMemory(t)
	s := newServer(t, store)
	require.NoError(t, store.Close())
	start := time.Now()
	const requests = 60
	for i := range requests {
		assertProblem(t, s.ping(fmt.Sprint("k", i)), http.StatusServiceUnavailable, "unavailable")
	}
	intervals := int(time.Since(start)/(10*time.Second)) + 1 // a hang guard for a slow machine, not a timing assertion
	lines := strings.Count(s.logs.String(), `msg="store error"`)
	assert.GreaterOrEqual(t, lines, 10)
	assert.LessOrEqual(t, lines, 10*intervals, "%d requests", requests)
}
