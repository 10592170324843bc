package decide

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
)

// t0 is 15 seconds before a minute ends.
var t0 = time.Date(2026, 3, 1, 12, 0, 45, 0, time.UTC)

// fixture is a Decider on a real store with a fake clock, its metrics on a
// registry of its own.
type fixture struct {
	dec     *Decider
	store   limiter.Store
	clock   *limitertest.Clock
	metrics *Metrics
	offend  *Offenders
}

// newFixture returns a Decider on store, labelled name in the metrics.
func newFixture(t *testing.T, store limiter.Store, name string) *fixture {
	t.Helper()
	t.Cleanup(func() { _ = store.Close() })
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	o, err := NewOffenders(0, true, nil)
	require.NoError(t, err)
	clock := limitertest.NewClock(t0)
	dec, err := New(Options{Store: store, StoreName: name, Clock: clock, Metrics: m, Offenders: o})
	require.NoError(t, err)
	return &fixture{dec: dec, store: store, clock: clock, metrics: m, offend: o}
}

func newMemory(t *testing.T) *fixture { return newFixture(t, memstore.New(), "memory") }

func newSQLite(t *testing.T) *fixture {
	t.Helper()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "decide.db"))
	require.NoError(t, err)
	return newFixture(t, s, "sqlite")
}

// decisions returns tollgate_decisions_total for policy and result.
func (f *fixture) decisions(policy, result string) float64 {
	return testutil.ToFloat64(f.metrics.decisions.WithLabelValues(policy, result))
}

// count returns the units k holds under p, read without counting.
func (f *fixture) count(t *testing.T, p limiter.Policy, k limiter.Key) int64 {
	t.Helper()
	d, err := f.store.Peek(context.Background(), p, k, f.clock.Now())
	require.NoError(t, err)
	return d.Count
}

func fixed(name string, limit int64) limiter.Policy {
	return limiter.Policy{Name: name, Algorithm: limiter.FixedWindow, Limit: limit, Window: time.Minute}
}

func shadow(p limiter.Policy) limiter.Policy { p.Shadow = true; return p }

// overs lists each result's Over.
func overs(v Verdict) []bool {
	var o []bool
	for _, r := range v.Results {
		o = append(o, r.Over)
	}
	return o
}

// Route evaluates in order and stops at the first enforcing refusal: the
// policies after it are not charged. A shadow refusal is counted and
// ignored; only enforced refusals are offenders.
func TestRouteStopsAtTheFirstEnforcingRefusal(t *testing.T) {
	f := newMemory(t)
	s, a, b := shadow(fixed("s", 1)), fixed("a", 2), fixed("b", 5)
	plan := f.metrics.NewPlan([]limiter.Policy{s, a, b})
	k := limiter.Key{Subject: "client"}
	steps := []struct {
		over    []bool
		refused int
	}{
		{[]bool{false, false, false}, -1},
		{[]bool{true, false, false}, -1}, // the shadow refuses: let through
		{[]bool{true, true}, 1},          // a refuses: b is not asked
		{[]bool{true, true}, 1},
	}
	for i, step := range steps {
		v, err := f.dec.Route(context.Background(), plan, k, 1, "")
		require.NoError(t, err, "request %d", i+1)
		assert.Equal(t, step.over, overs(v), "request %d", i+1)
		assert.Equal(t, step.refused, v.Refused, "request %d", i+1)
		assert.Equal(t, step.refused < 0, v.Allowed(), "request %d", i+1)
	}
	assert.Equal(t, int64(2), f.count(t, b, k), "b charged by the two requests that passed a")
	assert.Equal(t, int64(4), f.count(t, a, k), "a counts every attempt (fixed_window)")

	want := map[[2]string]float64{
		{"s", ResultAllowed}: 1, {"s", ResultShadowLimited}: 3, {"s", ResultLimited}: 0,
		{"a", ResultAllowed}: 2, {"a", ResultLimited}: 2,
		{"b", ResultAllowed}: 2, {"b", ResultLimited}: 0,
	}
	for pr, n := range want {
		assert.Equal(t, n, f.decisions(pr[0], pr[1]), "%s %s", pr[0], pr[1])
	}
	report := f.offend.Report(f.clock.Now())
	require.Len(t, report.Entries, 1, "only a's enforced refusals: %+v", report)
	assert.Equal(t, offenders.Item{Policy: "a", Key: "client"}, report.Entries[0].Item)
	assert.Equal(t, uint64(2), report.Entries[0].Count)
}

