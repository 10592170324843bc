package memstore

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// entry is one key under one policy: where the shard keeps it, and its
// state.
type entry struct {
	key   mapKey
	hash  uint64 // of key, under the store's maphash seed
	next  *entry // the next entry whose key has the same hash
	index int    // in its shard's list
	// blockedUntil is when the key's holder could be admitted again, Unix ns,
	// after a decision that left nothing; 0 or past when not blocked.
	blockedUntil int64
	state
}

// state is what a key holds. Which fields are used depends on the algorithm:
// slots for the window algorithms, tat for the token bucket, events for the
// sliding log.
type state struct {
	alg    limiter.Algorithm
	window int64 // nanoseconds
	// slots holds the counts of the most recent fixed windows seen (a slot
	// with count 0 is free). Three are enough for the weighted window to
	// read its previous window after the clock stepped back by one window.
	slots  [3]slot
	tat    int64           // token bucket: theoretical arrival time, Unix ns; 0 for none
	held   int64           // token bucket: units in flight when tat was set
	events []limiter.Event // sliding log: oldest first
}

type slot struct {
	start int64 // Unix ns
	count int64
}

// holds reports whether e was written under p's algorithm and window, so
// that its state means what p would make it mean.
func (e *entry) holds(p limiter.Policy) bool {
	return e.alg == p.Algorithm && e.window == int64(p.Window)
}

// decide runs p's arithmetic on e's state at now and writes the result back
// (cost 0 is a peek and writes nothing). An algorithm without a case here is
// an error, never another algorithm's arithmetic.
func (e *entry) decide(p limiter.Policy, cost int64, now time.Time) (limiter.Decision, error) {
	switch p.Algorithm {
	case limiter.FixedWindow:
		start := limiter.WindowStart(now, p.Window).UnixNano()
		d := limiter.FixedWindowDecide(p, e.count(start), cost, now)
		if cost > 0 {
			e.set(start, d.Count)
		}
		return d, nil
	case limiter.SlidingWindow:
		start := limiter.WindowStart(now, p.Window).UnixNano()
		cur := e.count(start)
		d := limiter.SlidingWindowDecide(p, e.count(start-int64(p.Window)), cur, cost, now)
		if d.Allowed && cost > 0 {
			e.set(start, cur+cost)
		}
		return d, nil
	case limiter.TokenBucket:
		d, tat := limiter.TokenBucketDecide(p, e.tat, cost, now)
		if tat != e.tat {
			e.tat, e.held = tat, d.Count
		}
		return d, nil
	case limiter.SlidingLog, limiter.SlidingLogUnsafe: // the unsafe one only peeks here
		n := now.UnixNano()
		// Events older than two windows cannot count again, even after the
		// clock steps back by a window.
		e.trim(n - 2*int64(p.Window))
		d := limiter.SlidingLogDecide(p, e.events, cost, now)
		if d.Allowed && cost > 0 {
			e.record(n, cost)
		}
		return d, nil
	}
	return limiter.Decision{}, fmt.Errorf("memstore: %q: %w", p.Algorithm, limiter.ErrUnknownAlgorithm)
}

// count returns the count of the fixed window starting at start.
func (e *entry) count(start int64) int64 {
	for _, s := range e.slots {
		if s.start == start && s.count > 0 {
			return s.count
		}
	}
	return 0
}

// set stores the count of the window starting at start: in its slot, else in
// a free slot, else in place of the oldest window.
func (e *entry) set(start, count int64) {
	victim := 0
	for i, s := range e.slots {
		if s.count > 0 && s.start == start {
			e.slots[i].count = count
			return
		}
		if v := e.slots[victim]; v.count > 0 && (s.count == 0 || s.start < v.start) {
			victim = i
		}
	}
	e.slots[victim] = slot{start: start, count: count}
}

// record inserts an event at its place in time: last, unless the clock went
// back.
func (e *entry) record(at, cost int64) {
	i := len(e.events)
	for i > 0 && e.events[i-1].At > at {
		i--
	}
	e.events = slices.Insert(e.events, i, limiter.Event{At: at, Cost: cost})
}

// trim drops the events at or before cutoff and returns how many.
func (e *entry) trim(cutoff int64) int64 {
	i := 0
	for i < len(e.events) && e.events[i].At <= cutoff {
		i++
	}
	if i == len(e.events) {
		e.events = e.events[:0]
	} else {
		e.events = e.events[i:]
	}
	return int64(i)
}

// prune drops what cannot affect a decision at now or later and returns how
// many records it dropped. An algorithm without a case here is an error and
// leaves e as it is: another algorithm's rule could drop live state.
func (e *entry) prune(now int64) (int64, error) {
	switch e.alg {
	case limiter.FixedWindow, limiter.SlidingWindow:
		var n int64
		for i, s := range e.slots {
			if s.count > 0 && s.start+e.life() <= now {
				e.slots[i] = slot{}
				n++
			}
		}
		return n, nil
	case limiter.TokenBucket:
		if e.tat != 0 && e.tat <= now { // full again: the same as no bucket
			e.tat, e.held = 0, 0
			return 1, nil
		}
		return 0, nil
	case limiter.SlidingLog, limiter.SlidingLogUnsafe:
		return e.trim(now - e.window), nil
	}
	return 0, fmt.Errorf("memstore: prune: %q: %w", e.alg, limiter.ErrUnknownAlgorithm)
}

// life is how long after its start a fixed window's count matters: until its
// end, or for the weighted window one window more, as the previous window.
func (e *entry) life() int64 {
	if e.alg == limiter.SlidingWindow {
		return 2 * e.window
	}
	return e.window
}

// records returns how many records e holds: used window slots, events, or
// its bucket.
func (e *entry) records() int64 {
	var n int64
	for _, s := range e.slots {
		if s.count > 0 {
			n++
		}
	}
	if e.tat != 0 {
		n++
	}
	return n + int64(len(e.events))
}

// units returns the cost units e's state counted at its last update (see
// limiter.Store's Reset): its windows' counts, its events' costs, its
// bucket's units in flight.
func (e *entry) units() int64 {
	n := e.held
	for _, s := range e.slots {
		n += s.count
	}
	for _, ev := range e.events {
		n += ev.Cost
	}
	return n
}

// eventsPerRecord is how many sliding log events weigh as much as a key in
// the store's bound: an event takes 16 bytes, a key about 370 with its map
// and list slots, so 16 events are a generous key's worth.
const eventsPerRecord = 16

// weight is what e counts toward its shard's bound: one for the key, one
// more per eventsPerRecord events.
func (e *entry) weight() int { return 1 + len(e.events)/eventsPerRecord }

// expiry returns when e's state stops mattering: the end of its newest
// window's influence, its bucket's refill, its newest event's exit. Entries
// without state expire at the dawn of time.
func (e *entry) expiry() int64 {
	exp := int64(math.MinInt64)
	for _, s := range e.slots {
		if s.count > 0 {
			exp = max(exp, s.start+e.life())
		}
	}
	if e.tat != 0 {
		exp = max(exp, e.tat)
	}
	if n := len(e.events); n > 0 {
		exp = max(exp, e.events[n-1].At+e.window)
	}
	return exp
}
