// Package decide is the service's one decision layer: it evaluates the
// policies of one request against the store, in order, with shadow
// policies counted but never enforced, counts every decision and store
// call in the metrics, records enforced refusals among the offenders, and
// works out the draft-10 rate-limit header values. The HTTP routes, POST
// /json and the gRPC server all decide through it; transports only
// translate their request into checks and the Verdict into their answer.
package decide

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

// Options configures New. Every field but StoreName and Offenders is
// required.
type Options struct {
	// Store decides; every store call of the service goes through it.
	Store limiter.Store
	// StoreName labels the store metrics ("sqlite", "memory", "redis").
	StoreName string
	// Clock is read once per request.
	Clock limiter.Clock
	// Metrics count decisions and store calls.
	Metrics *Metrics
	// Offenders records every enforced refusal; nil records nothing.
	Offenders *Offenders
	// Budget bounds the time one request's decisions may take, waiting
	// for a turn at the store included (0: no bound). A store call that
	// could not even be sent within it fails with limiter.ErrOverloaded:
	// the request is shed.
	Budget time.Duration
	// Tracer traces each policy's decision; nil traces nothing.
	Tracer Tracer
}

// Tracer traces the decisions of traced requests (internal/telemetry
// makes a span of each). The decision layer knows nothing more of
// tracing: with a nil Tracer it costs nothing.
type Tracer interface {
	// Decision is called before c is decided with the request's context.
	// It returns the context to decide with and end, to be called with the
	// outcome (err: the store could not decide), or a nil end when it
	// traces nothing of this request.
	Decision(ctx context.Context, c Check) (context.Context, func(Result, error))
}

// Decider decides requests on one store. It is immutable and safe for
// concurrent use.
type Decider struct {
	store     limiter.Store
	clock     limiter.Clock
	metrics   *Metrics
	offenders *Offenders
	budget    time.Duration
	tracer    Tracer
	storeErr  prometheus.Counter
	storeTime prometheus.Observer
}

// New returns a Decider.
func New(o Options) (*Decider, error) {
	if o.Store == nil || o.Clock == nil || o.Metrics == nil {
		return nil, errors.New("decide: options need a store, a clock and metrics")
	}
	return &Decider{
		store:     o.Store,
		clock:     o.Clock,
		metrics:   o.Metrics,
		offenders: o.Offenders,
		budget:    o.Budget,
		tracer:    o.Tracer,
		storeErr:  o.Metrics.storeErrors.WithLabelValues(o.StoreName),
		storeTime: o.Metrics.duration.WithLabelValues(o.StoreName),
	}, nil
}

// Now reads the clock.
func (d *Decider) Now() time.Time { return d.clock.Now() }

// Offenders returns the refusal tracker (nil when none).
func (d *Decider) Offenders() *Offenders { return d.offenders }

// Plan is a list of policies evaluated in order for one kind of request
// (a route), resolved once when a configuration is loaded: its metrics
// children, its RateLimit-Policy value and the policy that carries the
// audit endpoint. It is immutable.
type Plan struct {
	policies []limiter.Policy
	counters []counters
	header   string // RateLimit-Policy; empty when all are shadows
	audit    int    // the policy whose Request carries the audit endpoint
}

// NewPlan resolves ps. The audit row goes with the last enforcing policy:
// evaluation stops at the first enforcing refusal, so that policy allows
// only when every enforcing policy has allowed.
func (m *Metrics) NewPlan(ps []limiter.Policy) *Plan {
	p := &Plan{policies: ps, header: httplimit.PolicyHeader(ps), audit: len(ps) - 1}
	for _, q := range ps {
		p.counters = append(p.counters, m.countersOf(q))
	}
	for i := len(ps) - 1; i >= 0; i-- {
		if !ps[i].Shadow {
			p.audit = i
			break
		}
	}
	return p
}

// Policies returns the plan's policies in evaluation order; do not modify.
func (p *Plan) Policies() []limiter.Policy { return p.policies }

// Mode says how a Check asks the store.
type Mode uint8

const (
	// Charge asks Allow: Cost is counted when allowed. A fixed_window Cost
	// above the limit is refused, final, and counted all the same (see
	// limiter.AllowAnyCost).
	Charge Mode = iota
	// Read asks Peek and counts nothing. With Cost 0 it checks the state:
	// over when the state refuses (for fixed_window: when the count is past
	// the limit, as envoyproxy/ratelimit's check with 0 hits). With a Cost above the policy's limit,
	// which no wait lets pass, it is over and final. RetryAfter is dropped.
	Read
	// Refuse refuses without asking the store (a limit of zero): over and
	// final, resetting at the end of the current window.
	Refuse
)

