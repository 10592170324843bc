package limitertest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// admission is one admitted attempt.
type admission struct {
	at   int64 // Unix nanoseconds
	cost int64
}

// invariantAttempts is the length of each invariant's random walk.
const invariantAttempts = 600

// testInvariants drives one key with a random walk forward in time, bursts
// included, and checks what each algorithm promises about the admitted
// units in every span of time.
func testInvariants(t *testing.T, newStore newStoreFunc) {
	sd := seed(t)
	t.Logf("seed %d (%s)", sd, replay(sd))
	forEach(t, newStore, exact, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		p := policy("invariant", alg, 5, 10*time.Second)
		got, refused := walk(t, s, p, rand.New(rand.NewPCG(sd, 7)))
		// The walk offers several times the rate: both outcomes must occur.
		require.Greater(t, refused, 0, "no attempt was refused; %s", replay(sd))
		require.Greater(t, len(got), int(p.Limit), "too few admissions; %s", replay(sd))
		checkSpans(t, p, got, sd)
	})
}

// walk makes invariantAttempts attempts of cost 1 or 2 on one key, at times
// that move forward by random whole microseconds (a third of the steps zero,
// bursts) averaging a third of a token, and returns the admitted attempts and
// the number refused.
func walk(t *testing.T, s limiter.Store, p limiter.Policy, rng *rand.Rand) (got []admission, refused int) {
	k := limiter.Key{Subject: "walker"}
	tick := int64(p.Window) / p.Limit
	now := base.UnixNano()
	for range invariantAttempts {
		if rng.IntN(3) > 0 {
			now += rng.Int64N(tick/1000) * 1000
		}
		cost := 1 + rng.Int64N(2)
		if allow(t, s, p, k, cost, time.Unix(0, now)).Allowed {
			got = append(got, admission{now, cost})
		} else {
			refused++
		}
	}
	return got, refused
}

// checkSpans checks the admitted units of every span [a.at, b.at] (a before
// b) against the algorithm's bound for a span of that length.
func checkSpans(t *testing.T, p limiter.Policy, got []admission, sd uint64) {
	w, limit := int64(p.Window), p.Limit
	tick := w / limit
	for j := range got {
		var units int64
		for i := j; i >= 0; i-- {
			span := got[j].at - got[i].at
			units += got[i].cost
			var bound int64
			switch p.Algorithm {
			case limiter.SlidingLog:
				// Exact: never more than limit in any window-length span.
				if span >= w {
					continue
				}
				bound = limit
			case limiter.FixedWindow:
				// Up to limit per fixed window, so up to 2×limit in any
				// window-length span.
				if span >= w {
					continue
				}
				bound = limit
				if windowOf(got[i].at, w) != windowOf(got[j].at, w) {
					bound = 2 * limit
				}
			case limiter.SlidingWindow:
				// SlidingWindowDecide's bound: limit × (1 + span/window),
				// rounded down, for a span shorter than a window.
				if span >= w {
					continue
				}
				bound = limit + limit*span/w
				if windowOf(got[i].at, w) == windowOf(got[j].at, w) {
					bound = limit
				}
			case limiter.TokenBucket:
				// GCRA: a burst of limit, then one unit per tick.
				bound = limit + span/tick
			}
			if !assert.LessOrEqual(t, units, bound, "%s: %d units admitted in [%d, %d] (%s long); %s",
				p.Algorithm, units, got[i].at, got[j].at, time.Duration(span), replay(sd)) {
				return
			}
		}
	}
}

// testBoundaryBurst sends limit attempts just before a window boundary and
// limit just after it: the fixed window admits all of them, twice its limit
// in a millisecond (seed 000's fixed-vs-sliding trade-off, docs/seeds.md),
// the others only limit.
func testBoundaryBurst(t *testing.T, newStore newStoreFunc) {
	want := map[limiter.Algorithm]int64{
		limiter.FixedWindow:   10,
		limiter.SlidingLog:    5,
		limiter.SlidingWindow: 5,
		limiter.TokenBucket:   5,
	}
	forEach(t, newStore, exact, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		p := policy("burst", alg, 5, 10*time.Second)
		k := limiter.Key{Subject: "burst"}
		boundary := base.Add(p.Window)
		var admitted int64
		for _, at := range []time.Time{boundary.Add(-time.Millisecond), boundary} {
			for range p.Limit {
				if allow(t, s, p, k, 1, at).Allowed {
					admitted++
				}
			}
		}
		assert.Equal(t, want[alg], admitted)
	})
}

// testFullBucket: a full bucket admits exactly limit at once, then nothing
// until a token drips, then exactly limit again once it has refilled.
func testFullBucket(t *testing.T, newStore newStoreFunc) {
	forEach(t, newStore, []limiter.Algorithm{limiter.TokenBucket}, func(t *testing.T, s limiter.Store, _ limiter.Algorithm) {
		p := policy("bucket", limiter.TokenBucket, 7, 7*time.Second)
		k := limiter.Key{Subject: "b"}
		for _, at := range []time.Time{base, base.Add(p.Window)} {
			var admitted int64
			for range 3 * p.Limit {
				if allow(t, s, p, k, 1, at).Allowed {
					admitted++
				}
			}
			assert.Equal(t, p.Limit, admitted, "at %s", at)
		}
		assert.False(t, allow(t, s, p, k, 1, base.Add(p.Window+time.Second-time.Nanosecond)).Allowed)
		assert.True(t, allow(t, s, p, k, 1, base.Add(p.Window+time.Second)).Allowed)
	})
}
