package limiter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestParseAlgorithm(t *testing.T) {
	for _, a := range limiter.Algorithms {
		got, err := limiter.ParseAlgorithm(string(a))
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	for _, bad := range []string{"", "Fixed_Window", "fixed-window", " fixed_window", "leaky_bucket"} {
		_, err := limiter.ParseAlgorithm(bad)
		assert.ErrorIs(t, err, limiter.ErrUnknownAlgorithm, "%q", bad)
	}
}

func TestPolicyValidate(t *testing.T) {
	ok := limiter.Policy{Name: "ping", Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Minute}
	with := func(f func(p *limiter.Policy)) limiter.Policy {
		p := ok
		f(&p)
		return p
	}
	for name, p := range map[string]limiter.Policy{
		"seed ping":          ok,
		"shortest window":    with(func(p *limiter.Policy) { p.Window = limiter.MinWindow }),
		"longest window":     with(func(p *limiter.Policy) { p.Window = limiter.MaxWindow }),
		"largest limit":      with(func(p *limiter.Policy) { p.Limit = limiter.MaxLimit }),
		"128-byte name":      with(func(p *limiter.Policy) { p.Name = strings.Repeat("n", 128) }),
		"1ns a token":        {Name: "b", Algorithm: limiter.TokenBucket, Limit: 1e9, Window: time.Second},
		"shadow":             with(func(p *limiter.Policy) { p.Shadow = true }),
		"unsafe on purpose":  with(func(p *limiter.Policy) { p.Algorithm = limiter.SlidingLogUnsafe }),
		"window of one hour": with(func(p *limiter.Policy) { p.Window = time.Hour }),
	} {
		assert.NoError(t, p.Validate(), name)
	}
	for _, tc := range []struct {
		p     limiter.Policy
		field string
	}{
		{with(func(p *limiter.Policy) { p.Name = "" }), "name"},
		{with(func(p *limiter.Policy) { p.Name = strings.Repeat("n", 129) }), "name"},
		{with(func(p *limiter.Policy) { p.Algorithm = "" }), "algorithm"},
		{with(func(p *limiter.Policy) { p.Algorithm = "FIXED_WINDOW" }), "algorithm"},
		{with(func(p *limiter.Policy) { p.Limit = 0 }), "limit"},
		{with(func(p *limiter.Policy) { p.Limit = -3 }), "limit"},
		{with(func(p *limiter.Policy) { p.Limit = limiter.MaxLimit + 1 }), "limit"},
		{with(func(p *limiter.Policy) { p.Window = 0 }), "window"},
		{with(func(p *limiter.Policy) { p.Window = -time.Minute }), "window"},
		{with(func(p *limiter.Policy) { p.Window = limiter.MinWindow - 1 }), "window"},
		{with(func(p *limiter.Policy) { p.Window = limiter.MaxWindow + time.Second }), "window"},
		{with(func(p *limiter.Policy) { p.Window = 90*time.Second + time.Millisecond }), "window"},
		{limiter.Policy{Name: "b", Algorithm: limiter.TokenBucket, Limit: 1e9 + 1, Window: time.Second}, "limit"},
	} {
		err := tc.p.Validate()
		require.ErrorIs(t, err, limiter.ErrInvalidPolicy, "%+v", tc.p)
		var pe *limiter.PolicyError
		require.True(t, errors.As(err, &pe), "%T", err)
		assert.Equal(t, tc.field, pe.Field, "%+v", tc.p)
		assert.Equal(t, tc.p.Name, pe.Policy)
		assert.True(t, strings.HasPrefix(err.Error(), "limiter: policy "), err.Error())
	}
	err := limiter.Policy{}.Validate()
	assert.Equal(t, "limiter: policy (unnamed): name: must not be empty", err.Error())
}

func TestKeyValidate(t *testing.T) {
	long := strings.Repeat("k", limiter.MaxKeyLen)
	for _, k := range []limiter.Key{{Subject: "a"}, {Subject: "a", Scope: "/ping"}, {Subject: long, Scope: long}} {
		assert.NoError(t, k.Validate(), "%+v", k)
	}
	for _, k := range []limiter.Key{{}, {Scope: "/ping"}, {Subject: long + "k"}, {Subject: "a", Scope: long + "k"}} {
		assert.ErrorIs(t, k.Validate(), limiter.ErrInvalidKey, "%d/%d bytes", len(k.Subject), len(k.Scope))
	}
}

func TestCheckRequest(t *testing.T) {
	p := limiter.Policy{Name: "p", Algorithm: limiter.SlidingLog, Limit: 10, Window: time.Minute}
	k := limiter.Key{Subject: "1"}
	for cost, want := range map[int64]error{1: nil, 10: nil, 0: limiter.ErrInvalidCost, -1: limiter.ErrInvalidCost, 11: limiter.ErrInvalidCost} {
		err := limiter.CheckRequest(p, limiter.Request{Key: k, Cost: cost})
		if want == nil {
			assert.NoError(t, err, "cost %d", cost)
		} else {
			assert.ErrorIs(t, err, want, "cost %d", cost)
		}
	}
	assert.ErrorIs(t, limiter.CheckRequest(limiter.Policy{}, limiter.Request{Key: k, Cost: 1}), limiter.ErrInvalidPolicy)
	assert.ErrorIs(t, limiter.CheckRequest(p, limiter.Request{Cost: 1}), limiter.ErrInvalidKey)
}

func TestSystemClockIsUTC(t *testing.T) {
	before := time.Now()
	now := limiter.SystemClock{}.Now()
	assert.Equal(t, time.UTC, now.Location())
	assert.False(t, now.Before(before.Truncate(time.Second)))
}

func TestWindowStart(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		now    time.Time
		window time.Duration
		want   time.Time
	}{
		// Seed 000's example (docs/seeds.md): 00:00:45 with a 60s window.
		{t0.Add(45 * time.Second), time.Minute, t0},
		{t0, time.Minute, t0},
		{t0.Add(time.Minute - 1), time.Minute, t0},
		{t0.Add(time.Minute), time.Minute, t0.Add(time.Minute)},
		{t0.Add(45 * time.Second).In(paris), time.Minute, t0},
		{t0.Add(90 * time.Minute), time.Hour, t0.Add(time.Hour)},
		// Before 1970 the start is still at or before now.
		{time.Unix(-1, 0), time.Minute, time.Unix(-60, 0)},
		{time.Unix(0, -1), time.Minute, time.Unix(-60, 0)},
		{time.Unix(-60, 0), time.Minute, time.Unix(-60, 0)},
		{time.Unix(-61, 0), time.Minute, time.Unix(-120, 0)},
		{time.Unix(0, 0), time.Minute, time.Unix(0, 0)},
	} {
		got := limiter.WindowStart(tc.now, tc.window)
		assert.True(t, tc.want.Equal(got), "WindowStart(%s, %s) = %s, want %s", tc.now, tc.window, got, tc.want)
		assert.Equal(t, time.UTC, got.Location())
	}
}