// Check is one policy's part of a request.
type Check struct {
	Policy limiter.Policy
	Key    limiter.Key
	Cost   int64
	Audit  string // endpoint for the store's audit row; empty: none
	Mode   Mode
}

// Result is one check's outcome.
type Result struct {
	limiter.Decision
	// Over: refused (shadow refusals included).
	Over bool
	// Final: no wait makes it pass, so it gives no Retry-After.
	Final bool
}

// outcome is r as limiter.Evaluation reads it, for a check of p.
func (r Result) outcome(p limiter.Policy) limiter.Outcome {
	return limiter.Outcome{Shadow: p.Shadow, Over: r.Over, Final: r.Final, Remaining: r.Remaining, RetryAfter: r.RetryAfter}
}

// Verdict is the outcome of one request.
type Verdict struct {
	// Results holds one Result per evaluated check, in order.
	Results []Result
	// Refused is the index of the first enforcing refusal; -1 when the
	// request passes.
	Refused int
	// Header holds the rate-limit header values.
	Header Header
}

// Allowed reports whether no enforcing policy refused.
func (v *Verdict) Allowed() bool { return v.Refused < 0 }

// Route evaluates plan's policies in order for key with cost, with the time
// read once, by the library's rule (limiter.Evaluation): the first refusal
// by an enforcing policy stops the evaluation, so later policies are not
// charged; shadow refusals are counted and ignored. audit goes to the store
// with the plan's audit policy. An error means the store could not decide;
// it is counted.
func (d *Decider) Route(ctx context.Context, plan *Plan, key limiter.Key, cost int64, audit string) (Verdict, error) {
	ctx, cancel := d.withBudget(ctx)
	defer cancel()
	now := d.clock.Now()
	v := Verdict{Results: make([]Result, 0, len(plan.policies)), Refused: -1}
	var e limiter.Evaluation
	for i, p := range plan.policies {
		c := Check{Policy: p, Key: key, Cost: cost}
		if i == plan.audit {
			c.Audit = audit
		}
		r, err := d.decide(ctx, c, &plan.counters[i], now)
		if err != nil {
			return v, err
		}
		v.Results = append(v.Results, r)
		if !e.Add(r.outcome(p)) {
			break
		}
	}
	v.Refused = e.Refused()
	v.Header = header(plan.header, plan.policies, v.Results, &e)
	return v, nil
}

// Each evaluates every check, with the time read once: all of them are
// counted, whatever the others answer (envoyproxy/ratelimit's rule for the
// descriptors of one request). The rest is limiter.Evaluation's rule:
// Refused is the first enforcing refusal, which the header shows. The
// verdict's Header is filled only when withHeader is true (building it
// costs a few strings per call; a caller that sends no header fields asks
// for none). An error means the store could not decide; it is counted.
func (d *Decider) Each(ctx context.Context, checks []Check, withHeader bool) (Verdict, error) {
	ctx, cancel := d.withBudget(ctx)
	defer cancel()
	now := d.clock.Now()
	v := Verdict{Results: make([]Result, 0, len(checks)), Refused: -1, Header: Header{RetryAfter: -1}}
	var e limiter.Evaluation
	for _, c := range checks {
		r, err := d.decide(ctx, c, nil, now)
		if err != nil {
			return v, err
		}
		v.Results = append(v.Results, r)
		e.Add(r.outcome(c.Policy)) // every check is charged, whatever it answers
	}
	v.Refused = e.Refused()
	if withHeader {
		ps := make([]limiter.Policy, len(checks))
		for i, c := range checks {
			ps[i] = c.Policy
		}
		v.Header = header(httplimit.PolicyHeader(ps), ps, v.Results, &e)
	}
	return v, nil
}

// decide runs one check at now (see check), traced when the Decider has
// a Tracer.
func (d *Decider) decide(ctx context.Context, c Check, pc *counters, now time.Time) (Result, error) {
	if d.tracer == nil {
		return d.check(ctx, c, pc, now)
	}
	ctx, end := d.tracer.Decision(ctx, c)
	r, err := d.check(ctx, c, pc, now)
	if end != nil {
		end(r, err)
	}
	return r, err
}

