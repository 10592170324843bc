package limitertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// step is one line of a time script: at base+at, an attempt of cost units
// (0 for a Peek) and the decision it must get, or the error it must get.
type step struct {
	at   time.Duration
	cost int64
	want want
	err  error
}

// want is the expected decision. start is the fixed window's start, as an
// offset from base; the other algorithms' WindowStart is always now-window.
type want struct {
	allowed          bool
	count, remaining int64
	retry, reset     time.Duration
	start            time.Duration
}

const (
	msec = time.Millisecond
	sec  = time.Second
	nsec = time.Nanosecond
)

// scripts are worked by hand from the algorithms' definitions (limit 3 or 4,
// window 60s), not taken from any store's output.
var scripts = map[limiter.Algorithm]struct {
	limit int64
	steps []step
}{
	limiter.FixedWindow: {3, []step{
		// Seed 000's example (docs/seeds.md): 00:00:45 is in the window that starts at 00:00:00.
		{at: 45 * sec, cost: 1, want: want{allowed: true, count: 1, remaining: 2, reset: 15 * sec}},
		{at: 45 * sec, cost: 1, want: want{allowed: true, count: 2, remaining: 1, reset: 15 * sec}},
		{at: 59 * sec, cost: 1, want: want{allowed: true, count: 3, remaining: 0, reset: 1 * sec}},
		// Refused attempts are counted too; Retry-After is the window's end.
		{at: 60*sec - nsec, cost: 1, want: want{count: 4, retry: nsec, reset: nsec}},
		// A new window: cost = limit passes from zero.
		{at: 60 * sec, cost: 3, want: want{allowed: true, count: 3, reset: 60 * sec, start: 60 * sec}},
		// Retry-After at the first, middle and last second of the window.
		{at: 60 * sec, cost: 1, want: want{count: 4, retry: 60 * sec, reset: 60 * sec, start: 60 * sec}},
		{at: 90 * sec, cost: 1, want: want{count: 5, retry: 30 * sec, reset: 30 * sec, start: 60 * sec}},
		{at: 119 * sec, cost: 1, want: want{count: 6, retry: 1 * sec, reset: 1 * sec, start: 60 * sec}},
		{at: 119*sec + 500*msec, cost: 1, want: want{count: 7, retry: 500 * msec, reset: 500 * msec, start: 60 * sec}},
		// Back by one window: the first window's count (4) is still there.
		{at: 59*sec + 500*msec, cost: 1, want: want{count: 5, retry: 500 * msec, reset: 500 * msec}},
		{at: 119*sec + 900*msec, cost: 1, want: want{count: 8, retry: 100 * msec, reset: 100 * msec, start: 60 * sec}},
		{at: 120 * sec, cost: 3, want: want{allowed: true, count: 3, reset: 60 * sec, start: 120 * sec}},
		// cost > limit is an error and counts nothing.
		{at: 180 * sec, cost: 4, err: limiter.ErrInvalidCost},
		{at: 180 * sec, cost: 1, want: want{allowed: true, count: 1, remaining: 2, reset: 60 * sec, start: 180 * sec}},
		{at: 180 * sec, cost: 0, want: want{allowed: true, count: 1, remaining: 2, reset: 60 * sec, start: 180 * sec}},
		// cost = limit on a used window is refused, and counted.
		{at: 181 * sec, cost: 3, want: want{count: 4, retry: 59 * sec, reset: 59 * sec, start: 180 * sec}},
		{at: 181 * sec, cost: 0, want: want{count: 4, retry: 59 * sec, reset: 59 * sec, start: 180 * sec}},
	}},
	limiter.SlidingLog: {3, slidingLogScript},
	// Sequentially the unsafe variant is the sliding log.
	limiter.SlidingLogUnsafe: {3, slidingLogScript},
	limiter.SlidingWindow: {4, []step{
		{at: 10 * sec, cost: 1, want: want{allowed: true, count: 1, remaining: 3, reset: 110 * sec}},
		{at: 10 * sec, cost: 3, want: want{allowed: true, count: 4, reset: 110 * sec}},
		// Refused attempts are not counted. It fits again 15s into the next
		// window: 4×(60−15)/60 + 0 + 1 = 4.
		{at: 30 * sec, cost: 1, want: want{count: 4, retry: 45 * sec, reset: 90 * sec}},
		{at: 75*sec - nsec, cost: 1, want: want{count: 3, retry: nsec, reset: 45*sec + nsec}},
		{at: 75 * sec, cost: 1, want: want{allowed: true, count: 4, reset: 105 * sec}},
		// Middle of the window: 4×30/60 + 1 + 1 = 4.
		{at: 90 * sec, cost: 1, want: want{allowed: true, count: 4, reset: 90 * sec}},
		// 4×(60−e)/60 + 2 + 1 <= 4 from e = 45s.
		{at: 90 * sec, cost: 1, want: want{count: 4, retry: 15 * sec, reset: 90 * sec}},
		// Back 31s into the first window, which holds 4: it fits 15s into
		// the next window as seen from here.
		{at: 59 * sec, cost: 1, want: want{count: 4, retry: 16 * sec, reset: 61 * sec}},
		// Last second of a window whose previous one holds 2: the weighted
		// part, 2×1/60, is below one unit but still refuses cost = limit.
		{at: 179 * sec, cost: 4, want: want{count: 0, remaining: 3, retry: 1 * sec, reset: 1 * sec}},
		{at: 180 * sec, cost: 4, want: want{allowed: true, count: 4, reset: 120 * sec}},
		{at: 180 * sec, cost: 5, err: limiter.ErrInvalidCost},
		{at: 200 * sec, cost: 0, want: want{count: 4, retry: 55 * sec, reset: 100 * sec}},
	}},
	limiter.TokenBucket: {3, []step{
		// One token every 20s, burst 3: a full bucket admits exactly 3.
		{at: 0, cost: 1, want: want{allowed: true, count: 1, remaining: 2, reset: 20 * sec}},
		{at: 0, cost: 1, want: want{allowed: true, count: 2, remaining: 1, reset: 40 * sec}},
		{at: 0, cost: 1, want: want{allowed: true, count: 3, reset: 60 * sec}},
		{at: 0, cost: 1, want: want{count: 3, retry: 20 * sec, reset: 60 * sec}},
		{at: 10 * sec, cost: 1, want: want{count: 3, retry: 10 * sec, reset: 50 * sec}},
		{at: 20 * sec, cost: 1, want: want{allowed: true, count: 3, reset: 60 * sec}},
		// One nanosecond back: going backwards never frees a token.
		{at: 20*sec - nsec, cost: 1, want: want{count: 4, retry: 20*sec + nsec, reset: 60*sec + nsec}},
		{at: 100 * sec, cost: 3, want: want{allowed: true, count: 3, reset: 60 * sec}},
		{at: 100 * sec, cost: 4, err: limiter.ErrInvalidCost},
		{at: 130 * sec, cost: 0, want: want{allowed: true, count: 2, remaining: 1, reset: 30 * sec}},
		{at: 130 * sec, cost: 2, want: want{count: 2, remaining: 1, retry: 10 * sec, reset: 30 * sec}},
		{at: 140 * sec, cost: 2, want: want{allowed: true, count: 3, reset: 60 * sec}},
	}},
}

