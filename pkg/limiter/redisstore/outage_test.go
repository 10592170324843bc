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

// TestOutageAndRecovery stops Redis under a store: calls fail with
// ErrUnavailable, the breaker opens after exactly its threshold of failures,
// and then calls fail without touching the connection pool (no dial, no
// connection taken) even once Redis is back, until the cooldown (an injected
// clock) has passed; the probe then succeeds and the store works again
// without being reopened.
func TestOutageAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	clock := limitertest.NewClock(base)
	const failures, cooldown = 3, time.Minute
	s := openStore(t, srv, srv.Prefix(), WithClientTime(), WithBreaker(failures, cooldown), WithBreakerClock(clock))
	p := policy("outage", limiter.FixedWindow, 10, time.Minute)
	k := limiter.Key{Subject: "u"}
	allow(t, s, p, k, 1, base)
	require.NoError(t, s.Ping(t.Context()))
	require.False(t, s.Degraded())

	srv.Stop()
	for i := 1; i <= failures; i++ {
		_, err := s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1, Now: base})
		require.ErrorIs(t, err, limiter.ErrUnavailable, "failure %d", i)
		assert.Equal(t, i == failures, s.Degraded(), "degraded after %d failures", i)
	}

	failFast := func(when string) {
		t.Helper()
		before := *s.client.PoolStats()
		for name, err := range everyCall(s, p, k) {
			assert.ErrorIs(t, err, limiter.ErrUnavailable, "%s %s", when, name)
			assert.ErrorContains(t, err, "circuit breaker open", "%s %s", when, name)
		}
		assert.Equal(t, before, *s.client.PoolStats(), "%s: the pool was used", when)
		assert.True(t, s.Degraded(), when)
	}
	failFast("while down")
	srv.Restart()
	failFast("back up, in the cooldown")
	clock.Advance(cooldown - time.Nanosecond)
	failFast("a nanosecond before the cooldown ends")

	clock.Advance(time.Nanosecond)
	d := allow(t, s, p, k, 1, base) // the probe
	assert.False(t, s.Degraded())
	assert.Equal(t, int64(1), d.Count, "the restarted server is empty")
	assert.Equal(t, int64(2), allow(t, s, p, k, 1, base).Count)
	require.NoError(t, s.Ping(t.Context()))
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
	s, err := Open("redis://"+hole.l.Addr().String()+"/0", WithTimeout(20*time.Millisecond), WithBreaker(2, time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	p := policy("stalled", limiter.TokenBucket, 10, time.Minute)
	k := limiter.Key{Subject: "u"}
	for i := range 2 {
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
	s, err := Open("redis://"+hole.l.Addr().String()+"/0", WithTimeout(time.Hour), WithBreaker(1, time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		err := s.Ping(ctx)
		cancel()
		require.ErrorIs(t, err, limiter.ErrUnavailable)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
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
	require.Positive(t, s.client.PoolStats().IdleConns)

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
	stats := s.client.PoolStats()
	assert.Equal(t, uint32(0), stats.TotalConns, "connections kept to the demoted node")

	require.NoError(t, rdb.ReplicaOf(t.Context(), "NO", "ONE").Err())
	d := allow(t, s, p, k, 1, base)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(1), d.Count, "the replica took the other server's (empty) data")
}
