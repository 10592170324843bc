package memstore

import (
	"math/rand/v2"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Eviction sampling, as Redis's approximated LRU: a full shard draws
// evictionSamples entries; when all of them are exhausted it draws up to
// extraSamples more before it gives in and evicts an exhausted one.
const (
	evictionSamples = 5
	extraSamples    = 20
)

// mark records, after a decision at now, until when e's holder is refused:
// a key with nothing left stays blocked until its budget is back (the later
// of RetryAfter and ResetAfter), which is what eviction must not hand out.
func (e *entry) mark(d limiter.Decision, now time.Time) {
	if d.Remaining > 0 {
		e.blockedUntil = 0
		return
	}
	e.blockedUntil = now.UnixNano() + int64(max(d.RetryAfter, d.ResetAfter))
}

// evict makes room in the full shard sh at now (Unix ns) and reports
// whether it did. It prefers, among sampled entries other than keep (nil:
// any), those not blocked, and among them the one whose state expires
// first; with refuseWhenFull only an entry whose state has expired may go.
// sh must be locked and hold an entry other than keep.
func (s *Store) evict(sh *shard, keep *entry, now int64) bool {
	victim, blocked := sh.pick(keep, now)
	e := sh.list[victim]
	if s.refuseWhenFull && (blocked || e.expiry() > now) {
		s.refusedNew.Add(1)
		return false
	}
	sh.remove(victim)
	s.evictions.Add(1)
	if blocked {
		s.refusedEvictions.Add(1)
	}
	if s.hook != nil {
		s.hook(Eviction{Policy: e.key.policy, Refused: blocked})
	}
	return true
}

// pick returns the index of the entry to evict at now and whether it is
// blocked: the earliest expiry among the sampled unblocked entries, or, when
// every sample is blocked, the one unblocked first. keep (nil: none) is
// never drawn. sh must be locked and hold an entry other than keep.
func (sh *shard) pick(keep *entry, now int64) (victim int, blocked bool) {
	others := len(sh.list)
	if keep != nil {
		others--
	}
	free, freeExp := -1, int64(0)
	held, heldUntil := -1, int64(0)
	// A shard no larger than the samples is read whole, so its choice is
	// exact rather than left to the draws.
	whole := others <= evictionSamples+extraSamples
	for n := range evictionSamples + extraSamples {
		if whole && n >= others || !whole && n >= evictionSamples && free >= 0 {
			break
		}
		i := n
		if !whole {
			i = rand.IntN(others)
		}
		if keep != nil && i >= keep.index {
			i++ // over the indexes other than keep's
		}
		e := sh.list[i]
		if e.blockedUntil > now {
			if held < 0 || e.blockedUntil < heldUntil {
				held, heldUntil = i, e.blockedUntil
			}
			continue
		}
		if exp := e.expiry(); free < 0 || exp < freeExp {
			free, freeExp = i, exp
		}
	}
	if free >= 0 {
		return free, false
	}
	return held, true
}

// full is the denial of a new key that a full store refuses: nothing counted,
// try again in a window.
func (s *Store) full(p limiter.Policy, now time.Time) limiter.Decision {
	return limiter.Decision{Limit: p.Limit, WindowStart: limiter.WindowStart(now, p.Window), ResetAfter: p.Window, RetryAfter: p.Window}
}
