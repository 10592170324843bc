package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// StoreErrorMode says what the middleware does with a request when the store
// cannot decide (Redis down, a deadline expired, the store closed).
type StoreErrorMode int

const (
	// FailClosed answers 503 with Retry-After: 1 and the unavailable
	// problem. The default: over-admitting is the worse failure when the
	// limit guards paid quotas, logins or abuse.
	FailClosed StoreErrorMode = iota
	// FailOpen lets the request through uncounted, without rate-limit
	// fields. Pick it when the limit only protects capacity and refusing
	// everyone would be the worse outage.
	FailOpen
)

// Middleware rate-limits HTTP requests with a list of policies on a
// [limiter.Store]. Build it with [New]; it is safe for concurrent use.
//
// For each request that is not skipped it reads the key and the cost, then
// counts the request on each policy in order. The first refusal by an
// enforcing policy stops the evaluation (the policies after it are not
// charged) and answers 429; shadow policies are counted and never refuse.
// Every answer it lets through or refuses carries the RateLimit-Policy and
// RateLimit fields of draft-ietf-httpapi-ratelimit-headers-10 (for the
// refusing policy, else for the enforcing policy with the least remaining)
// and X-RateLimit-Limit, -Remaining and -Reset; a refusal also carries
// Retry-After. That rule is [limiter.Evaluation]'s, which the Tollgate
// service and the lab's whatif follow too.
type Middleware struct {
	store        limiter.Store
	policies     []limiter.Policy
	policyHeader string
	maxCost      int64 // the smallest limit: a larger cost is invalid input
	clock        limiter.Clock
	key          KeyFunc
	cost         func(*http.Request) (int64, error)
	skip         func(*http.Request) bool
	mode         StoreErrorMode
	report       func(*http.Request, error)
	refuse       func(http.ResponseWriter, *http.Request, Result)
}

// Option configures New.
type Option func(*Middleware)

// WithKey sets how a request's key is found (default [ClientAddr] with no
// trusted proxy: the connection's peer address).
func WithKey(f KeyFunc) Option { return func(m *Middleware) { m.key = f } }

// WithCost sets how many units a request takes (default 1). An error, or a
// cost below 1 or above a policy's limit, answers 422 and counts nothing.
func WithCost(f func(*http.Request) (int64, error)) Option {
	return func(m *Middleware) { m.cost = f }
}

// WithSkip exempts the requests for which f is true: they pass uncounted and
// without rate-limit fields (health checks, your own monitoring).
func WithSkip(f func(*http.Request) bool) Option { return func(m *Middleware) { m.skip = f } }

// WithClock makes the middleware read the time from c (default the system
// clock), once per request.
func WithClock(c limiter.Clock) Option { return func(m *Middleware) { m.clock = c } }

// WithOnStoreError sets what happens to a request when the store cannot
// decide (default [FailClosed]); report, when not nil, is called with the
// request and the store's error each time, to log or count it.
func WithOnStoreError(mode StoreErrorMode, report func(*http.Request, error)) Option {
	return func(m *Middleware) { m.mode, m.report = mode, report }
}

// WithRefusal replaces the 429 problem document: f writes the refusal. The
// rate-limit fields and Retry-After are already set when f is called, and
// the status is f's to choose.
func WithRefusal(f func(w http.ResponseWriter, r *http.Request, res Result)) Option {
	return func(m *Middleware) { m.refuse = f }
}

// New returns a middleware that counts requests on store under policies, in
// order. The policies are validated here (names must also be printable ASCII,
// as the header fields require), so a bad configuration fails before the
// first request.
func New(store limiter.Store, policies []limiter.Policy, opts ...Option) (*Middleware, error) {
	if store == nil {
		return nil, errors.New("httplimit: no store")
	}
	if len(policies) == 0 {
		return nil, errors.New("httplimit: no policy")
	}
	m := &Middleware{
		store:    store,
		policies: append([]limiter.Policy(nil), policies...),
		clock:    limiter.SystemClock{},
		key:      ClientAddr(),
		refuse:   writeRefusal,
		maxCost:  limiter.MaxLimit,
	}
	seen := make(map[string]bool, len(policies))
	for _, p := range m.policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
		if !validName(p.Name) {
			return nil, fmt.Errorf("httplimit: policy %q: the name must be printable ASCII", p.Name)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("httplimit: policy %q given twice", p.Name)
		}
		seen[p.Name] = true
		m.maxCost = min(m.maxCost, p.Limit)
	}
	m.policyHeader = PolicyHeader(m.policies)
	for _, o := range opts {
		o(m)
	}
	if m.key == nil || m.clock == nil || m.refuse == nil {
		return nil, errors.New("httplimit: nil key function, clock or refusal handler")
	}
	return m, nil
}

