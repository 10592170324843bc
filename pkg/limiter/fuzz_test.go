package limiter_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// FuzzDecide checks the invariants of every *Decide function over arbitrary
// policies, states, costs and times (mapped into what a store can hold):
// nothing panics, the numbers stay in range, a peek agrees with an attempt,
// and RetryAfter is exact: the same attempt passes at now+RetryAfter and not
// a nanosecond earlier, as seen from now's state.
func FuzzDecide(f *testing.F) {
	n := t0.UnixNano()
	f.Add(uint8(0), int64(3), uint32(60), int64(3), int64(0), int64(1), n+45e9, []byte{})
	f.Add(uint8(1), int64(3), uint32(60), int64(0), int64(0), int64(1), n, []byte{1, 0, 60, 0, 60, 0, 60, 1})
	f.Add(uint8(2), int64(4), uint32(60), int64(4), int64(2), int64(1), n+30e9, []byte{})
	f.Add(uint8(2), int64(limiter.MaxLimit), uint32(366*86400), int64(limiter.MaxLimit), int64(1<<30), int64(1), n, []byte{})
	f.Add(uint8(3), int64(3), uint32(1), int64(1e9), int64(0), int64(2), n, []byte{})
	f.Add(uint8(3), int64(1e9), uint32(1), int64(-5e8), int64(0), int64(1e9), int64(-1), []byte{})
	f.Add(uint8(1), int64(2), uint32(10), int64(0), int64(0), int64(0), int64(-3e9), []byte{200, 1, 3, 0, 255, 1})
	f.Fuzz(func(t *testing.T, alg uint8, limit int64, windowSec uint32, a, b, cost, now int64, log []byte) {
		p := limiter.Policy{Name: "fuzz", Algorithm: limiter.Algorithms[int(alg)%4]}
		p.Window = time.Duration(wrap(int64(windowSec), int64(limiter.MaxWindow/time.Second))) * time.Second
		w := int64(p.Window)
		p.Limit = wrap(abs(limit), limiter.MaxLimit)
		if p.Algorithm == limiter.TokenBucket {
			p.Limit = min(p.Limit, w)
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("mapped to an invalid policy %+v: %v", p, err)
		}
		cost = abs(cost) % (p.Limit + 1)
		now %= 1 << 62 // far from overflow, a window either side
		at := time.Unix(0, now).UTC()

		// decide runs the algorithm at ts on the state as seen from now.
		var decide func(cost, ts int64) limiter.Decision
		switch p.Algorithm {
		case limiter.FixedWindow:
			count := abs(a) % (1 << 40)
			start := limiter.WindowStart(at, p.Window).UnixNano()
			decide = func(cost, ts int64) limiter.Decision {
				c := count
				if limiter.WindowStart(time.Unix(0, ts), p.Window).UnixNano() != start {
					c = 0
				}
				return limiter.FixedWindowDecide(p, c, cost, time.Unix(0, ts))
			}
		case limiter.SlidingWindow:
			// Counts may exceed the limit after the limit was lowered.
			prev, cur := abs(a)%(2*p.Limit+1), abs(b)%(2*p.Limit+1)
			start := limiter.WindowStart(at, p.Window).UnixNano()
			decide = func(cost, ts int64) limiter.Decision {
				switch (limiter.WindowStart(time.Unix(0, ts), p.Window).UnixNano() - start) / w {
				case 0:
					return limiter.SlidingWindowDecide(p, prev, cur, cost, time.Unix(0, ts))
				case 1:
					return limiter.SlidingWindowDecide(p, cur, 0, cost, time.Unix(0, ts))
				default:
					return limiter.SlidingWindowDecide(p, 0, 0, cost, time.Unix(0, ts))
				}
			}
		case limiter.TokenBucket:
			var tat int64 // a new key, or a bucket up to two windows either side
			if a != 0 {
				tat = now + a%(2*w)
			}
			decide = func(cost, ts int64) limiter.Decision {
				d, next := limiter.TokenBucketDecide(p, tat, cost, time.Unix(0, ts))
				if (!d.Allowed || cost == 0) && next != tat {
					t.Fatalf("a refusal or a peek moved the bucket from %d to %d", tat, next)
				}
				return d
			}
		case limiter.SlidingLog, limiter.SlidingLogUnsafe:
			// Events, oldest first, from two windows back to one ahead.
			var events []limiter.Event
			e := now - 2*w
			for i := 0; i+1 < len(log); i += 2 {
				if e += int64(log[i]) * (w / 85); e > now+w {
					break
				}
				events = append(events, limiter.Event{At: e, Cost: 1 + int64(log[i+1])%p.Limit})
			}
			decide = func(cost, ts int64) limiter.Decision {
				return limiter.SlidingLogDecide(p, events, cost, time.Unix(0, ts))
			}
		default:
			t.Fatalf("no arithmetic for %q: %v", p.Algorithm, limiter.ErrUnknownAlgorithm)
		}

		d := decide(cost, now)
		peek := decide(0, now)
		switch {
		case d.Limit != p.Limit:
			t.Fatalf("limit %d, want %d", d.Limit, p.Limit)
		case d.Remaining < 0 || d.Remaining > p.Limit:
			t.Fatalf("remaining %d outside 0..%d", d.Remaining, p.Limit)
		case d.Count < 0:
			t.Fatalf("count %d", d.Count)
		case d.ResetAfter < 0 || d.RetryAfter < 0:
			t.Fatalf("negative durations: %+v", d)
		case d.Allowed && d.RetryAfter != 0:
			t.Fatalf("allowed with retry after %s", d.RetryAfter)
		case !d.Allowed && d.RetryAfter <= 0:
			t.Fatalf("refused without retry after: %+v", d)
		case peek.Allowed != (peek.Remaining >= 1):
			t.Fatalf("peek allowed=%v with remaining %d", peek.Allowed, peek.Remaining)
		case d.Allowed != (peek.Remaining >= max(cost, 1)):
			t.Fatalf("cost %d allowed=%v but a peek says %d remain", cost, d.Allowed, peek.Remaining)
		}
		if d.Allowed {
			return
		}
		later := now + int64(d.RetryAfter)
		if !decide(cost, later).Allowed {
			t.Fatalf("cost %d still refused after retry after %s: %+v", cost, d.RetryAfter, decide(cost, later))
		}
		if decide(cost, later-1).Allowed {
			t.Fatalf("cost %d allowed 1ns before retry after %s", cost, d.RetryAfter)
		}
	})
}

// wrap maps a non-negative x onto 1..n, keeping 1..n as they are.
func wrap(x, n int64) int64 {
	if x %= n; x == 0 {
		return n
	}
	return x
}

func abs(x int64) int64 {
	if x < 0 {
		return -(x + 1) // no overflow at MinInt64
	}
	return x
}
