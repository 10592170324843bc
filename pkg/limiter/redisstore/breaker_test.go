package redisstore

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
)

// testBreaker: open at half of at least 4 round trips in 1s; 2 probes after
// 10s. It records its transitions.
func newTestBreaker() (*breaker, *limitertest.Clock, *[]BreakerState) {
	clock := limitertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var changes []BreakerState
	b := newBreaker(BreakerConfig{Ratio: 0.5, MinCalls: 4, Interval: time.Second, Cooldown: 10 * time.Second, Probes: 2},
		clock, func(_, to BreakerState) { changes = append(changes, to) })
	return b, clock, &changes
}

func state(b *breaker) BreakerState {
	s, _ := b.status()
	return s
}

// The ratio needs its minimum of round trips; below the ratio it stays
// closed however many failures it saw; abandoned outcomes count for nothing.
func TestBreakerRatio(t *testing.T) {
	b, clock, _ := newTestBreaker()
	for range 3 {
		b.observe(failed)
	}
	assert.Equal(t, BreakerClosed, state(b), "3 failures of 3: below the minimum of 4")
	for range 100 {
		b.observe(abandoned)
	}
	assert.Equal(t, BreakerClosed, state(b), "abandoned round trips say nothing about Redis")

	b2, _, _ := newTestBreaker()
	for range 50 {
		b2.observe(succeeded)
		b2.observe(succeeded)
		b2.observe(failed) // a third fail: below the ratio of a half
	}
	assert.Equal(t, BreakerClosed, state(b2), "a third of round trips failing")

	// Old news leaves the interval: 3 failures, a second later 1 more, is
	// not 4 in the interval.
	clock.Advance(time.Second)
	b.observe(failed)
	assert.Equal(t, BreakerClosed, state(b), "the first three left the interval")
	b.observe(failed)
	b.observe(succeeded)
	b.observe(failed)
	assert.Equal(t, BreakerOpen, state(b), "3 failures of 4 in the interval")
}

// Open: refused until the cooldown; then half-open lets exactly Probes calls
// through; they must all succeed to close it, and one failure reopens it.
func TestBreakerLifecycle(t *testing.T) {
	b, clock, changes := newTestBreaker()
	for range 4 {
		b.observe(failed)
	}
	require.Equal(t, BreakerOpen, state(b))
	_, ok := b.acquire()
	assert.False(t, ok, "open")
	clock.Advance(10*time.Second - time.Nanosecond)
	_, ok = b.acquire()
	assert.False(t, ok, "a nanosecond before the cooldown ends")

	clock.Advance(time.Nanosecond)
	p1, ok1 := b.acquire()
	p2, ok2 := b.acquire()
	_, ok3 := b.acquire()
	assert.True(t, ok1 && ok2 && p1 && p2, "two probes")
	assert.False(t, ok3, "a third call while the two probes are under way")
	assert.Equal(t, BreakerHalfOpen, state(b))
	b.observe(failed) // a round trip's news while half-open is ignored
	b.probed(succeeded)
	assert.Equal(t, BreakerHalfOpen, state(b), "one probe of two back")
	b.probed(failed)
	assert.Equal(t, BreakerOpen, state(b), "a failed probe opens it again")

	clock.Advance(10 * time.Second)
	p, ok := b.acquire()
	require.True(t, ok && p)
	b.probed(abandoned) // its caller gave up: the slot is free again
	for range 2 {
		p, ok := b.acquire()
		require.True(t, ok && p)
	}
	b.probed(succeeded)
	b.probed(succeeded)
	assert.Equal(t, BreakerClosed, state(b))
	probe, ok := b.acquire()
	assert.True(t, ok)
	assert.False(t, probe)
	for range 3 {
		b.observe(failed)
	}
	assert.Equal(t, BreakerClosed, state(b), "closing empties the interval")
	_, opens := b.status()
	assert.Equal(t, uint64(2), opens)
	assert.Equal(t, []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed}, *changes)
}

// TestBreakerConcurrent: 200 goroutines failing at once open the breaker,
// and once the cooldown is over exactly Probes of 200 concurrent callers are
// let through.
func TestBreakerConcurrent(t *testing.T) {
	const n = 200
	b, clock, _ := newTestBreaker()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { b.observe(failed) })
	}
	wg.Wait()
	require.Equal(t, BreakerOpen, state(b))
	_, opens := b.status()
	assert.Equal(t, uint64(1), opens, "opened once")

	clock.Advance(10 * time.Second)
	var through, probes atomic.Int64
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			probe, ok := b.acquire() // held: the probes are still under way
			if ok {
				through.Add(1)
			}
			if probe {
				probes.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int64(2), through.Load())
	assert.Equal(t, int64(2), probes.Load())
}