// Each charges every check whatever the others answer (Envoy's rule for
// the descriptors of one request); Refused is the first enforcing refusal.
func TestEachChargesEveryCheck(t *testing.T) {
	f := newMemory(t)
	a, s, b := fixed("a", 1), shadow(fixed("s", 1)), fixed("b", 5)
	ka, ks, kb := limiter.Key{Subject: "x"}, limiter.Key{Subject: "y"}, limiter.Key{Subject: "z"}
	checks := []Check{{Policy: s, Key: ks, Cost: 1}, {Policy: a, Key: ka, Cost: 1}, {Policy: b, Key: kb, Cost: 1}}
	for i, want := range []struct {
		over    []bool
		refused int
	}{
		{[]bool{false, false, false}, -1},
		{[]bool{true, true, false}, 1}, // the shadow is not the refusal
		{[]bool{true, true, false}, 1},
	} {
		v, err := f.dec.Each(context.Background(), checks, false)
		require.NoError(t, err, "request %d", i+1)
		assert.Equal(t, want.over, overs(v), "request %d", i+1)
		assert.Equal(t, want.refused, v.Refused, "request %d", i+1)
		assert.Equal(t, Header{RetryAfter: -1}, v.Header, "no header asked for")
	}
	assert.Equal(t, int64(3), f.count(t, b, kb), "b charged on every request, refused or not")
	assert.Equal(t, 3.0, f.decisions("b", ResultAllowed))
	assert.Equal(t, 2.0, f.decisions("a", ResultLimited))
	assert.Equal(t, 2.0, f.decisions("s", ResultShadowLimited))
}

// A check's mode says how the store is asked: Read counts nothing (with
// cost 0, fixed_window is over only past its limit; a cost above the limit
// is over and final), Refuse does not ask the store at all, Charge with a
// cost above a fixed_window limit is refused, final, and counted.
func TestCheckModes(t *testing.T) {
	f := newMemory(t)
	p := fixed("p", 2)
	k := limiter.Key{Subject: "k"}
	each := func(c Check) Result {
		t.Helper()
		v, err := f.dec.Each(context.Background(), []Check{c}, false)
		require.NoError(t, err)
		require.Len(t, v.Results, 1)
		return v.Results[0]
	}

	r := each(Check{Policy: p, Key: k, Mode: Read})
	assert.False(t, r.Over, "nothing counted yet")
	assert.Equal(t, int64(0), f.count(t, p, k), "a read counts nothing")

	for range 2 {
		require.False(t, each(Check{Policy: p, Key: k, Cost: 1}).Over)
	}
	r = each(Check{Policy: p, Key: k, Mode: Read})
	assert.False(t, r.Over, "at the limit, not past it: 0 hits pass, as envoyproxy/ratelimit")
	assert.Equal(t, int64(2), r.Count)

	r = each(Check{Policy: p, Key: k, Cost: 3, Mode: Read})
	assert.True(t, r.Over, "a cost above the limit")
	assert.True(t, r.Final, "no wait lets it pass")
	assert.Equal(t, time.Duration(0), r.RetryAfter)
	assert.Equal(t, int64(2), f.count(t, p, k))

	r = each(Check{Policy: p, Key: k, Cost: 5})
	assert.True(t, r.Over)
	assert.True(t, r.Final)
	assert.Equal(t, int64(7), f.count(t, p, k), "fixed_window counts a charge above its limit")
	r = each(Check{Policy: p, Key: k, Mode: Read})
	assert.True(t, r.Over, "past the limit: 0 hits are over")

	fresh := limiter.Key{Subject: "fresh"}
	r = each(Check{Policy: p, Key: fresh, Cost: 1, Mode: Refuse})
	assert.True(t, r.Over)
	assert.True(t, r.Final)
	assert.Equal(t, 15*time.Second, r.ResetAfter, "the end of the current window")
	assert.Equal(t, t0.Truncate(time.Minute), r.WindowStart)
	assert.Equal(t, int64(0), f.count(t, p, fresh), "the store was not asked")
	assert.Equal(t, 4.0, f.decisions("p", ResultAllowed), "two reads and two charges")
	assert.Equal(t, 4.0, f.decisions("p", ResultLimited), "the read above the limit, the charge, the read past it, the refusal")
}

