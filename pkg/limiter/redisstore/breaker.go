package redisstore

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// outcome is what a call through the breaker tells it.
type outcome int

const (
	succeeded outcome = iota // Redis answered
	failed                   // Redis did not answer, or answered an error
	abandoned                // the caller gave up first: says nothing about Redis
)

// breaker is a consecutive-failure circuit breaker. Closed, every call goes
// through; after threshold consecutive failures it opens and refuses calls
// without any network wait for cooldown; then it lets exactly one probe
// through (half-open): a success closes it, a failure opens it for another
// cooldown. It is safe for concurrent use.
type breaker struct {
	clock     limiter.Clock
	threshold int
	cooldown  time.Duration

	mu       sync.Mutex
	failures int       // consecutive failures while closed
	open     bool      // open or half-open
	openedAt time.Time // when it last opened
	probing  bool      // the half-open probe is under way
}

// acquire reports whether a call may go to Redis, and whether it is the
// half-open probe. A caller that got ok must call release with the outcome.
func (b *breaker) acquire() (probe, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return false, true
	}
	if b.probing || b.clock.Now().Sub(b.openedAt) < b.cooldown {
		return false, false
	}
	b.probing = true
	return true, true
}

// release records the outcome of a call that acquire let through.
func (b *breaker) release(probe bool, o outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	switch {
	case o == abandoned:
	case probe && o == succeeded:
		b.open, b.failures = false, 0
	case probe: // the probe failed: another cooldown
		b.openedAt = b.clock.Now()
	case b.open:
		// A call that started before the breaker opened: its outcome is
		// older news than the failures that opened it.
	case o == succeeded:
		b.failures = 0
	default:
		b.failures++
		if b.failures >= b.threshold {
			b.open, b.openedAt, b.failures = true, b.clock.Now(), 0
		}
	}
}

// isOpen reports whether the breaker is open or half-open.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}