var slidingLogScript = []step{
	{at: 10 * sec, cost: 1, want: want{allowed: true, count: 1, remaining: 2, reset: 60 * sec}},
	{at: 20 * sec, cost: 1, want: want{allowed: true, count: 2, remaining: 1, reset: 60 * sec}},
	{at: 30 * sec, cost: 1, want: want{allowed: true, count: 3, reset: 60 * sec}},
	// Refused, not recorded; it fits when the 10s event leaves at 70s.
	{at: 40 * sec, cost: 1, want: want{count: 3, retry: 30 * sec, reset: 50 * sec}},
	// One nanosecond before the edge the 10s event still counts...
	{at: 70*sec - nsec, cost: 1, want: want{count: 3, retry: nsec, reset: 20*sec + nsec}},
	// ...at the edge it no longer does.
	{at: 70 * sec, cost: 1, want: want{allowed: true, count: 3, reset: 60 * sec}},
	// Back 5s: the 10s event counts again, and so does the 70s one, still
	// in the future: going backwards never hands out a fresh budget.
	{at: 65 * sec, cost: 1, want: want{count: 4, retry: 15 * sec, reset: 65 * sec}},
	{at: 75 * sec, cost: 1, want: want{count: 3, retry: 5 * sec, reset: 55 * sec}},
	// The 30s event is out at 90s exactly; cost = limit does not fit with
	// the 70s event in, cost > limit is an error.
	{at: 90 * sec, cost: 3, want: want{count: 1, remaining: 2, retry: 40 * sec, reset: 40 * sec}},
	{at: 90 * sec, cost: 4, err: limiter.ErrInvalidCost},
	{at: 90 * sec, cost: 2, want: want{allowed: true, count: 3, reset: 60 * sec}},
	{at: 90 * sec, cost: 0, want: want{count: 3, retry: 40 * sec, reset: 60 * sec}},
	{at: 130 * sec, cost: 1, want: want{allowed: true, count: 3, reset: 60 * sec}},
	{at: 200 * sec, cost: 3, want: want{allowed: true, count: 3, reset: 60 * sec}},
}