// The header shows the first enforcing refusal, else the enforcing policy
// with the least remaining (the first of equals); shadows are never shown
// nor announced; Retry-After is the longest wait among the refusals a wait
// can lift.
func TestHeaderChoice(t *testing.T) {
	f := newMemory(t)
	wide, narrow, s := fixed("wide", 10), fixed("narrow", 3), shadow(fixed("s", 1))
	k := limiter.Key{Subject: "k"}
	plan := f.metrics.NewPlan([]limiter.Policy{wide, s, narrow})
	v, err := f.dec.Route(context.Background(), plan, k, 1, "")
	require.NoError(t, err)
	assert.Equal(t, `"wide";q=10;w=60, "narrow";q=3;w=60`, v.Header.Policy, "the shadow is not announced")
	assert.Equal(t, `"narrow";r=2;t=15`, v.Header.RateLimit, "the least remaining")
	assert.Equal(t, int64(-1), v.Header.RetryAfter, "allowed")

	for range 3 {
		v, err = f.dec.Route(context.Background(), plan, k, 1, "")
		require.NoError(t, err)
	}
	require.Equal(t, 2, v.Refused, "narrow refuses the fourth")
	assert.Equal(t, `"narrow";r=0;t=15`, v.Header.RateLimit, "the refusal")
	assert.Equal(t, int64(15), v.Header.RetryAfter, "until narrow's window ends")

	// Each: equal remaining shows the first; the refusal wins over it.
	first, second := fixed("first", 5), fixed("second", 5)
	checks := []Check{{Policy: first, Key: k, Cost: 1}, {Policy: second, Key: k, Cost: 1}, {Policy: s, Key: k, Cost: 1}}
	v, err = f.dec.Each(context.Background(), checks, true)
	require.NoError(t, err)
	assert.Equal(t, `"first";r=4;t=15`, v.Header.RateLimit, "the first of equals; the shadow's refusal is not shown")
	assert.Equal(t, int64(-1), v.Header.RetryAfter)
	checks[1].Mode = Refuse
	v, err = f.dec.Each(context.Background(), checks, true)
	require.NoError(t, err)
	assert.Equal(t, `"second";r=0;t=15`, v.Header.RateLimit)
	assert.Equal(t, int64(-1), v.Header.RetryAfter, "a final refusal: no wait lifts it")

	v, err = f.dec.Route(context.Background(), f.metrics.NewPlan([]limiter.Policy{s}), k, 1, "")
	require.NoError(t, err)
	assert.Equal(t, Header{RetryAfter: -1}, v.Header, "all shadows: no field")
}

