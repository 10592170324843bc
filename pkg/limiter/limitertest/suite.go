// Package limitertest is the conformance suite that every limiter.Store runs,
// and a fake clock for tests.
//
// A store's test calls [Run] with a constructor:
//
//	func TestConformance(t *testing.T) {
//		limitertest.Run(t, func(t testing.TB) limiter.Store { return memstore.New() })
//	}
//
// The suite scripts time as data (it never sleeps), compares the store with
// simple reference models on random schedules (the seed is logged, and read
// from LIMITERTEST_SEED when set), checks the algorithms' invariants, counts
// concurrent admissions exactly, and checks keys, resets, pruning and bad
// input.
//
// # What the suite assumes about time
//
// Time moves mostly forward. It may jump backwards, but never by more than
// one window from the latest time the suite has used for the store: a store
// must keep enough state for that (the current and previous fixed windows,
// the previous window's count for the weighted sliding window, one window of
// events before the oldest one that still counts for the sliding log). What
// a store decides after a longer backward jump is its own business and is not
// tested. Prune is called with a time no later than any decision that
// follows it, and must not change any of those decisions.
package limitertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// base is the instant every case starts from: 2026-01-01T00:00:00Z, seed
// 000's example (docs/seeds.md).
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newStoreFunc is the constructor Run takes.
type newStoreFunc = func(t testing.TB) limiter.Store

// Run runs the conformance suite. newStore must return a fresh, empty store
// each call (the suite closes it). A store that cannot run an algorithm
// declares it (limiter.Capabilities.Unsupported, through limiter.Describer)
// and returns an error wrapping limiter.ErrUnsupported from Allow; the suite
// then skips that algorithm's cases for that store with a message. A store
// that refuses an algorithm it has not declared fails, as does one that
// declares a gap and runs the algorithm anyway.
//
// Subtests do not run in parallel with each other; each opens its own store.
// The whole suite makes about 30,000 decisions (about 15,000 under the race
// detector or with -short).
//
// Options describe a store that keeps a documented difference (see
// RepeatsRefusals); every store without one runs the suite whole.
func Run(t *testing.T, newStore func(t testing.TB) limiter.Store, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	t.Run("Script", func(t *testing.T) { testScripts(t, newStore, o) })
	t.Run("Model", func(t *testing.T) { testModels(t, newStore, o) })
	t.Run("Invariant", func(t *testing.T) { testInvariants(t, newStore) })
	t.Run("BoundaryBurst", func(t *testing.T) { testBoundaryBurst(t, newStore) })
	t.Run("FullBucket", func(t *testing.T) { testFullBucket(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, newStore) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, newStore) })
	t.Run("ResetUnits", func(t *testing.T) { testResetUnits(t, newStore) })
	t.Run("Prune", func(t *testing.T) { testPrune(t, newStore) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, newStore) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, newStore) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, newStore) })
	t.Run("AllowAnyCost", func(t *testing.T) { testAllowAnyCost(t, newStore) })
}

// Option describes what a store under the suite does differently, by
// design, from the stores the suite's models decide like.
type Option func(*options)

type options struct {
	repeatsRefusals bool
}

// RepeatsRefusals is for a cache of refusals (nearcache): it may answer a
// refused attempt with an earlier refusal of the same cost that still
// stands, its RetryAfter shortened by the time elapsed, rather than ask its
// store. Such an answer's verdict is checked exactly; its RetryAfter must be
// positive and no later than the store's own (a cache never makes a client
// wait longer than the store would, though the store's estimate may have
// moved later since: a sliding window's does as its windows roll); its
// Remaining must be under the refused cost; its Count, ResetAfter and
// WindowStart are those of the refusal it repeats, and are not checked.
// That is all the Script and Model cases relax; admissions, peeks and
// every other case are checked whole.
func RepeatsRefusals() Option { return func(o *options) { o.repeatsRefusals = true } }

// repeated reports whether o lets got, a refusal of cost where want
// refuses too, be a repeated one, whose counts are not the model's: only
// when the store refused the key before (refusedBefore), so a first refusal
// is always checked whole. It fails t when got's RetryAfter is not in
// (0, want's] or its remaining is not under cost.
func (o options) repeated(t testing.TB, refusedBefore bool, want, got view, cost int64, msgAndArgs ...any) bool {
	t.Helper()
	if !o.repeatsRefusals || !refusedBefore || cost == 0 || want.Allowed || got.Allowed {
		return false
	}
	require.Positive(t, got.RetryAfter, msgAndArgs...)
	require.LessOrEqual(t, got.RetryAfter, want.RetryAfter, msgAndArgs...)
	require.Less(t, got.Remaining, cost, msgAndArgs...)
	return true
}

