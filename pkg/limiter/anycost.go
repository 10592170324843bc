package limiter

import "context"

// AllowAnyCost is s.Allow for any cost from 1 up, the cost of a fixed_window
// attempt included when it is above p.Limit. Such an attempt can never
// pass, but the fixed window counts every attempt, refused ones too, so its
// whole cost is added to the key's count, as envoyproxy/ratelimit adds a
// hits_addend above the limit (Redis INCRBY). Store.Allow takes costs up to
// the limit only; a fixed window's count is named by the policy's name and
// window, never by its limit, so AllowAnyCost asks s under p with the cost
// as its limit (one atomic step, exact on every store) and answers as p:
// refused, Remaining 0, to retry when the window ends.
//
// A cost above MaxLimit counts as MaxLimit+1, in two steps: past every limit
// a policy can have, so every decision of the window that follows, and any
// that comes between the two steps, is the one the whole cost would give.
// For the other algorithms, and costs within the limit, it is s.Allow.
func AllowAnyCost(ctx context.Context, s Store, p Policy, r Request) (Decision, error) {
	if r.Cost <= p.Limit || p.Algorithm != FixedWindow {
		return s.Allow(ctx, p, r)
	}
	wide := p
	wide.Limit = min(r.Cost, MaxLimit)
	// No audit row: the attempt is refused, and an audit row marks a pass.
	d, err := s.Allow(ctx, wide, Request{Key: r.Key, Cost: wide.Limit, Now: r.Now})
	if err == nil && r.Cost > MaxLimit {
		d, err = s.Allow(ctx, wide, Request{Key: r.Key, Cost: 1, Now: r.Now})
	}
	if err != nil {
		return Decision{}, err
	}
	d.Allowed, d.Limit, d.Remaining, d.RetryAfter = false, p.Limit, 0, d.ResetAfter
	return d, nil
}
