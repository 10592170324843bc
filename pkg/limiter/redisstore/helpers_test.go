package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// base is a fixed client time: 2026-01-01T00:00:00Z, seed 000's window
// start (docs/seeds.md).
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testTimeout is the store deadline of tests that are not about deadlines:
// long enough that a loaded two-core machine under -race never hits it.
const testTimeout = 5 * time.Second

// openStore opens a store on srv with key prefix prefix (stores that must
// share state share it), closed at cleanup.
func openStore(t testing.TB, srv *redistest.Server, prefix string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(srv.URL(), append([]Option{WithPrefix(prefix), WithTimeout(testTimeout)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func policy(name string, alg limiter.Algorithm, limit int64, window time.Duration) limiter.Policy {
	return limiter.Policy{Name: name, Algorithm: alg, Limit: limit, Window: window}
}

func allow(t testing.TB, s *Store, p limiter.Policy, k limiter.Key, cost int64, now time.Time) limiter.Decision {
	t.Helper()
	d, err := s.Allow(context.Background(), p, limiter.Request{Key: k, Cost: cost, Now: now})
	require.NoError(t, err, "allow %s %+v at %s", p.Name, k, now)
	return d
}

// burst makes n attempts of cost 1 on k at now, released together, the i-th
// through stores[i%len(stores)], and returns how many were allowed.
func burst(t *testing.T, stores []*Store, p limiter.Policy, k limiter.Key, n int, now time.Time) int64 {
	t.Helper()
	var (
		allowed atomic.Int64
		wg      sync.WaitGroup
	)
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			d, err := s.Allow(context.Background(), p, limiter.Request{Key: k, Cost: 1, Now: now})
			switch {
			case err != nil:
				errs <- err
			case d.Allowed:
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	if failures := len(errs); failures > 0 {
		require.NoError(t, <-errs, "%d attempts failed; the first error", failures)
	}
	return allowed.Load()
}

// keysOf returns the keys under prefix.
func keysOf(t testing.TB, rdb *redis.Client, prefix string) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), prefix+":*").Result()
	require.NoError(t, err)
	return keys
}

// serverTime reads the Redis server's clock.
func serverTime(t testing.TB, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return now.UTC()
}
