package limiter

import (
	"context"
	"time"
)

// Limiter binds a policy to a store and a clock: the convenient way to ask
// for decisions when the time should be the clock's. It is safe for
// concurrent use.
type Limiter struct {
	store  Store
	policy Policy
	clock  Clock
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes the limiter read time from c instead of the system clock.
func WithClock(c Clock) Option {
	return func(l *Limiter) { l.clock = c }
}

// New returns a limiter for p on store. The policy is validated here, so a
// bad configuration is refused before the first request.
func New(store Store, p Policy, opts ...Option) (*Limiter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{store: store, policy: p, clock: SystemClock{}}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Policy returns the limiter's policy.
func (l *Limiter) Policy() Policy { return l.policy }

// Now returns the limiter clock's time.
func (l *Limiter) Now() time.Time { return l.clock.Now() }

// Allow counts one unit on k.
func (l *Limiter) Allow(ctx context.Context, k Key) (Decision, error) {
	return l.Do(ctx, Request{Key: k, Cost: 1})
}

// Do counts r on the store. A zero r.Now is replaced by the clock's time and
// a zero r.Cost by 1.
func (l *Limiter) Do(ctx context.Context, r Request) (Decision, error) {
	if r.Now.IsZero() {
		r.Now = l.clock.Now()
	}
	if r.Cost == 0 {
		r.Cost = 1
	}
	return l.store.Allow(ctx, l.policy, r)
}

// Peek returns k's state without counting.
func (l *Limiter) Peek(ctx context.Context, k Key) (Decision, error) {
	return l.store.Peek(ctx, l.policy, k, l.clock.Now())
}

// Reset forgets k and returns the units its state had counted (see
// Store.Reset).
func (l *Limiter) Reset(ctx context.Context, k Key) (int64, error) {
	return l.store.Reset(ctx, l.policy, k)
}

// ResetSubject forgets every key of subject, whatever its scope.
func (l *Limiter) ResetSubject(ctx context.Context, subject string) (int64, error) {
	return l.store.ResetSubject(ctx, l.policy, subject)
}
