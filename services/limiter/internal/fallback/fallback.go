// Package fallback is the service's on_store_error: a limiter.Store over a
// remote store (Redis) that answers as each policy's mode says while the
// store cannot decide. It is the service's, not the library's: it counts
// its answers in the service's Prometheus metrics, and a library user gets
// limiter.ErrUnavailable and chooses for itself. It owns its modes (Mode);
// the store stack (internal/app) gives each policy the mode its
// configuration says.
package fallback

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// Mode is what a policy's decisions become while the primary cannot decide
// (the service's on_store_error); its text is the metric's mode label.
type Mode string

// The modes.
const (
	FailClosed Mode = "fail_closed" // the error goes back
	FailOpen   Mode = "fail_open"   // allowed, uncounted
	Local      Mode = "local"       // decided by an in-process memory store
)

// Store is a limiter.Store that passes every call to its primary store
// and, when the primary cannot decide, answers as each policy's
// on_store_error says:
//
//   - fail_closed (the default): the error goes back, the handler answers 503;
//   - fail_open: Allow allows without counting anything (the decision says
//     the whole limit remains); Peek still fails, it has nothing honest to
//     report;
//   - local: Allow and Peek go to an in-process memory store holding the
//     same policy, so each instance limits on its own until the primary is
//     back. What the primary counted before the outage is not known there.
//
// "Cannot decide" means an error wrapping limiter.ErrUnavailable or a
// deadline that expired while the caller was still waiting; bad input, a
// closed store and a caller that gave up are never covered. The primary
// bounds each call (redisstore's timeout, and its breaker fails fast while
// open), so a fallback answer comes within that bound.
//
// It logs one line when the primary starts failing and one when it answers
// again, however many calls see the change. It is safe for concurrent use.
//
// A Store knows the modes of one set of policies, fixed when it is made:
// a reload makes another with WithPolicies, sharing the primary, the local
// store and the health state, and publishes it in the new snapshot. So a
// request decides on the modes of the snapshot it loaded.
type Store struct {
	*state
	modes *policyModes
}

// state is what every fallback of one primary shares.
type state struct {
	primary limiter.Store
	local   *memstore.Store // decides for local policies while the primary cannot
	usedVec *prometheus.CounterVec
	log     *slog.Logger

	calls atomic.Uint64 // tickets handed to calls in the order they start
	down  atomic.Bool   // the primary's last news: failing
	mu    sync.Mutex    // serialises changes of down
	since uint64        // ticket of the call whose outcome last changed down
}

// policyModes is what a fallback knows of the policies in force.
type policyModes struct {
	mode   map[string]Mode
	used   map[string]prometheus.Counter // policy -> tollgate_store_fallback_total
	locals []limiter.Policy              // the local policies, for Prune
}

var _ limiter.Store = (*Store)(nil)

// New wraps primary, every policy fail_closed until WithPolicies gives them
// modes, and registers tollgate_store_fallback_total{policy,mode} on reg
// (one child per fail_open or local policy). localMaxKeys bounds the local
// memory store (memstore.WithMaxKeys).
func New(primary limiter.Store, localMaxKeys int, reg prometheus.Registerer, log *slog.Logger) (*Store, error) {
	used := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_store_fallback_total",
		Help: "Decisions made without the store because it could not decide, by policy and on_store_error mode (fail_open: allowed uncounted; local: decided by this instance alone).",
	}, []string{"policy", "mode"})
	if err := reg.Register(used); err != nil {
		return nil, errors.Join(errors.New("fallback: register metric"), err)
	}
	st := &state{
		primary: primary,
		local:   memstore.New(memstore.WithMaxKeys(localMaxKeys)),
		usedVec: used,
		log:     log,
	}
	return (&Store{state: st}).WithPolicies(nil, nil), nil
}

// WithPolicies returns a Store of the same primary for policies, each in
// the mode modeOf gives it: at start and for each reload. f is unchanged,
// and calls made on it keep its modes.
func (f *Store) WithPolicies(policies []limiter.Policy, modeOf func(policy string) Mode) *Store {
	m := &policyModes{
		mode: make(map[string]Mode, len(policies)),
		used: make(map[string]prometheus.Counter, len(policies)),
	}
	for _, p := range policies {
		mode := modeOf(p.Name)
		m.mode[p.Name] = mode
		if mode == FailClosed {
			continue
		}
		m.used[p.Name] = f.usedVec.WithLabelValues(p.Name, string(mode))
		if mode == Local {
			m.locals = append(m.locals, p)
		}
	}
	return &Store{state: f.state, modes: m}
}

