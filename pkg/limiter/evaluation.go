package limiter

import (
	"context"
	"time"
)

// Evaluation applies Tollgate's rule for one request charged against
// several policies, in order, with the time read once. The caller drives
// it: it charges a policy, adds the outcome, and charges the next only
// while Add says the evaluation goes on. The rule:
//
//   - A shadow policy's refusal is counted and ignored: it never refuses
//     the request and is never shown.
//   - The first refusal by an enforcing policy refuses the request and
//     stops the evaluation: the policies after it are not charged. (A
//     caller that must charge every policy whatever the others answer, as
//     envoyproxy/ratelimit charges every descriptor of a request, goes on
//     anyway; the rest of the rule holds the same.)
//   - The answer shows one outcome (its rate-limit fields): the first
//     enforcing refusal, else the enforcing policy with the least
//     remaining, the first of equals; none when only shadows were charged.
//   - A refused request's Retry-After is the longest wait among the
//     enforcing refusals that a wait can lift (a Final refusal gives none).
//
// The service's decision layer, the httplimit middleware and the lab's
// whatif replay all decide through it: the decision layer drives it step
// by step (it does more for each policy), the others through
// [AllowInOrder]. The zero value is an evaluation with nothing added; it is
// a small value that allocates nothing.
type Evaluation struct {
	n       int           // outcomes added
	refused int           // 1 + index of the first enforcing refusal; 0: none
	shown   int           // 1 + index of the shown outcome; 0: none
	least   int64         // Remaining of the shown outcome
	wait    time.Duration // longest wait of the enforcing refusals a wait lifts
	lifted  bool          // wait is set
}

// Outcome is one policy's answer, as an Evaluation reads it.
type Outcome struct {
	// Shadow: the policy is a shadow, counted but never enforced.
	Shadow bool
	// Over: the policy refused (for a read that counts nothing: the key is
	// over its limit).
	Over bool
	// Final: no wait lifts the refusal (a cost above the limit, a limit of
	// zero), so it gives no Retry-After.
	Final bool
	// Remaining and RetryAfter are the decision's.
	Remaining  int64
	RetryAfter time.Duration
}

// OutcomeOf is the outcome of p's decision d: over when d was refused,
// never final (a store's refusal of a cost within the limit always lifts).
func OutcomeOf(p Policy, d Decision) Outcome {
	return Outcome{Shadow: p.Shadow, Over: !d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter}
}

// Add adds the outcome of the next policy and reports whether the
// evaluation goes on: false once an enforcing policy has refused.
func (e *Evaluation) Add(o Outcome) bool {
	e.n++
	switch {
	case o.Shadow:
	case o.Over:
		if e.refused == 0 {
			e.refused, e.shown = e.n, e.n
		}
		if !o.Final {
			e.wait, e.lifted = max(e.wait, o.RetryAfter), true
		}
	case e.refused == 0 && (e.shown == 0 || o.Remaining < e.least):
		e.shown, e.least = e.n, o.Remaining
	}
	return e.refused == 0
}

// Refused returns the index of the first enforcing refusal; -1 when the
// request passes.
func (e *Evaluation) Refused() int { return e.refused - 1 }

// Shown returns the index of the outcome the answer shows; -1 when none
// (only shadows were charged).
func (e *Evaluation) Shown() int { return e.shown - 1 }

// RetryAfter returns how long a refused request should wait; ok is false
// when the request passes or no wait lifts its refusals.
func (e *Evaluation) RetryAfter() (wait time.Duration, ok bool) { return e.wait, e.lifted }

// AllowInOrder charges r against ps in order on s by [Evaluation]'s rule,
// appending each policy's decision to ds: it stops at the first enforcing
// refusal. It returns the decisions and their evaluation. An error is the
// store's, unwrapped; ds then holds the decisions made before it, so
// ps[len(ds)] names the policy the store could not decide.
func AllowInOrder(ctx context.Context, s Store, ps []Policy, r Request, ds []Decision) ([]Decision, Evaluation, error) {
	var e Evaluation
	for _, p := range ps {
		d, err := s.Allow(ctx, p, r)
		if err != nil {
			return ds, e, err
		}
		ds = append(ds, d)
		if !e.Add(OutcomeOf(p, d)) {
			break
		}
	}
	return ds, e, nil
}