// A store error is counted once, as a store error, and no decision is; a
// caller that went away is not counted at all; a deadline that ran out is
// the store's failure. Ping fails once decisions fail too often, and
// recovers when the failures leave the window.
func TestFailureCounting(t *testing.T) {
	t.Run("store error", func(t *testing.T) {
		f := newMemory(t)
		p := fixed("p", 5)
		plan := f.metrics.NewPlan([]limiter.Policy{p})
		bad := limiter.Key{} // memstore refuses an empty subject; its Ping still answers
		for i := range healthMinFailures {
			require.NoError(t, f.dec.Ping(context.Background()), "after %d failures", i)
			_, err := f.dec.Route(context.Background(), plan, bad, 1, "")
			require.ErrorIs(t, err, limiter.ErrInvalidKey)
		}
		assert.Equal(t, float64(healthMinFailures), testutil.ToFloat64(f.metrics.storeErrors.WithLabelValues("memory")))
		assert.Equal(t, 0.0, f.decisions("p", ResultAllowed)+f.decisions("p", ResultLimited))
		require.Error(t, f.dec.Ping(context.Background()), "5 of 5 calls failed")

		f.clock.Advance(healthWindow * time.Second)
		assert.NoError(t, f.dec.Ping(context.Background()), "the failures left the window")
		_, err := f.dec.Each(context.Background(), []Check{{Policy: p, Key: bad, Cost: 1}}, false)
		require.ErrorIs(t, err, limiter.ErrInvalidKey)
		_, err = f.dec.Peek(context.Background(), p, bad)
		require.ErrorIs(t, err, limiter.ErrInvalidKey)
		assert.Equal(t, float64(healthMinFailures+2), testutil.ToFloat64(f.metrics.storeErrors.WithLabelValues("memory")), "Each and Peek count too")
		assert.Equal(t, 0.0, testutil.ToFloat64(f.metrics.overloaded))

		require.NoError(t, f.store.Close())
		require.ErrorIs(t, f.dec.Ping(context.Background()), limiter.ErrClosed)
		assert.Equal(t, float64(healthMinFailures+3), testutil.ToFloat64(f.metrics.storeErrors.WithLabelValues("memory")), "a failed ping counts")
	})
	t.Run("cancelled and expired", func(t *testing.T) {
		f := newSQLite(t)
		p := fixed("p", 5)
		plan := f.metrics.NewPlan([]limiter.Policy{p})
		k := limiter.Key{Subject: "k"}
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		for range healthMinFailures {
			_, err := f.dec.Route(gone, plan, k, 1, "")
			require.ErrorIs(t, err, context.Canceled)
		}
		errs := f.metrics.storeErrors.WithLabelValues("sqlite")
		assert.Equal(t, 0.0, testutil.ToFloat64(errs), "a caller gone says nothing of the store")
		assert.NoError(t, f.dec.Ping(context.Background()), "nor of its health")
		assert.Equal(t, int64(0), f.count(t, p, k))

		expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
		defer cancel()
		_, err := f.dec.Route(expired, plan, k, 1, "")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1.0, testutil.ToFloat64(errs), "a deadline that ran out is a failure")
	})
}

// Reset forgets a key under every policy given and sums their units; with
// scope false, every scope of the subject.
func TestReset(t *testing.T) {
	f := newMemory(t)
	a, b := fixed("a", 5), fixed("b", 5)
	plan := f.metrics.NewPlan([]limiter.Policy{a, b})
	for _, k := range []limiter.Key{{Subject: "u", Scope: "1"}, {Subject: "u", Scope: "2"}} {
		_, err := f.dec.Route(context.Background(), plan, k, 2, "")
		require.NoError(t, err)
	}
	n, err := f.dec.Reset(context.Background(), plan.Policies(), limiter.Key{Subject: "u", Scope: "1"}, true)
	require.NoError(t, err)
	assert.Equal(t, int64(4), n, "2 units under each of a and b")
	n, err = f.dec.Reset(context.Background(), plan.Policies(), limiter.Key{Subject: "u"}, false)
	require.NoError(t, err)
	assert.Equal(t, int64(4), n, "scope 2 is what is left")
	assert.Equal(t, int64(0), f.count(t, a, limiter.Key{Subject: "u", Scope: "2"}))
}

// Without offenders nothing is recorded and no client is named: the access
// log's client field is empty rather than a panic (httpapi's clientHash).
func TestNilOffendersNameNoClient(t *testing.T) {
	var o *Offenders
	assert.Equal(t, "", o.Hash("203.0.113.7"))
}
