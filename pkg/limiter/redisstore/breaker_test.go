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

func newTestBreaker(threshold int, cooldown time.Duration) (*breaker, *limitertest.Clock) {
	clock := limitertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &breaker{clock: clock, threshold: threshold, cooldown: cooldown}, clock
}

// call acquires and, when let through, releases with o; it returns whether
// the call was let through and whether it was the probe.
func call(b *breaker, o outcome) (ok, probe bool) {
	probe, ok = b.acquire()
	if ok {
		b.release(probe, o)
	}
	return ok, probe
}

func TestBreakerLifecycle(t *testing.T) {
	b, clock := newTestBreaker(3, 10*time.Second)

	// Failures must be consecutive: a success starts the count again.
	for _, o := range []outcome{failed, failed, succeeded, failed, failed, abandoned} {
		ok, _ := call(b, o)
		require.True(t, ok)
	}
	assert.False(t, b.isOpen(), "two consecutive failures, threshold 3")
	ok, _ := call(b, failed)
	require.True(t, ok)
	assert.True(t, b.isOpen(), "third consecutive failure")

	// Open: refused until the cooldown has passed, without exception.
	for range 5 {
		ok, _ := call(b, succeeded)
		assert.False(t, ok)
	}
	clock.Advance(10*time.Second - time.Nanosecond)
	ok, _ = call(b, succeeded)
	assert.False(t, ok, "one nanosecond before the cooldown ends")

	// Half-open: one probe; a failed probe opens it for another cooldown.
	clock.Advance(time.Nanosecond)
	ok, probe := call(b, failed)
	assert.True(t, ok)
	assert.True(t, probe)
	assert.True(t, b.isOpen())
	ok, _ = call(b, succeeded)
	assert.False(t, ok, "a failed probe restarts the cooldown")

	// A probe abandoned by its caller leaves the next one free to probe.
	clock.Advance(10 * time.Second)
	ok, probe = call(b, abandoned)
	assert.True(t, ok)
	assert.True(t, probe)
	ok, probe = call(b, succeeded)
	assert.True(t, ok)
	assert.True(t, probe)
	assert.False(t, b.isOpen(), "a successful probe closes it")

	// Closed again, with a fresh failure count.
	for range 2 {
		ok, probe := call(b, failed)
		assert.True(t, ok)
		assert.False(t, probe)
	}
	assert.False(t, b.isOpen())
}

// TestBreakerLateOutcome: a call let through before the breaker opened and
// answering after it neither closes it (success) nor restarts its cooldown.
func TestBreakerLateOutcome(t *testing.T) {
	b, clock := newTestBreaker(1, time.Second)
	probeA, okA := b.acquire()
	require.True(t, okA)
	_, _ = call(b, failed)
	require.True(t, b.isOpen())
	b.release(probeA, succeeded)
	assert.True(t, b.isOpen(), "a late success does not close it")
	clock.Advance(time.Second)
	ok, probe := call(b, succeeded)
	assert.True(t, ok)
	assert.True(t, probe)
}

// TestBreakerConcurrent: 200 goroutines failing at once open the breaker,
// and once the cooldown is over exactly one of 200 concurrent callers gets
// the probe while the others are refused.
func TestBreakerConcurrent(t *testing.T) {
	const n = 200
	b, clock := newTestBreaker(n, time.Second)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { call(b, failed) })
	}
	wg.Wait()
	require.True(t, b.isOpen(), "%d concurrent failures, threshold %d", n, n)

	clock.Advance(time.Second)
	var through, probes atomic.Int64
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			probe, ok := b.acquire() // held: the probe is still under way
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
	assert.Equal(t, int64(1), through.Load())
	assert.Equal(t, int64(1), probes.Load())
}
