package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// everyCall makes each kind of call on s and returns their errors.
func everyCall(s *Store, p limiter.Policy, k limiter.Key) map[string]error {
	ctx := context.Background()
	errs := map[string]error{}
	_, errs["allow"] = s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: base})
	_, errs["peek"] = s.Peek(ctx, p, k, base)
	_, errs["reset"] = s.Reset(ctx, p, k)
	_, errs["reset subject"] = s.ResetSubject(ctx, p, k.Subject)
	errs["ping"] = s.Ping(ctx)
	return errs
}

// poolStats returns the connection pool's counters of a single-server store.
func poolStats(s *Store) redis.PoolStats { return *s.router.(*singleRouter).c.PoolStats() }

// outageBreaker opens on half of at least 3 round trips in a minute, and
// probes with 2 calls after a minute.
var outageBreaker = BreakerConfig{Ratio: 0.5, MinCalls: 3, Interval: time.Minute, Cooldown: time.Minute, Probes: 2}

// TestOutageAndRecovery stops Redis under a store: calls fail with
// ErrUnavailable, the breaker opens after exactly its minimum of failed round
// trips (a dead Redis refuses at once: it opens as fast as calls come), and
// then calls fail without touching the connection pool (no dial, no
// connection taken) even once Redis is back, until the cooldown (an injected
// clock) has passed; the probes then succeed and the store works again
// without being reopened.
func TestOutageAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	clock := limitertest.NewClock(base)
	s := openStore(t, srv, srv.Prefix(), WithClientTime(), WithBreaker(outageBreaker), WithBreakerClock(clock))
	p := policy("outage", limiter.FixedWindow, 10, time.Minute)
	k := limiter.Key{Subject: "u"}
	allow(t, s, p, k, 1, base)
	require.NoError(t, s.Ping(t.Context()))
	require.False(t, s.Degraded())

	srv.Stop()
	// Two successes (allow, ping) and two failures: half of 4 round trips.
	for i := 1; i <= 2; i++ {
		_, err := s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1, Now: base})
		require.ErrorIs(t, err, limiter.ErrUnavailable, "failure %d", i)
		assert.Equal(t, i == 2, s.Degraded(), "degraded after %d failures", i)
	}
	assert.Positive(t, s.Stats().NodeErrors[srv.Addr()])

	failFast := func(when string) {
		t.Helper()
		before := poolStats(s)
		for name, err := range everyCall(s, p, k) {
			assert.ErrorIs(t, err, limiter.ErrUnavailable, "%s %s", when, name)
			assert.ErrorContains(t, err, "circuit breaker open", "%s %s", when, name)
		}
		assert.Equal(t, before, poolStats(s), "%s: the pool was used", when)
		assert.True(t, s.Degraded(), when)
	}
	failFast("while down")
	srv.Restart()
	failFast("back up, in the cooldown")
	clock.Advance(outageBreaker.Cooldown - time.Nanosecond)
	failFast("a nanosecond before the cooldown ends")

	clock.Advance(time.Nanosecond)
	d := allow(t, s, p, k, 1, base) // the first probe
	assert.Equal(t, int64(1), d.Count, "the restarted server is empty")
	assert.True(t, s.Degraded(), "one probe of two back")
	require.NoError(t, s.Ping(t.Context())) // the second probe
	assert.False(t, s.Degraded())
	assert.Equal(t, int64(2), allow(t, s, p, k, 1, base).Count)
	st := s.Stats()
	assert.Equal(t, BreakerClosed, st.Breaker)
	assert.Equal(t, uint64(1), st.BreakerOpens)
}

// TestFrozenRedisOpensTheBreaker freezes Redis (SIGSTOP): calls time out
// with the I/O timeout, counted from when they were written, and the
// breaker opens (a bounded number of calls); once Redis is thawed and the
// cooldown has passed, the probes close it.
func TestFrozenRedisOpensTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("freezes Redis: needs a private redis-server")
	}
	clock := limitertest.NewClock(base)
	s := openStore(t, srv, srv.Prefix(), WithTimeout(200*time.Millisecond), WithBreaker(outageBreaker), WithBreakerClock(clock))
	p := policy("frozen", limiter.SlidingWindow, 10, time.Minute)
	k := limiter.Key{Subject: "u"}
	warm(t, s, p, k)
	srv.Freeze()
	// A timeout while this process was starved of CPU (a loaded machine)
	// is not counted: bound the calls, not the time.
	for i := 0; i < 100 && !s.Degraded(); i++ {
		_, err := s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1})
		require.ErrorIs(t, err, limiter.ErrUnavailable)
		assert.True(t, isTimeout(err), "%v", err)
	}
	require.True(t, s.Degraded(), "the breaker opened on a frozen Redis")
	srv.Thaw()
	clock.Advance(outageBreaker.Cooldown)
	for range outageBreaker.Probes {
		allow(t, s, p, k, 1, base)
	}
	assert.False(t, s.Degraded())
}

