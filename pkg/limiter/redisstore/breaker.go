package redisstore

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// outcome is what one round trip to Redis (a pipeline, or one call) tells
// the breaker about Redis.
type outcome int

const (
	succeeded outcome = iota // Redis answered
	failed                   // Redis refused, dropped, answered an error, or was silent past the I/O timeout
	abandoned                // says nothing about Redis: never sent, the caller gave up, this instance starved
)

// BreakerState is the state of the store's circuit breaker.
type BreakerState int

// The breaker's states.
const (
	// BreakerClosed: every call goes to Redis.
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls fail at once, without a network wait.
	BreakerOpen
	// BreakerHalfOpen: a few probe calls go to Redis, the others fail at once.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	default:
		return "half_open"
	}
}

// slots is how many slices the breaker's interval is cut into: outcomes
// leave the ratio one slice at a time.
const slots = 10

// bucket counts the outcomes of one slice of the interval.
type bucket struct {
	index     int64 // which slice of time (now / slice length); stale when old
	ok, fails int
}

// breaker is a failure-ratio circuit breaker. Closed, every call goes
// through, and each round trip's outcome is counted in a sliding interval;
// when the interval holds at least minCalls round trips and the failed ones
// are at least ratio of them, it opens: calls are refused without any
// network wait for cooldown. Then it is half-open: up to probes calls go
// through (with the store's generous probe timeout); when that many have
// succeeded it closes with an empty interval, and the first failed probe
// opens it for another cooldown. It is safe for concurrent use.
//
// It counts round trips, not calls: a pipeline of 64 scripts that timed out
// is one piece of news about Redis, not 64.
type breaker struct {
	clock    limiter.Clock
	ratio    float64
	minCalls int
	slice    time.Duration // interval / slots
	cooldown time.Duration
	probes   int
	onChange func(from, to BreakerState) // called with mu held; may be nil

	mu       sync.Mutex
	state    BreakerState
	window   [slots]bucket
	openedAt time.Time
	probing  int // probes under way
	passed   int // probes succeeded since it became half-open
	opens    uint64
}

// BreakerConfig tunes the circuit breaker (WithBreaker).
type BreakerConfig struct {
	// Ratio of failed round trips, in (0, 1], that opens the breaker.
	Ratio float64
	// MinCalls is how many round trips the interval must hold before the
	// ratio counts (>= 1).
	MinCalls int
	// Interval is how far back round trips count (>= 10ms).
	Interval time.Duration
	// Cooldown is how long the breaker stays open before probing (>= 0).
	Cooldown time.Duration
	// Probes is how many calls half-open lets through, and how many must
	// succeed to close it (>= 1).
	Probes int
}

// DefaultBreaker is the breaker's default tuning: open when half or more of
// at least 5 round trips in the last 2s failed; probe with 3 calls after 1s.
var DefaultBreaker = BreakerConfig{Ratio: 0.5, MinCalls: 5, Interval: 2 * time.Second, Cooldown: time.Second, Probes: 3}

func newBreaker(c BreakerConfig, clock limiter.Clock, onChange func(from, to BreakerState)) *breaker {
	return &breaker{clock: clock, ratio: c.Ratio, minCalls: c.MinCalls, slice: c.Interval / slots,
		cooldown: c.Cooldown, probes: c.Probes, onChange: onChange}
}

// acquire reports whether a call may go to Redis, and whether it is a
// half-open probe. A probe's caller must call probed with its outcome.
func (b *breaker) acquire() (probe, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return false, true
	case BreakerOpen:
		if b.clock.Now().Sub(b.openedAt) < b.cooldown {
			return false, false
		}
		b.set(BreakerHalfOpen)
		b.probing, b.passed = 0, 0
	}
	if b.probing+b.passed >= b.probes {
		return false, false
	}
	b.probing++
	return true, true
}

// probed records the outcome of a probe that acquire let through.
func (b *breaker) probed(o outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing--
	if b.state != BreakerHalfOpen {
		return
	}
	switch o {
	case succeeded:
		b.passed++
		if b.passed >= b.probes {
			b.window = [slots]bucket{}
			b.set(BreakerClosed)
		}
	case failed:
		b.open()
	}
}

// observe counts the outcome of one round trip of calls that were let
// through while closed. Outcomes that arrive while it is open or half-open
// are older news than what opened it, and are ignored.
func (b *breaker) observe(o outcome) {
	if o == abandoned {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != BreakerClosed {
		return
	}
	index := b.clock.Now().UnixNano() / int64(b.slice)
	s := &b.window[index%slots]
	if s.index != index {
		*s = bucket{index: index}
	}
	if o == succeeded {
		s.ok++
		return
	}
	s.fails++
	var total, fails int
	for _, s := range b.window {
		if s.index > index-slots {
			total, fails = total+s.ok+s.fails, fails+s.fails
		}
	}
	if total >= b.minCalls && float64(fails) >= b.ratio*float64(total) {
		b.open()
	}
}

// open opens the breaker now; mu is held.
func (b *breaker) open() {
	b.openedAt = b.clock.Now()
	b.opens++
	b.set(BreakerOpen)
}

// set changes the state and tells onChange; mu is held.
func (b *breaker) set(to BreakerState) {
	from := b.state
	b.state = to
	if b.onChange != nil && from != to {
		b.onChange(from, to)
	}
}

// status returns the state and how many times the breaker has opened.
func (b *breaker) status() (BreakerState, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.opens
}
