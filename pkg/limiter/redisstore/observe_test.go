package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// heard is a limiter.StoreObserver that keeps what it hears.
type heard struct {
	mu    sync.Mutex
	calls []limiter.StoreCall
}

func (h *heard) ObserveStore(c limiter.StoreCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
}

// take returns what h heard since the last take.
func (h *heard) take() []limiter.StoreCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.calls
	h.calls = nil
	return out
}

// Each decision made with an observer on its context tells it the script
// (the algorithm's), the node that answered, its round trip's size and the
// breaker's state; sliding_log_unsafe's two scripts are told apart. A call
// without an observer tells nobody.
func TestObserverHearsEachDecision(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, srv.Prefix(), WithClientTime())
	var h heard
	ctx := limiter.WithStoreObserver(context.Background(), &h)
	k := limiter.Key{Subject: "observed"}
	for _, alg := range limiter.Algorithms {
		p := policy("obs-"+string(alg), alg, 5, time.Minute)
		_, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: base})
		require.NoError(t, err)
		_, err = s.Peek(ctx, p, k, base)
		require.NoError(t, err)
		script := string(alg)
		scripts := 2 // the allow and the peek
		if alg == limiter.SlidingLogUnsafe {
			script, scripts = string(limiter.SlidingLog), 3 // count, record, peek
		}
		want := limiter.StoreCall{Batch: 1, Node: srv.Addr(), Script: script, Breaker: "closed"}
		calls := h.take()
		require.Len(t, calls, scripts, "%s", alg)
		for _, c := range calls {
			assert.Equal(t, want, c, "%s", alg)
		}
	}
	allow(t, s, policy("unobserved", limiter.FixedWindow, 5, time.Minute), k, 1, base)
	assert.Empty(t, h.take())
}

// While the breaker is open a call is refused without a round trip, and
// says so: breaker open, no node, no batch.
func TestObserverHearsTheOpenBreaker(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("stops Redis: needs a private redis-server")
	}
	s := openStore(t, srv, srv.Prefix(), WithBreaker(outageBreaker), WithBreakerClock(limitertest.NewClock(base)))
	p := policy("obs-open", limiter.FixedWindow, 5, time.Minute)
	k := limiter.Key{Subject: "u"}
	srv.Stop()
	var h heard
	ctx := limiter.WithStoreObserver(context.Background(), &h)
	for i := 0; i < 100 && !s.Degraded(); i++ {
		_, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1})
		require.ErrorIs(t, err, limiter.ErrUnavailable)
	}
	require.True(t, s.Degraded())
	failed := h.take()
	require.NotEmpty(t, failed)
	assert.Equal(t, limiter.StoreCall{Batch: 1, Node: srv.Addr(), Script: "fixed_window", Breaker: "closed"}, failed[0], "the first failed call went to Redis")
	_, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1})
	require.ErrorIs(t, err, limiter.ErrUnavailable)
	assert.Equal(t, []limiter.StoreCall{{Script: "fixed_window", Breaker: "open"}}, h.take())
}
