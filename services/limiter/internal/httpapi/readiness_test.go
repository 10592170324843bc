package httpapi_test

import (
	"context"
	"database/sql"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
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
		redisstore.WithBreaker(failures, cooldown), redisstore.WithBreakerClock(clock))
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