// testScripts plays each algorithm's script on one key of a fresh store.
func testScripts(t *testing.T, newStore newStoreFunc, o options) {
	forEach(t, newStore, limiter.Algorithms, func(t *testing.T, s limiter.Store, alg limiter.Algorithm) {
		sc := scripts[alg]
		require.NotEmpty(t, sc.steps, "no script for %s", alg)
		p := policy("script", alg, sc.limit, time.Minute)
		k := limiter.Key{Subject: "alice", Scope: "/ping"}
		refused := false // the store refused k at an earlier step
		for i, st := range sc.steps {
			now := base.Add(st.at)
			var (
				d   limiter.Decision
				err error
			)
			if st.cost == 0 {
				d, err = s.Peek(t.Context(), p, k, now)
			} else {
				d, err = s.Allow(t.Context(), p, limiter.Request{Key: k, Cost: st.cost, Now: now})
			}
			if st.err != nil {
				require.ErrorIs(t, err, st.err, "step %d at +%s cost %d", i, st.at, st.cost)
				continue
			}
			require.NoError(t, err, "step %d at +%s cost %d", i, st.at, st.cost)
			start := now.Add(-p.Window)
			if alg == limiter.FixedWindow {
				start = base.Add(st.want.start)
			}
			w := st.want
			want := viewOf(limiter.Decision{Allowed: w.allowed, Limit: sc.limit, Remaining: w.remaining, Count: w.count,
				WindowStart: start, ResetAfter: w.reset, RetryAfter: w.retry})
			got, where := viewOf(d), []any{"step %d at +%s cost %d", i, st.at, st.cost}
			if o.repeated(t, refused, want, got, st.cost, where...) {
				want.Count, want.Remaining, want.ResetAfter, want.WindowStart, want.RetryAfter = got.Count, got.Remaining, got.ResetAfter, got.WindowStart, got.RetryAfter
			}
			assert.Equal(t, want, got, where...)
			refused = refused || (st.cost > 0 && !d.Allowed)
		}
	})
}

// view is a Decision with its time as text, so that equal instants compare
// equal whatever their location, and failures read well.
type view struct {
	Allowed          bool
	Limit            int64
	Remaining, Count int64
	WindowStart      string
	ResetAfter       time.Duration
	RetryAfter       time.Duration
}

func viewOf(d limiter.Decision) view {
	return view{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, Count: d.Count,
		WindowStart: d.WindowStart.UTC().Format(time.RFC3339Nano),
		ResetAfter:  d.ResetAfter, RetryAfter: d.RetryAfter,
	}
}
