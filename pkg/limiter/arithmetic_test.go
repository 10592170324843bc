package limiter_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tollgate/tollgate/pkg/limiter"
)

func pol(alg limiter.Algorithm, limit int64, window time.Duration) limiter.Policy {
	return limiter.Policy{Name: "p", Algorithm: alg, Limit: limit, Window: window}
}

func TestFixedWindowDecide(t *testing.T) {
	p := pol(limiter.FixedWindow, 3, time.Minute)
	for _, tc := range []struct {
		name        string
		count, cost int64
		now         time.Time
		want        limiter.Decision
	}{
		{"seed truncation", 0, 1, t0.Add(45 * time.Second),
			limiter.Decision{Allowed: true, Limit: 3, Remaining: 2, Count: 1, WindowStart: t0, ResetAfter: 15 * time.Second}},
		{"last unit", 2, 1, t0,
			limiter.Decision{Allowed: true, Limit: 3, Remaining: 0, Count: 3, WindowStart: t0, ResetAfter: time.Minute}},
		{"over, counted", 3, 1, t0.Add(59 * time.Second),
			limiter.Decision{Limit: 3, Count: 4, WindowStart: t0, ResetAfter: time.Second, RetryAfter: time.Second}},
		{"cost over the rest", 1, 3, t0.Add(30 * time.Second),
			limiter.Decision{Limit: 3, Count: 4, WindowStart: t0, ResetAfter: 30 * time.Second, RetryAfter: 30 * time.Second}},
		{"peek", 2, 0, t0.Add(30 * time.Second),
			limiter.Decision{Allowed: true, Limit: 3, Remaining: 1, Count: 2, WindowStart: t0, ResetAfter: 30 * time.Second}},
		{"peek when full", 3, 0, t0.Add(30 * time.Second),
			limiter.Decision{Limit: 3, Count: 3, WindowStart: t0, ResetAfter: 30 * time.Second, RetryAfter: 30 * time.Second}},
		{"before 1970", 0, 1, time.Unix(-1, 0),
			limiter.Decision{Allowed: true, Limit: 3, Remaining: 2, Count: 1, WindowStart: time.Unix(-60, 0).UTC(), ResetAfter: time.Second}},
	} {
		assert.Equal(t, tc.want, limiter.FixedWindowDecide(p, tc.count, tc.cost, tc.now), tc.name)
	}
}

func TestSlidingLogDecide(t *testing.T) {
	p := pol(limiter.SlidingLog, 3, time.Minute)
	now := t0.Add(time.Hour)
	at := func(d time.Duration) int64 { return now.Add(d).UnixNano() }
	ev := func(d time.Duration, cost int64) limiter.Event { return limiter.Event{At: at(d), Cost: cost} }
	since := now.Add(-time.Minute)
	for _, tc := range []struct {
		name   string
		events []limiter.Event
		cost   int64
		want   limiter.Decision
	}{
		{"empty", nil, 1,
			limiter.Decision{Allowed: true, Limit: 3, Remaining: 2, Count: 1, WindowStart: since, ResetAfter: time.Minute}},
		{"edge event is out", []limiter.Event{ev(-time.Minute, 1), ev(-30*time.Second, 1), ev(-10*time.Second, 1)}, 1,
			limiter.Decision{Allowed: true, Limit: 3, Count: 3, WindowStart: since, ResetAfter: time.Minute}},
		{"one ns inside counts", []limiter.Event{ev(-time.Minute+1, 1), ev(-30*time.Second, 1), ev(-10*time.Second, 1)}, 1,
			limiter.Decision{Limit: 3, Count: 3, WindowStart: since, ResetAfter: 50 * time.Second, RetryAfter: 1}},
		{"cost 2 waits for two units", []limiter.Event{ev(-50*time.Second, 1), ev(-40*time.Second, 1), ev(-20*time.Second, 1)}, 2,
			limiter.Decision{Limit: 3, Count: 3, WindowStart: since, ResetAfter: 40 * time.Second, RetryAfter: 20 * time.Second}},
		{"one event of cost 2", []limiter.Event{ev(-50*time.Second, 2)}, 2,
			limiter.Decision{Limit: 3, Remaining: 1, Count: 2, WindowStart: since, ResetAfter: 10 * time.Second, RetryAfter: 10 * time.Second}},
		{"future event still counts", []limiter.Event{ev(-10*time.Second, 2), ev(5*time.Second, 1)}, 0,
			limiter.Decision{Limit: 3, Count: 3, WindowStart: since, ResetAfter: 65 * time.Second, RetryAfter: 50 * time.Second}},
	} {
		assert.Equal(t, tc.want, limiter.SlidingLogDecide(p, tc.events, tc.cost, now), tc.name)
	}
}

