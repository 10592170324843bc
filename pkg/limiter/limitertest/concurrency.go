package limitertest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// goroutines is how many concurrent attempts hit one key.
const goroutines = 500

// testConcurrency fires 500 attempts at once on one key, all at the same
// instant: an atomic store admits exactly limit of them.
func testConcurrency(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		p := policy("race", alg, 10, time.Minute)
		k := limiter.Key{Subject: "hot", Scope: "/rate/check"}
		allowed := race(t, s, p, k)
		if alg == limiter.SlidingLogUnsafe {
			// Check-then-act: it may admit more, never fewer.
			assert.GreaterOrEqual(t, allowed, p.Limit)
			t.Logf("%s admitted %d of %d with limit %d", alg, allowed, goroutines, p.Limit)
			return
		}
		assert.Equal(t, p.Limit, allowed)
	})
	t.Run("fixed_window_counts_every_attempt", func(t *testing.T) {
		s := open(t, newStore, limiter.FixedWindow)
		p := policy("race", limiter.FixedWindow, 50, time.Minute)
		k := limiter.Key{Subject: "hot"}
		assert.Equal(t, p.Limit, race(t, s, p, k))
		d := peek(t, s, p, k, base)
		assert.Equal(t, int64(goroutines), d.Count)
		assert.Equal(t, int64(0), d.Remaining)
		assert.False(t, d.Allowed)
	})
}

// race makes goroutines attempts of cost 1 on k at base, released together,
// and returns how many were allowed; any error fails t.
func race(t *testing.T, s limiter.Store, p limiter.Policy, k limiter.Key) int64 {
	t.Helper()
	var (
		allowed     atomic.Int64
		ready, done sync.WaitGroup
	)
	start := make(chan struct{})
	errs := make(chan error, goroutines)
	ready.Add(goroutines)
	for range goroutines {
		done.Go(func() {
			ready.Done()
			<-start
			d, err := s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: 1, Now: base})
			switch {
			case err != nil:
				errs <- err
			case d.Allowed:
				allowed.Add(1)
			}
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	close(errs)
	if len(errs) > 0 {
		require.NoError(t, <-errs, "%d attempts failed; the first error", len(errs)+1)
	}
	return allowed.Load()
}
