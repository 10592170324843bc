package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// directEngine decides with the library's pure algorithm functions
// (limiter.FixedWindowDecide and its siblings) on state kept in one compact
// array of structs: what a store does inside its atomic step, without the
// hashing, locking and key strings. It is the path for traces of hundreds
// of millions of requests; TestEnginesAgree shows it decides exactly as the
// memory store does.
type directEngine struct {
	ps   [nAlgs]limiter.Policy
	keys []directKey
}

// directKey is one key's state under each algorithm.
type directKey struct {
	fixedStart, fixedCount                int64
	slidingStart, slidingPrev, slidingCur int64
	tat                                   int64
	log                                   window
}

func (d *directEngine) decide(a int, k int, _ uint32, at, cost int64) (bool, int64, error) {
	for len(d.keys) <= k {
		d.keys = append(d.keys, directKey{fixedStart: -1, slidingStart: -1})
	}
	s := &d.keys[k]
	p := d.ps[a]
	now := time.Unix(0, at)
	switch p.Algorithm {
	case limiter.FixedWindow:
		start := limiter.WindowStart(now, p.Window).UnixNano()
		if s.fixedStart != start {
			s.fixedStart, s.fixedCount = start, 0
		}
		dec := limiter.FixedWindowDecide(p, s.fixedCount, cost, now)
		s.fixedCount = dec.Count
		return dec.Allowed, dec.Count, nil
	case limiter.SlidingWindow:
		start := limiter.WindowStart(now, p.Window).UnixNano()
		switch s.slidingStart {
		case start:
		case start - int64(p.Window):
			s.slidingPrev, s.slidingCur = s.slidingCur, 0
		default:
			s.slidingPrev, s.slidingCur = 0, 0
		}
		s.slidingStart = start
		dec := limiter.SlidingWindowDecide(p, s.slidingPrev, s.slidingCur, cost, now)
		if dec.Allowed {
			s.slidingCur += cost
		}
		return dec.Allowed, dec.Count, nil
	case limiter.TokenBucket:
		dec, tat := limiter.TokenBucketDecide(p, s.tat, cost, now)
		s.tat = tat
		return dec.Allowed, dec.Count, nil
	case limiter.SlidingLog:
		s.log.expire(at - int64(p.Window))
		// Allowed and Count depend only on the units the live events hold,
		// so the library decides on one event carrying their sum, newest
		// first: O(1) rather than a pass over up to limit events (the
		// RetryAfter that would need each event is not used here).
		// TestEnginesAgree holds it to the memory store's decisions.
		var sum [1]limiter.Event
		live := s.log.live()
		if len(live) > 0 {
			sum[0] = limiter.Event{At: live[len(live)-1].At, Cost: s.log.sum}
		}
		dec := limiter.SlidingLogDecide(p, sum[:min(1, len(live))], cost, now)
		if dec.Allowed {
			s.log.push(at, cost)
		}
		return dec.Allowed, dec.Count, nil
	}
	return false, 0, fmt.Errorf("lab: %q: %w", p.Algorithm, limiter.ErrUnknownAlgorithm)
}

// memoryEngine decides through the memory store's limiter.Store interface,
// with the trace's time as each request's Now: the library exactly as a
// service uses it, hashing, locks and all.
type memoryEngine struct {
	ps    [nAlgs]limiter.Policy
	store *memstore.Store
	names []string // subject of each local key
}

// memoryMaxKeys bounds the lab's memory stores far above any trace the lab
// can hold, so that no shard ever evicts a key (an evicted key would start
// again from a full budget and skew the figures); the store allocates by
// the keys it holds, not by its bound.
const memoryMaxKeys = 1 << 30

func newMemoryEngine(ps [nAlgs]limiter.Policy) *memoryEngine {
	return &memoryEngine{ps: ps, store: memstore.New(memstore.WithMaxKeys(memoryMaxKeys))}
}

func (m *memoryEngine) decide(a int, k int, key uint32, at, cost int64) (bool, int64, error) {
	for len(m.names) <= k {
		m.names = append(m.names, "")
	}
	if m.names[k] == "" {
		m.names[k] = strconv.FormatUint(uint64(key), 10)
	}
	r := limiter.Request{Key: limiter.Key{Subject: m.names[k]}, Cost: cost, Now: time.Unix(0, at).UTC()}
	d, err := m.store.Allow(context.Background(), m.ps[a], r)
	return d.Allowed, d.Count, err
}

// close reports an eviction, which would make the replay wrong.
func (m *memoryEngine) close() error {
	defer m.store.Close()
	if n := m.store.Evictions(); n > 0 {
		return fmt.Errorf("lab: the memory store evicted %d keys: the figures would be wrong", n)
	}
	return nil
}