func TestLimiter(t *testing.T) {
	_, err := limiter.New(memstore.New(), limiter.Policy{Name: "bad"})
	require.ErrorIs(t, err, limiter.ErrInvalidPolicy)

	clock := limitertest.NewClock(t0.Add(45 * time.Second))
	p := limiter.Policy{Name: "ping", Algorithm: limiter.FixedWindow, Limit: 2, Window: time.Minute}
	l, err := limiter.New(memstore.New(), p, limiter.WithClock(clock))
	require.NoError(t, err)
	assert.Equal(t, p, l.Policy())
	assert.Equal(t, clock.Now(), l.Now())

	k := limiter.Key{Subject: "10.0.0.1"}
	ctx := t.Context()
	for i := range 2 {
		d, err := l.Allow(ctx, k)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "attempt %d", i)
	}
	d, err := l.Allow(ctx, k)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 15*time.Second, d.RetryAfter, "the clock's time is used")

	d, err = l.Peek(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, int64(3), d.Count)

	clock.Advance(15 * time.Second)
	d, err = l.Do(ctx, limiter.Request{Key: k}) // zero cost means 1, zero time the clock's
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(1), d.Count)
	assert.Equal(t, time.Minute, d.ResetAfter)

	// An explicit time wins over the clock: back in the full window.
	d, err = l.Do(ctx, limiter.Request{Key: k, Cost: 1, Now: t0.Add(50 * time.Second)})
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, int64(4), d.Count)

	_, err = l.Do(ctx, limiter.Request{Key: k, Cost: 3})
	assert.ErrorIs(t, err, limiter.ErrInvalidCost)

	other := limiter.Key{Subject: "10.0.0.1", Scope: "/status"}
	_, err = l.Allow(ctx, other)
	require.NoError(t, err)
	n, err := l.Reset(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, int64(5), n, "the units of two windows: 4 in the one before, 1 in the current one")
	d, err = l.Peek(ctx, other)
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Count, "reset of one key only")
	n, err = l.ResetSubject(ctx, "10.0.0.1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	d, err = l.Peek(ctx, other)
	require.NoError(t, err)
	assert.Equal(t, int64(0), d.Count)
}

func TestLimiterDefaultsToTheSystemClock(t *testing.T) {
	l, err := limiter.New(memstore.New(), limiter.Policy{Name: "p", Algorithm: limiter.TokenBucket, Limit: 1, Window: time.Hour})
	require.NoError(t, err)
	before := time.Now().Add(-time.Second)
	assert.True(t, l.Now().After(before))
	assert.Equal(t, time.UTC, l.Now().Location())
}

func TestFakeClock(t *testing.T) {
	c := limitertest.NewClock(t0.In(time.FixedZone("X", 3600)))
	assert.Equal(t, time.UTC, c.Now().Location())
	assert.True(t, t0.Equal(c.Now()))
	c.Advance(-time.Second)
	assert.True(t, t0.Add(-time.Second).Equal(c.Now()))
	c.Set(t0.Add(time.Hour))
	assert.True(t, t0.Add(time.Hour).Equal(c.Now()))
}