// TestSlowRedisIsAFailure: a reply that takes longer than the I/O timeout
// (the server busy in DEBUG SLEEP) is a failure of Redis.
func TestSlowRedisIsAFailure(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("puts Redis to sleep: needs a private redis-server")
	}
	s := openStore(t, srv, srv.Prefix(), WithTimeout(500*time.Millisecond),
		WithBreaker(BreakerConfig{Ratio: 0.5, MinCalls: 1, Interval: time.Minute, Cooldown: time.Hour, Probes: 1}))
	p := policy("slow", limiter.TokenBucket, 10, time.Minute)
	k := limiter.Key{Subject: "u"}
	warm(t, s, p, k)
	rdb := srv.Client()
	for i := 0; i < 20 && !s.Degraded(); i++ {
		slept := make(chan error, 1)
		go func() { slept <- rdb.Do(context.Background(), "DEBUG", "SLEEP", "2").Err() }()
		require.Eventually(t, func() bool { return sleeping(srv) }, 10*time.Second, time.Millisecond)
		_, err := s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1})
		require.ErrorIs(t, err, limiter.ErrUnavailable)
		require.NoError(t, <-slept)
	}
	assert.True(t, s.Degraded(), "a reply later than the I/O timeout is a failure")
}

// blackhole accepts connections and never answers: a stalled Redis. It
// counts the connections it accepted.
type blackhole struct {
	l        net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func newBlackhole(t *testing.T) *blackhole {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &blackhole{l: l}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			_ = c.Close()
		}
	})
	return b
}

// TestStalledRedis: a server that accepts and never answers costs each call
// its deadline, not more (the test would hang otherwise), and the error says
// so; once the breaker opens, calls no longer even connect.
func TestStalledRedis(t *testing.T) {
	hole := newBlackhole(t)
	s, err := Open("redis://"+hole.l.Addr().String()+"/0", WithTimeout(200*time.Millisecond), WithBreaker(outageBreaker))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	p := policy("stalled", limiter.TokenBucket, 10, time.Minute)
	k := limiter.Key{Subject: "u"}
	// Timeouts while this process was starved (a loaded machine) are not
	// counted: bound the calls, not the time.
	for i := 0; i < 100 && !s.Degraded(); i++ {
		_, err := s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1})
		require.ErrorIs(t, err, limiter.ErrUnavailable, "attempt %d", i)
		assert.True(t, isTimeout(err), "attempt %d: %v", i, err)
	}
	require.True(t, s.Degraded())
	accepted := hole.accepted.Load()
	require.Positive(t, accepted)
	for name, err := range everyCall(s, p, k) {
		assert.ErrorIs(t, err, limiter.ErrUnavailable, name)
	}
	assert.Equal(t, accepted, hole.accepted.Load(), "connections made while the breaker is open")
}

// isTimeout reports whether err is a deadline or network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// TestCallerCancelDoesNotTrip: a caller giving up is no failure of Redis.
func TestCallerCancelDoesNotTrip(t *testing.T) {
	hole := newBlackhole(t)
	s, err := Open("redis://"+hole.l.Addr().String()+"/0", WithTimeout(time.Hour), WithProbeTimeout(time.Hour), WithBreaker(BreakerConfig{Ratio: 0.01, MinCalls: 1, Interval: time.Minute, Cooldown: time.Hour, Probes: 1}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		err := s.Ping(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "%v", err)
		assert.NotErrorIs(t, err, limiter.ErrUnavailable, "the caller's own deadline")
	}
	assert.False(t, s.Degraded())
}

// TestReadOnlyDropsConnections demotes the store's primary to a replica: the
// refused write (READONLY) is an ErrUnavailable and go-redis closes the
// connections that got it instead of pooling them; promoted again, the node
// serves the same store.
func TestReadOnlyDropsConnections(t *testing.T) {
	primary, other := redistest.Start(t), redistest.Start(t)
	if primary.Shared() {
		t.Skip("REPLICAOF would demote the server " + redistest.EnvURL + " names")
	}
	rdb := primary.Client()
	s := openStore(t, primary, primary.Prefix(), WithClientTime())
	p := policy("failover", limiter.SlidingLog, 10, time.Minute)
	k := limiter.Key{Subject: "u"}
	allow(t, s, p, k, 1, base)
	require.Positive(t, poolStats(s).IdleConns)

	host, port, err := net.SplitHostPort(other.Addr())
	require.NoError(t, err)
	require.NoError(t, rdb.ReplicaOf(t.Context(), host, port).Err())
	require.Eventually(t, func() bool { // a bounded wait for the sync, not for a rate window
		info, err := rdb.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 10*time.Second, 5*time.Millisecond)

	_, err = s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1, Now: base})
	require.ErrorIs(t, err, limiter.ErrUnavailable)
	assert.True(t, redis.IsReadOnlyError(err), "%v", err)
	stats := poolStats(s)
	assert.Equal(t, uint32(0), stats.TotalConns, "connections kept to the demoted node")

	require.NoError(t, rdb.ReplicaOf(t.Context(), "NO", "ONE").Err())
	d := allow(t, s, p, k, 1, base)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(1), d.Count, "the replica took the other server's (empty) data")
}

// warm makes a first call on s (a connection, the script loaded), trying
// again while a loaded machine makes it miss a short I/O timeout, and
// requires the breaker to be closed after.
func warm(t *testing.T, s *Store, p limiter.Policy, k limiter.Key) {
	t.Helper()
	var err error
	for range 20 {
		if _, err = s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1, Now: base}); err == nil {
			break
		}
	}
	require.NoError(t, err)
	require.False(t, s.Degraded())
}

// sleeping reports whether srv did not answer a PING within 50ms: busy (a
// DEBUG SLEEP under way) or, on a loaded machine, merely slow.
func sleeping(srv *redistest.Server) bool {
	c, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = c.Read(make([]byte, 16))
	return isTimeout(err)
}