func TestSlidingWindowDecide(t *testing.T) {
	p := pol(limiter.SlidingWindow, 4, time.Minute)
	mid := t0.Add(30 * time.Second)
	for _, tc := range []struct {
		name            string
		prev, cur, cost int64
		now             time.Time
		want            limiter.Decision
	}{
		{"half of prev weighs", 4, 1, 1, mid,
			limiter.Decision{Allowed: true, Limit: 4, Count: 4, WindowStart: mid.Add(-time.Minute), ResetAfter: 90 * time.Second}},
		{"refused, fits later in this window", 4, 2, 1, mid,
			limiter.Decision{Limit: 4, Count: 4, WindowStart: mid.Add(-time.Minute), ResetAfter: 90 * time.Second, RetryAfter: 15 * time.Second}},
		{"refused, fits in the next window", 0, 4, 1, mid,
			limiter.Decision{Limit: 4, Count: 4, WindowStart: mid.Add(-time.Minute), ResetAfter: 90 * time.Second, RetryAfter: 45 * time.Second}},
		{"a fraction of a unit refuses cost = limit", 2, 0, 4, t0.Add(59 * time.Second),
			limiter.Decision{Limit: 4, Count: 0, Remaining: 3, WindowStart: t0.Add(-time.Second), ResetAfter: time.Second, RetryAfter: time.Second}},
		{"peek of an empty key", 0, 0, 0, mid,
			limiter.Decision{Allowed: true, Limit: 4, Remaining: 4, WindowStart: mid.Add(-time.Minute)}},
	} {
		assert.Equal(t, tc.want, limiter.SlidingWindowDecide(p, tc.prev, tc.cur, tc.cost, tc.now), tc.name)
	}
	// limit × window overflows 64 bits: 2^31 × 366 days in nanoseconds.
	big := pol(limiter.SlidingWindow, limiter.MaxLimit, limiter.MaxWindow)
	start := limiter.WindowStart(t0, big.Window)
	now := start.Add(big.Window / 2)
	d := limiter.SlidingWindowDecide(big, limiter.MaxLimit, 0, 1, now)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(limiter.MaxLimit/2+1), d.Count)
	assert.Equal(t, int64(limiter.MaxLimit/2-1), d.Remaining)
	d = limiter.SlidingWindowDecide(big, limiter.MaxLimit, limiter.MaxLimit/2, 1, now)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Duration(int64(big.Window)/limiter.MaxLimit+1), d.RetryAfter, "one unit of prev must leave: window/limit, rounded up")
}

func TestTokenBucketDecide(t *testing.T) {
	// 3 a second: one token every 333,333,333ns, a burst of 999,999,999ns.
	p := pol(limiter.TokenBucket, 3, time.Second)
	const tick = 333_333_333
	n := t0.UnixNano()
	var tat int64
	for i := range 3 {
		d, next := limiter.TokenBucketDecide(p, tat, 1, t0)
		assert.True(t, d.Allowed, "unit %d of a full bucket", i)
		assert.Equal(t, n+int64(i+1)*tick, next)
		assert.Equal(t, int64(i+1), d.Count)
		assert.Equal(t, int64(2-i), d.Remaining)
		tat = next
	}
	d, next := limiter.TokenBucketDecide(p, tat, 1, t0)
	assert.Equal(t, limiter.Decision{Limit: 3, Count: 3, WindowStart: t0.Add(-time.Second), ResetAfter: 3 * tick, RetryAfter: tick}, d)
	assert.Equal(t, tat, next, "a refusal does not move the bucket")
	d, next = limiter.TokenBucketDecide(p, tat, 0, t0.Add(tick))
	assert.True(t, d.Allowed, "one token back after a tick")
	assert.Equal(t, int64(2), d.Count)
	assert.Equal(t, tat, next, "a peek does not move the bucket")
	d, next = limiter.TokenBucketDecide(p, tat, 1, t0.Add(-time.Second))
	assert.False(t, d.Allowed, "a clock one second back finds the bucket emptier")
	assert.Equal(t, time.Second+tick, d.RetryAfter)
	assert.Equal(t, tat, next)
}