// Result is what the middleware decided for one request.
type Result struct {
	// Key is the request's key (the subject of its counters).
	Key string
	// Cost is the units the request took on each policy.
	Cost int64
	// Policies are the policies evaluated, in order, and Decisions their
	// decisions: the refusing one last when the request was refused.
	Policies  []limiter.Policy
	Decisions []limiter.Decision
	// Refused is the index of the refusing policy in Policies; -1 when the
	// request passed.
	Refused int
}

// Allowed reports whether the request passed.
func (r Result) Allowed() bool { return r.Refused < 0 }

type resultKey struct{}

// ResultFrom returns the Result of the middleware that let the request
// through, for handlers that show the remaining budget in their bodies.
func ResultFrom(ctx context.Context) (Result, bool) {
	r, ok := ctx.Value(resultKey{}).(Result)
	return r, ok
}

// Handle returns next behind the rate limit. Its type makes m.Handle a
// func(http.Handler) http.Handler, as routers expect.
func (m *Middleware) Handle(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r, ok := m.Limit(w, r); ok {
			next.ServeHTTP(w, r)
		}
	})
}

// Limit decides for r and sets the rate-limit fields on w. When the request
// may go on it returns true and r with its [Result] in the context (or r
// itself when skipped or failed open); otherwise it has answered (400, 422,
// 429 or 503) and returns false. It is the building block of Handle and of
// adapters for other routers.
func (m *Middleware) Limit(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if m.skip != nil && m.skip(r) {
		return r, true
	}
	key, err := m.key(r)
	if err == nil {
		err = limiter.Key{Subject: key}.Validate()
	}
	if err != nil {
		WriteProblem(w, http.StatusBadRequest, NewProblem(http.StatusBadRequest, err.Error()))
		return r, false
	}
	cost := int64(1)
	if m.cost != nil {
		if cost, err = m.cost(r); err == nil && (cost < 1 || cost > m.maxCost) {
			err = fmt.Errorf("httplimit: cost %d is outside 1..%d", cost, m.maxCost)
		}
		if err != nil {
			WriteProblem(w, http.StatusUnprocessableEntity, NewProblem(http.StatusUnprocessableEntity, err.Error()))
			return r, false
		}
	}
	res, e, err := m.evaluate(r.Context(), key, cost)
	if err != nil {
		if m.report != nil {
			m.report(r, err)
		}
		if m.mode == FailOpen {
			return r, true
		}
		WriteUnavailable(w, "")
		return r, false
	}
	hd := w.Header()
	if i := e.Shown(); i >= 0 {
		NewFields(m.policyHeader, res.Policies[i], res.Decisions[i]).Set(hd)
	}
	if !res.Allowed() {
		wait, _ := e.RetryAfter() // always set: a store's refusal of a cost within the limit lifts
		SetRetryAfter(hd, wait)
		m.refuse(w, r, res)
		return r, false
	}
	return r.WithContext(context.WithValue(r.Context(), resultKey{}, res)), true
}

// evaluate charges key with cost on the policies in order, with the time
// read once, by limiter.Evaluation's rule: it stops at the first enforcing
// refusal.
func (m *Middleware) evaluate(ctx context.Context, key string, cost int64) (Result, limiter.Evaluation, error) {
	r := limiter.Request{Key: limiter.Key{Subject: key}, Cost: cost, Now: m.clock.Now()}
	ds, e, err := limiter.AllowInOrder(ctx, m.store, m.policies, r, make([]limiter.Decision, 0, len(m.policies)))
	if err != nil {
		return Result{}, e, fmt.Errorf("httplimit: policy %s: %w", strconv.Quote(m.policies[len(ds)].Name), err)
	}
	return Result{Key: key, Cost: cost, Policies: m.policies[:len(ds)], Decisions: ds, Refused: e.Refused()}, e, nil
}

// writeRefusal is the default refusal: the 429 problem document.
func writeRefusal(w http.ResponseWriter, _ *http.Request, res Result) {
	WriteLimited(w, res.Policies[res.Refused], res.Decisions[res.Refused], "")
}
