package limitertest

import (
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// The reference models below are deliberately naive: each keeps every
// attempt it was shown and recomputes a decision from that list, with its
// own arithmetic (none of them calls the limiter package's *Decide
// functions). They are slow and obviously right, which is the point.

// attempt is one Allow a model has decided.
type attempt struct {
	key     limiter.Key
	at      int64 // Unix nanoseconds
	cost    int64
	allowed bool
}

// verdict is the part of a decision the models predict.
type verdict struct {
	Allowed    bool
	Count      int64
	Remaining  int64
	RetryAfter time.Duration
}

func verdictOf(d limiter.Decision) verdict {
	return verdict{Allowed: d.Allowed, Count: d.Count, Remaining: d.Remaining, RetryAfter: d.RetryAfter}
}

// model decides like a store: cost 0 is a peek and records nothing.
type model interface {
	decide(k limiter.Key, cost, now int64) verdict
}

// newModel returns the reference model of p's algorithm; an algorithm
// without one fails the test rather than borrow another's.
func newModel(t testing.TB, p limiter.Policy) model {
	switch p.Algorithm {
	case limiter.FixedWindow:
		return &fixedModel{log: log{p: p}}
	case limiter.SlidingWindow:
		return &weightedModel{log: log{p: p}}
	case limiter.TokenBucket:
		return &bucketModel{log: log{p: p}}
	case limiter.SlidingLog, limiter.SlidingLogUnsafe: // the unsafe one run one attempt at a time
		return &slidingModel{log: log{p: p}}
	}
	t.Fatalf("limitertest: no reference model for %q: %v", p.Algorithm, limiter.ErrUnknownAlgorithm)
	return nil
}

// log is every attempt a model has decided, in the order it decided them.
type log struct {
	p        limiter.Policy
	attempts []attempt
}

func (l *log) record(k limiter.Key, cost, now int64, allowed bool) {
	if cost > 0 {
		l.attempts = append(l.attempts, attempt{key: k, at: now, cost: cost, allowed: allowed})
	}
}

// sum adds the cost of k's attempts that match keep.
func (l *log) sum(k limiter.Key, keep func(a attempt) bool) int64 {
	var n int64
	for _, a := range l.attempts {
		if a.key == k && keep(a) {
			n += a.cost
		}
	}
	return n
}

func (l *log) limit() int64  { return l.p.Limit }
func (l *log) window() int64 { return int64(l.p.Window) }

// windowOf returns the start of the fixed window holding t: the largest
// multiple of w not after t.
func windowOf(t, w int64) int64 {
	q := t / w
	if q*w > t {
		q--
	}
	return q * w
}

// fixedModel: every attempt counts in the window it falls in, refused ones
// too; an attempt passes when its window's total including it is <= limit.
type fixedModel struct{ log }

func (m *fixedModel) decide(k limiter.Key, cost, now int64) verdict {
	w := m.window()
	start := windowOf(now, w)
	count := m.sum(k, func(a attempt) bool { return windowOf(a.at, w) == start })
	v := verdict{
		Allowed:   count+max(cost, 1) <= m.limit(),
		Count:     count + cost,
		Remaining: max(0, m.limit()-count-cost),
	}
	if !v.Allowed {
		v.RetryAfter = time.Duration(start + w - now)
	}
	m.record(k, cost, now, v.Allowed)
	return v
}

// slidingModel: the units admitted in (t-window, ...] count at t (later
// ones too, left by a clock that went back); an attempt passes when they
// plus its cost are <= limit. RetryAfter is found by trying each instant at
// which an admitted attempt leaves the window.
type slidingModel struct{ log }

func (m *slidingModel) units(k limiter.Key, t int64) int64 {
	return m.sum(k, func(a attempt) bool { return a.allowed && a.at > t-m.window() })
}

func (m *slidingModel) decide(k limiter.Key, cost, now int64) verdict {
	want := max(cost, 1)
	in := m.units(k, now)
	v := verdict{Allowed: in+want <= m.limit(), Count: in}
	if !v.Allowed {
		var exits []int64
		for _, a := range m.attempts {
			if a.key == k && a.allowed && a.at+m.window() > now {
				exits = append(exits, a.at+m.window())
			}
		}
		slices.Sort(exits)
		for _, x := range exits {
			if m.units(k, x)+want <= m.limit() {
				v.RetryAfter = time.Duration(x - now)
				break
			}
		}
	}
	m.record(k, cost, now, v.Allowed)
	if v.Allowed {
		v.Count += cost
	}
	v.Remaining = max(0, m.limit()-v.Count)
	return v
}

// weightedModel: the estimate at t is prev×(window−elapsed)/window + cur,
// where cur and prev are the units admitted in t's fixed window and the one
// before; an attempt passes when estimate + cost <= limit. The arithmetic is
// exact (math/big). RetryAfter is the first instant, found by bisection, at
// which the attempt would pass as seen from now: windows after now's are
// taken as empty (only a clock that went back can have filled them).
type weightedModel struct{ log }

func (m *weightedModel) units(k limiter.Key, start int64) int64 {
	w := m.window()
	return m.sum(k, func(a attempt) bool { return a.allowed && windowOf(a.at, w) == start })
}

// scaled returns window × estimate, exactly.
func (m *weightedModel) scaled(prev, cur, elapsed int64) *big.Int {
	w := big.NewInt(m.window())
	x := new(big.Int).Mul(big.NewInt(prev), big.NewInt(m.window()-elapsed))
	return x.Add(x, new(big.Int).Mul(big.NewInt(cur), w))
}

// fits reports whether estimate + want <= limit.
func (m *weightedModel) fits(prev, cur, elapsed, want int64) bool {
	return m.scaled(prev, cur+want, elapsed).Cmp(new(big.Int).Mul(big.NewInt(m.limit()), big.NewInt(m.window()))) <= 0
}

func (m *weightedModel) decide(k limiter.Key, cost, now int64) verdict {
	w := m.window()
	start := windowOf(now, w)
	prev, cur := m.units(k, start-w), m.units(k, start)
	want := max(cost, 1)
	v := verdict{Allowed: m.fits(prev, cur, now-start, want)}
	m.record(k, cost, now, v.Allowed)
	if v.Allowed {
		cur += cost
	}
	wBig := big.NewInt(w)
	est := m.scaled(prev, cur, now-start)
	v.Count = new(big.Int).Quo(est, wBig).Int64()
	room := new(big.Int).Sub(new(big.Int).Mul(big.NewInt(m.limit()), wBig), est)
	if room.Sign() > 0 {
		v.Remaining = room.Quo(room, wBig).Int64()
	}
	if !v.Allowed {
		passes := func(d int64) bool {
			t := now + d
			switch (windowOf(t, w) - start) / w {
			case 0:
				return m.fits(prev, cur, t-start, want)
			case 1:
				return m.fits(cur, 0, t-start-w, want)
			default:
				return true
			}
		}
		lo, hi := int64(0), 2*w // passes(lo) is false, passes(hi) true
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if passes(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		v.RetryAfter = time.Duration(hi)
	}
	return v
}

// bucketModel is the continuous-state leaky bucket of ITU-T I.371: a level
// in nanoseconds of work that drains at one nanosecond per nanosecond (and
// fills when the clock goes back); each unit adds window/limit (rounded
// down), and an attempt passes when the level after it stays within
// limit × window/limit. The level is replayed from every admitted attempt.
type bucketModel struct{ log }

func (m *bucketModel) level(k limiter.Key, now int64) int64 {
	tau := m.window() / m.limit()
	var level, last int64
	seen := false
	for _, a := range m.attempts {
		if a.key != k || !a.allowed {
			continue
		}
		if seen {
			level = max(0, level-(a.at-last))
		}
		level += a.cost * tau
		last, seen = a.at, true
	}
	if !seen {
		return 0
	}
	return max(0, level-(now-last))
}

func (m *bucketModel) decide(k limiter.Key, cost, now int64) verdict {
	tau := m.window() / m.limit()
	want := max(cost, 1)
	level := m.level(k, now)
	v := verdict{Allowed: level+want*tau <= m.limit()*tau}
	if !v.Allowed {
		v.RetryAfter = time.Duration(level + want*tau - m.limit()*tau)
	} else {
		level += cost * tau
	}
	m.record(k, cost, now, v.Allowed)
	v.Count = (level + tau - 1) / tau
	v.Remaining = max(0, m.limit()-v.Count)
	return v
}