// storeFailed reports whether err says the store could not decide, as
// opposed to bad input, a closed store or a caller that gave up (ctx done).
func storeFailed(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil &&
		(errors.Is(err, limiter.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded))
}

// observe records the outcome err of the primary call that got ticket and
// reports whether the primary failed. It logs when the state changes; a call
// that started before the call which last changed the state is old news and
// changes nothing, so concurrent calls straddling a change do not flap.
func (f *Store) observe(ctx context.Context, ticket uint64, err error) bool {
	failed := storeFailed(ctx, err)
	if err != nil && !failed {
		return false // says nothing about the store's health
	}
	if f.down.Load() == failed {
		return failed
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ticket < f.since || f.down.Load() == failed {
		return failed
	}
	f.down.Store(failed)
	f.since = ticket
	if failed {
		f.log.Warn("store degraded: decisions follow each policy's on_store_error until it answers again", "error", err.Error())
	} else {
		f.log.Info("store recovered: decisions come from the store again")
	}
	return failed
}

// Allow decides on the primary, or as p's mode says when it cannot.
func (f *Store) Allow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	ticket := f.calls.Add(1)
	d, err := f.primary.Allow(ctx, p, r)
	if !f.observe(ctx, ticket, err) {
		return d, err
	}
	m := f.modes
	switch m.mode[p.Name] {
	case FailOpen:
		m.used[p.Name].Inc()
		return limiter.Decision{Allowed: true, Limit: p.Limit, Remaining: p.Limit, WindowStart: r.Now}, nil
	case Local:
		m.used[p.Name].Inc()
		return f.local.Allow(ctx, p, r)
	}
	return d, err
}

// Peek reads the primary, or the local store for a local policy when the
// primary cannot answer.
func (f *Store) Peek(ctx context.Context, p limiter.Policy, k limiter.Key, now time.Time) (limiter.Decision, error) {
	ticket := f.calls.Add(1)
	d, err := f.primary.Peek(ctx, p, k, now)
	if f.observe(ctx, ticket, err) && f.modes.mode[p.Name] == Local {
		return f.local.Peek(ctx, p, k, now)
	}
	return d, err
}

// Reset forgets k on the primary and, for a local policy, in the local store
// too; it returns the units removed from both (see limiter.Store) and the
// primary's error.
func (f *Store) Reset(ctx context.Context, p limiter.Policy, k limiter.Key) (int64, error) {
	return f.reset(ctx, p, func(s limiter.Store) (int64, error) { return s.Reset(ctx, p, k) })
}

// ResetSubject is Reset for every scope of subject.
func (f *Store) ResetSubject(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	return f.reset(ctx, p, func(s limiter.Store) (int64, error) { return s.ResetSubject(ctx, p, subject) })
}

func (f *Store) reset(ctx context.Context, p limiter.Policy, on func(limiter.Store) (int64, error)) (int64, error) {
	ticket := f.calls.Add(1)
	n, err := on(f.primary)
	f.observe(ctx, ticket, err)
	if f.modes.mode[p.Name] == Local {
		m, lerr := on(f.local)
		n, err = n+m, errors.Join(err, lerr)
	}
	return n, err
}

// Prune prunes the primary and the local store.
func (f *Store) Prune(ctx context.Context, now time.Time, policies []limiter.Policy) (int64, error) {
	n, err := f.primary.Prune(ctx, now, policies)
	m, lerr := f.local.Prune(ctx, now, f.modes.locals)
	return n + m, errors.Join(err, lerr)
}

// Ping pings the primary: /readyz fails while it cannot decide, whatever the
// policies' modes, so that operators and load balancers see the outage.
func (f *Store) Ping(ctx context.Context) error {
	ticket := f.calls.Add(1)
	err := f.primary.Ping(ctx)
	f.observe(ctx, ticket, err)
	return err
}

// Close closes the primary and the local store.
func (f *Store) Close() error {
	return errors.Join(f.primary.Close(), f.local.Close())
}

// Capabilities are the primary's: the fallback covers its outages, it does
// not change what it runs.
func (f *Store) Capabilities() limiter.Capabilities { return limiter.CapabilitiesOf(f.primary) }