// check runs one check at now: the store call and its timing, the
// decision's count (pc: the policy's counters when resolved in advance) and,
// for an enforced refusal, the offender.
func (d *Decider) check(ctx context.Context, c Check, pc *counters, now time.Time) (Result, error) {
	var r Result
	p := c.Policy
	switch c.Mode {
	case Refuse:
		start := limiter.WindowStart(now, p.Window)
		r = Result{Decision: limiter.Decision{WindowStart: start, ResetAfter: start.Add(p.Window).Sub(now)}, Over: true, Final: true}
	default:
		var err error
		begin := time.Now()
		if c.Mode == Read {
			r.Decision, err = d.store.Peek(ctx, p, c.Key, now)
			r.Over = c.Cost > 0 || !r.Allowed
			if c.Cost == 0 && p.Algorithm == limiter.FixedWindow {
				// As envoyproxy/ratelimit: adding 0 hits is over only
				// past the limit, not at it.
				r.Over = r.Count > p.Limit
			}
			r.Final = c.Cost > 0
			r.RetryAfter = 0
		} else {
			r.Decision, err = limiter.AllowAnyCost(ctx, d.store, p, limiter.Request{Key: c.Key, Cost: c.Cost, Now: now, Audit: c.Audit})
			r.Over = !r.Allowed
			r.Final = c.Cost > p.Limit
		}
		d.storeTime.Observe(time.Since(begin).Seconds())
		if err == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, limiter.ErrOverloaded) {
			d.metrics.health.record(now, err) // a shed request or a client gone says nothing of the store
		}
		if err != nil {
			return r, d.failed(err)
		}
	}
	d.metrics.count(pc, p, r.Over)
	if r.Over && !p.Shadow {
		d.offenders.Record(now, p.Name, c.Key.Subject)
	}
	return r, nil
}

// header works out the header values of results (the first len(results)
// of ps), evaluated by e, with policyHeader as RateLimit-Policy: the
// RateLimit field of the outcome e shows and e's Retry-After (see
// limiter.Evaluation).
func header(policyHeader string, ps []limiter.Policy, results []Result, e *limiter.Evaluation) Header {
	h := Header{Fields: httplimit.Fields{Policy: policyHeader}, RetryAfter: -1}
	shown := e.Shown()
	if policyHeader == "" || shown < 0 {
		return h
	}
	h.Fields = httplimit.NewFields(policyHeader, ps[shown], results[shown].Decision)
	if wait, ok := e.RetryAfter(); ok {
		h.RetryAfter = httplimit.RetryAfterSeconds(wait)
	}
	return h
}

// Peek reads k's state under p without counting anything. An error means
// the store could not answer; it is counted.
func (d *Decider) Peek(ctx context.Context, p limiter.Policy, k limiter.Key) (limiter.Decision, error) {
	dec, err := d.store.Peek(ctx, p, k, d.clock.Now())
	return dec, d.failed(err)
}

// Reset forgets k under each of ps (every scope of k.Subject when scope is
// false) and returns the units they had counted (see limiter.Store). An
// error is counted.
func (d *Decider) Reset(ctx context.Context, ps []limiter.Policy, k limiter.Key, scope bool) (int64, error) {
	var deleted int64
	for _, p := range ps {
		var n int64
		var err error
		if scope {
			n, err = d.store.Reset(ctx, p, k)
		} else {
			n, err = d.store.ResetSubject(ctx, p, k.Subject)
		}
		if err != nil {
			return deleted, d.failed(err)
		}
		deleted += n
	}
	return deleted, nil
}

// Ping checks that the store can decide: its own Ping (an error is
// counted), then the recent decisions, which must not have failed too often
// (see healthWindow): a store can answer a ping and still fail decisions.
func (d *Decider) Ping(ctx context.Context) error {
	if err := d.failed(d.store.Ping(ctx)); err != nil {
		return err
	}
	return d.metrics.health.check(d.clock.Now())
}

// withBudget bounds ctx by the request's budget.
func (d *Decider) withBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	if d.budget <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.budget)
}

// failed counts err, when not nil, and returns it: as a store error, unless
// the client went away (its context cancelled: nothing to count) or the
// request was shed, never sent to the store (tollgate_overloaded_total).
func (d *Decider) failed(err error) error {
	switch {
	case err == nil, errors.Is(err, context.Canceled):
	case errors.Is(err, limiter.ErrOverloaded):
		d.metrics.overloaded.Inc()
	default:
		d.storeErr.Inc()
	}
	return err
}
