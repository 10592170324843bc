package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// TestEvaluation walks the rule for several policies through outcomes the
// stores cannot all produce (a Final refusal, several refusals of a caller
// that charges every policy), which limitertest's cases, run by every user
// of the rule, do not reach.
func TestEvaluation(t *testing.T) {
	over := func(remaining int64, wait time.Duration) limiter.Outcome {
		return limiter.Outcome{Over: true, Remaining: remaining, RetryAfter: wait}
	}
	pass := func(remaining int64) limiter.Outcome { return limiter.Outcome{Remaining: remaining} }
	shadow := func(o limiter.Outcome) limiter.Outcome { o.Shadow = true; return o }
	final := func(o limiter.Outcome) limiter.Outcome { o.Final = true; return o }
	cases := []struct {
		name     string
		outcomes []limiter.Outcome
		goesOn   []bool // what Add answered, for each outcome
		refused  int
		shown    int
		wait     time.Duration
		lifted   bool
	}{
		{"nothing added", nil, nil, -1, -1, 0, false},
		{"least remaining, the first of equals", []limiter.Outcome{pass(5), pass(2), pass(2), pass(3)},
			[]bool{true, true, true, true}, -1, 1, 0, false},
		{"a shadow is never shown, its refusal never refuses", []limiter.Outcome{shadow(over(0, time.Hour)), pass(4), shadow(pass(1))},
			[]bool{true, true, true}, -1, 1, 0, false},
		{"only shadows: nothing shown", []limiter.Outcome{shadow(pass(1)), shadow(over(0, time.Second))},
			[]bool{true, true}, -1, -1, 0, false},
		{"the refusal is shown over less remaining", []limiter.Outcome{pass(0), over(1, 5*time.Second)},
			[]bool{true, false}, 1, 1, 5 * time.Second, true},
		{"charging on after a refusal: the first refusal is shown, the longest wait taken", []limiter.Outcome{pass(0), over(2, 5*time.Second), over(0, 30*time.Second), pass(0), shadow(over(0, time.Hour))},
			[]bool{true, false, false, false, false}, 1, 1, 30 * time.Second, true},
		{"a final refusal gives no wait", []limiter.Outcome{final(over(0, time.Minute))},
			[]bool{false}, 0, 0, 0, false},
		{"a final refusal's wait is not the longest", []limiter.Outcome{final(over(0, time.Hour)), over(0, 7*time.Second)},
			[]bool{false, false}, 0, 0, 7 * time.Second, true},
		{"a refusal that lifts at once", []limiter.Outcome{over(0, 0)},
			[]bool{false}, 0, 0, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e limiter.Evaluation
			var goesOn []bool
			for _, o := range c.outcomes {
				goesOn = append(goesOn, e.Add(o))
			}
			assert.Equal(t, c.goesOn, goesOn)
			assert.Equal(t, c.refused, e.Refused())
			assert.Equal(t, c.shown, e.Shown())
			wait, lifted := e.RetryAfter()
			assert.Equal(t, c.wait, wait)
			assert.Equal(t, c.lifted, lifted)
		})
	}
}

// TestOutcomeOf: a store's decision as the rule reads it.
func TestOutcomeOf(t *testing.T) {
	p := limiter.Policy{Name: "p", Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Minute, Shadow: true}
	d := limiter.Decision{Allowed: false, Limit: 3, Remaining: 0, Count: 4, RetryAfter: 9 * time.Second, ResetAfter: 9 * time.Second}
	assert.Equal(t, limiter.Outcome{Shadow: true, Over: true, RetryAfter: 9 * time.Second}, limiter.OutcomeOf(p, d))
	p.Shadow = false
	d = limiter.Decision{Allowed: true, Limit: 3, Remaining: 2, Count: 1, ResetAfter: 9 * time.Second}
	assert.Equal(t, limiter.Outcome{Remaining: 2}, limiter.OutcomeOf(p, d))
}

// TestEvaluationAllocatesNothing: the rule costs no allocation per request.
func TestEvaluationAllocatesNothing(t *testing.T) {
	outcomes := []limiter.Outcome{{Remaining: 3}, {Shadow: true, Over: true}, {Over: true, RetryAfter: time.Second}}
	allocs := testing.AllocsPerRun(100, func() {
		var e limiter.Evaluation
		for _, o := range outcomes {
			if !e.Add(o) {
				break
			}
		}
		_, _ = e.RetryAfter()
	})
	assert.Zero(t, allocs)
}

// TestAllowInOrder: the loop of the callers that do nothing more for each
// policy stops at the first enforcing refusal, and an error names its policy
// by the decisions made before it.
func TestAllowInOrder(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ps := []limiter.Policy{
		{Name: "trial", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Minute, Shadow: true},
		{Name: "ping", Algorithm: limiter.FixedWindow, Limit: 2, Window: time.Minute},
		{Name: "day", Algorithm: limiter.FixedWindow, Limit: 100, Window: 24 * time.Hour},
	}
	r := limiter.Request{Key: limiter.Key{Subject: "k"}, Cost: 1, Now: at}
	for i, want := range []struct{ decisions, refused int }{{3, -1}, {3, -1}, {2, 1}} {
		ds, e, err := limiter.AllowInOrder(ctx, s, ps, r, nil)
		require.NoError(t, err)
		assert.Len(t, ds, want.decisions, "request %d", i)
		assert.Equal(t, want.refused, e.Refused(), "request %d", i)
	}
	d, err := s.Peek(ctx, ps[2], r.Key, at)
	require.NoError(t, err)
	assert.EqualValues(t, 2, d.Count, "the refused request did not charge the day")

	bad := []limiter.Policy{ps[2], {Name: "bad"}}
	ds, _, err := limiter.AllowInOrder(ctx, s, bad, r, nil)
	require.ErrorIs(t, err, limiter.ErrInvalidPolicy)
	assert.Equal(t, "bad", bad[len(ds)].Name)
}
