package limitertest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Sizes of the random comparison with the models, per algorithm: about
// 14 decisions a schedule.
const (
	schedules      = 300 // independent schedules, each on fresh keys
	schedulesFewer = 80  // under the race detector or -short
	minSteps       = 4   // steps of one schedule: minSteps..maxSteps
	maxSteps       = 24
)

// Policy shapes of the random schedules. Every window/limit pair gives a
// whole number of microseconds per token, and every time is a whole
// microsecond, so that a store keeping microseconds decides like one keeping
// nanoseconds.
var (
	randomLimits  = []int64{1, 2, 3, 4, 5, 6, 8, 10, 12}
	randomWindows = []time.Duration{6 * time.Second, 12 * time.Second, time.Minute}
)

// testModels compares each algorithm with its reference model on random
// schedules of (time, key, cost), with peeks and prunes in between.
func testModels(t *testing.T, newStore newStoreFunc, o options) {
	sd := seed(t)
	t.Logf("seed %d (%s)", sd, replay(sd))
	n := schedules
	if raceEnabled || testing.Short() {
		n = schedulesFewer
	}
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		rng := rand.New(rand.NewPCG(sd, uint64(len(alg))))
		r := &runner{t: t, s: s, rng: rng, seed: sd, now: base.UnixNano(), o: o}
		for i := range n {
			r.schedule(i, alg)
		}
	})
}

// runner plays random schedules on one store. Schedules follow each other in
// time, so the store sees one clock that moves mostly forward.
type runner struct {
	t    *testing.T
	s    limiter.Store
	rng  *rand.Rand
	seed uint64
	now  int64 // the latest time used, Unix nanoseconds
	o    options
}

// schedule plays schedule i: a random policy, one to three keys, and a random
// walk in time with attempts, peeks and prunes, each decision compared with
// the model's.
func (r *runner) schedule(i int, alg limiter.Algorithm) {
	t, rng := r.t, r.rng
	p := policy(fmt.Sprintf("model-%d", i), alg,
		randomLimits[rng.IntN(len(randomLimits))], randomWindows[rng.IntN(len(randomWindows))])
	w := int64(p.Window)
	m := newModel(t, p)
	keys := []limiter.Key{{Subject: "u1", Scope: "a"}, {Subject: "u1", Scope: "b"}, {Subject: "u2", Scope: "a"}}[:1+rng.IntN(3)]
	r.now += 3 * w // a clean start: nothing of the last schedule is in reach
	start, latest := r.now, r.now
	var admitted []int64              // times of admitted attempts, for edge cases
	refused := map[limiter.Key]bool{} // keys the store has refused
	for step := range minSteps + rng.IntN(maxSteps-minSteps+1) {
		now := r.next(latest, w, p.Limit, admitted)
		latest = max(latest, now)
		k := keys[rng.IntN(len(keys))]
		op := rng.IntN(100)
		where := func(what string) string {
			return fmt.Sprintf("%s: schedule %d step %d: %s %+v on %+v at %s (start+%s); %s",
				alg, i, step, what, k, p, time.Unix(0, now).UTC().Format(time.RFC3339Nano),
				time.Duration(now-start), replay(r.seed))
		}
		switch {
		case op < 6:
			// Prune as late as the contract allows: no decision that follows
			// is earlier than latest-window.
			_, err := r.s.Prune(t.Context(), time.Unix(0, latest-w), []limiter.Policy{p})
			require.NoError(t, err, where("prune"))
		case op < 18:
			d, err := r.s.Peek(t.Context(), p, k, time.Unix(0, now))
			require.NoError(t, err, where("peek"))
			require.Equal(t, m.decide(k, 0, now), verdictOf(d), where("peek"))
		default:
			cost := int64(1)
			switch c := rng.IntN(10); {
			case c == 0:
				cost = p.Limit
			case c < 3:
				cost = 1 + rng.Int64N(p.Limit)
			}
			d, err := r.s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: cost, Now: time.Unix(0, now)})
			require.NoError(t, err, where(fmt.Sprintf("allow cost %d", cost)))
			want := m.decide(k, cost, now)
			got, msg := verdictOf(d), where(fmt.Sprintf("allow cost %d", cost))
			if r.o.repeated(t, refused[k], view{Allowed: want.Allowed, RetryAfter: want.RetryAfter}, view{Allowed: got.Allowed, RetryAfter: got.RetryAfter, Remaining: got.Remaining}, cost, msg) {
				want.Count, want.Remaining, want.RetryAfter = got.Count, got.Remaining, got.RetryAfter
			}
			require.Equal(t, want, got, msg)
			refused[k] = refused[k] || !got.Allowed
			if want.Allowed {
				admitted = append(admitted, now)
			}
		}
	}
	r.now = latest
}

// next returns the time of the next step: mostly forward in small steps,
// sometimes a big jump, sometimes exactly at (or a microsecond before) the
// edge where an admitted attempt leaves the window or a window ends, and
// sometimes back, but never more than one window before latest.
func (r *runner) next(latest, w, limit int64, admitted []int64) int64 {
	rng := r.rng
	us := int64(time.Microsecond)
	tick := w / limit // time for one token
	now := latest
	switch c := rng.IntN(100); {
	case c < 20: // same instant
	case c < 55:
		now += rng.Int64N(tick/us+1) * us
	case c < 70:
		now += rng.Int64N(w/us+1) * us
	case c < 75:
		now += w + rng.Int64N(2*w/us+1)*us
	case c < 85 && len(admitted) > 0:
		now = admitted[rng.IntN(len(admitted))] + w - rng.Int64N(2)*us
	case c < 90:
		now = windowOf(latest, w) + w - rng.Int64N(2)*us
	default:
		now -= rng.Int64N(w/us+1) * us
	}
	return max(now, latest-w)
}