// forEach runs f in one subtest per algorithm of algs, each with a fresh
// store that supports it.
func forEach(t *testing.T, newStore newStoreFunc, algs []limiter.Algorithm, f func(t *testing.T, s limiter.Store, alg limiter.Algorithm)) {
	t.Helper()
	for _, alg := range algs {
		t.Run(string(alg), func(t *testing.T) {
			f(t, open(t, newStore, alg), alg)
		})
	}
}

// exact lists the algorithms that are atomic: all but the unsafe demonstration.
var exact = []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket}

// open returns a fresh store, closed when t ends, after checking that it
// runs alg; it skips t when the store declares that it does not (and
// refuses it with ErrUnsupported).
func open(t *testing.T, newStore newStoreFunc, alg limiter.Algorithm) limiter.Store {
	t.Helper()
	s := newStore(t)
	require.NotNil(t, s, "newStore returned nil")
	t.Cleanup(func() { _ = s.Close() })
	probe := policy("limitertest-probe", alg, 1, time.Minute)
	k := limiter.Key{Subject: "probe"}
	_, err := s.Allow(context.Background(), probe, limiter.Request{Key: k, Cost: 1, Now: base})
	skip, err := supported(limiter.CapabilitiesOf(s), alg, err)
	if skip {
		t.Skipf("store declares it does not run %s", alg)
	}
	require.NoError(t, err, "probe of %s", alg)
	_, err = s.Reset(context.Background(), probe, k)
	require.NoError(t, err, "reset of the probe key")
	return s
}

// supported checks the store's answer err to a first attempt under alg
// against what it declares in caps: skip when alg is a declared gap that the
// store refuses with ErrUnsupported; otherwise an error when the store
// refuses an undeclared algorithm, runs a declared gap, or fails.
func supported(caps limiter.Capabilities, alg limiter.Algorithm, err error) (skip bool, _ error) {
	unsupported := errors.Is(err, limiter.ErrUnsupported)
	switch {
	case !caps.Supports(alg) && unsupported:
		return true, nil
	case !caps.Supports(alg):
		return false, fmt.Errorf("the store declares %s unsupported, but it answered %v instead of ErrUnsupported", alg, err)
	case unsupported:
		return false, fmt.Errorf("the store refuses %s without declaring the gap in limiter.Capabilities: %w", alg, err)
	}
	return false, err
}

// policy builds a policy.
func policy(name string, alg limiter.Algorithm, limit int64, window time.Duration) limiter.Policy {
	return limiter.Policy{Name: name, Algorithm: alg, Limit: limit, Window: window}
}

// allow makes one attempt at base+at and fails t on an error.
func allow(t testing.TB, s limiter.Store, p limiter.Policy, k limiter.Key, cost int64, at time.Time) limiter.Decision {
	t.Helper()
	d, err := s.Allow(context.Background(), p, limiter.Request{Key: k, Cost: cost, Now: at})
	require.NoError(t, err, "allow %s %+v cost %d at %s", p.Name, k, cost, at.Format(time.RFC3339Nano))
	return d
}

// peek reads k at at and fails t on an error.
func peek(t testing.TB, s limiter.Store, p limiter.Policy, k limiter.Key, at time.Time) limiter.Decision {
	t.Helper()
	d, err := s.Peek(context.Background(), p, k, at)
	require.NoError(t, err, "peek %s %+v at %s", p.Name, k, at.Format(time.RFC3339Nano))
	return d
}

// seed returns LIMITERTEST_SEED when set, else a seed from the clock; it is
// logged so that a failure can be replayed.
func seed(t testing.TB) uint64 {
	t.Helper()
	if v := os.Getenv("LIMITERTEST_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "LIMITERTEST_SEED")
		return n
	}
	return uint64(time.Now().UnixNano())
}

// replay is the hint printed with a failure of a random case.
func replay(s uint64) string {
	return fmt.Sprintf("replay with LIMITERTEST_SEED=%d", s)
}