// SlidingWindowDecide is exported for library callers, who may not check a
// request as the stores do: a cost above the limit, or counts and costs at
// the ends of int64, are a clean refusal, never a panic.
func TestSlidingWindowDecideOutOfRange(t *testing.T) {
	p := pol(limiter.SlidingWindow, 4, time.Minute)
	mid := t0.Add(30 * time.Second)
	for _, tc := range []struct {
		name            string
		prev, cur, cost int64
	}{
		{"cost over the limit, empty key", 0, 0, 5},
		{"cost over the limit, counted key", 2, 1, 5},
		{"huge cost", 1, 1, math.MaxInt64},
		{"huge current count", 0, math.MaxInt64, 1},
		{"huge previous count", math.MaxInt64, 0, 1},
		{"huge everything", math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{"negative counts", -1, math.MinInt64, 1},
		{"most negative cost", 0, 0, math.MinInt64},
	} {
		d := limiter.SlidingWindowDecide(p, tc.prev, tc.cur, tc.cost, mid)
		assert.False(t, d.Allowed && tc.cost > p.Limit, "%s: a cost over the limit never passes", tc.name)
		assert.True(t, d.Remaining >= 0 && d.Remaining <= p.Limit, "%s: remaining %d", tc.name, d.Remaining)
		assert.True(t, d.Count >= 0 && d.ResetAfter >= 0 && d.RetryAfter >= 0, "%s: %+v", tc.name, d)
		assert.Equal(t, !d.Allowed, d.RetryAfter > 0, "%s: a refusal says when to retry: %+v", tc.name, d)
	}
	d := limiter.SlidingWindowDecide(p, 2, 1, 5, mid)
	assert.Equal(t, limiter.Decision{Limit: 4, Count: 2, Remaining: 2, WindowStart: mid.Add(-time.Minute), ResetAfter: 90 * time.Second, RetryAfter: 30 * time.Second}, d,
		"a cost over the limit: refused, uncounted, retry when the window ends")
	assert.Equal(t, limiter.Decision{Limit: 0}, limiter.SlidingWindowDecide(limiter.Policy{Limit: 0, Window: time.Minute}, 0, 0, 1, mid), "an invalid policy refuses")
}

// FuzzSlidingWindowDecide feeds SlidingWindowDecide anything at all: it
// never panics, a cost over the limit never passes, and the numbers stay in
// range for a valid policy.
func FuzzSlidingWindowDecide(f *testing.F) {
	f.Add(int64(4), int64(60e9), int64(0), int64(0), int64(5), t0.UnixNano())
	f.Add(int64(4), int64(60e9), int64(2), int64(1), int64(math.MaxInt64), t0.UnixNano())
	f.Add(int64(limiter.MaxLimit), int64(limiter.MaxWindow), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64))
	f.Add(int64(3), int64(0), int64(0), int64(0), int64(1), int64(0))
	f.Fuzz(func(t *testing.T, limit, window, prev, cur, cost, now int64) {
		p := limiter.Policy{Name: "fuzz", Algorithm: limiter.SlidingWindow, Limit: limit, Window: time.Duration(window)}
		d := limiter.SlidingWindowDecide(p, prev, cur, cost, time.Unix(0, now))
		if d.Allowed && cost > limit {
			t.Fatalf("cost %d over limit %d allowed: %+v", cost, limit, d)
		}
		if p.Validate() != nil {
			return
		}
		switch {
		case d.Remaining < 0 || d.Remaining > limit || d.Count < 0:
			t.Fatalf("numbers out of range: %+v", d)
		case d.ResetAfter < 0 || d.RetryAfter < 0 || d.RetryAfter > 2*p.Window:
			t.Fatalf("durations out of range: %+v", d)
		case d.Allowed == (d.RetryAfter > 0):
			t.Fatalf("allowed=%v with retry after %s", d.Allowed, d.RetryAfter)
		}
	})
}
