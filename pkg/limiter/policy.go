package limiter

import (
	"fmt"
	"time"
)

// Bounds of a policy.
const (
	// MaxLimit is the largest limit a policy may have (2^31).
	MaxLimit = 1 << 31
	// MinWindow is the shortest window; windows are whole seconds so that
	// window starts print as seed 000's ISO 8601 window_start (docs/seeds.md).
	MinWindow = time.Second
	// MaxWindow is the longest window (a year): long enough for quotas,
	// short enough that window arithmetic in nanoseconds never overflows.
	MaxWindow = 366 * 24 * time.Hour
	// MaxKeyLen bounds a key's subject and scope, in bytes.
	MaxKeyLen = 1024
)

// Policy is a named limit: at most Limit units per Window under Algorithm.
// The zero value is not valid; call [Policy.Validate].
type Policy struct {
	Name      string
	Algorithm Algorithm
	Limit     int64
	Window    time.Duration
	// Shadow policies are evaluated and counted but never enforced; the
	// caller decides what to do with the decision, the store ignores it.
	Shadow bool
}

// PolicyError says which field of a policy is wrong.
type PolicyError struct {
	Policy string // the policy's name, possibly empty
	Field  string // "name", "algorithm", "limit" or "window"
	Reason string
}

func (e *PolicyError) Error() string {
	name := e.Policy
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("limiter: policy %s: %s: %s", name, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidPolicy) true.
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

// Validate reports the first invalid field as a *PolicyError.
func (p Policy) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &PolicyError{Policy: p.Name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if p.Name == "" {
		return bad("name", "must not be empty")
	}
	if len(p.Name) > 128 {
		return bad("name", "longer than 128 bytes")
	}
	if !p.Algorithm.known() {
		return bad("algorithm", "unknown algorithm %q (want one of %s)", p.Algorithm, algorithmNames)
	}
	if p.Limit <= 0 || p.Limit > MaxLimit {
		return bad("limit", "%d is outside 1..%d", p.Limit, int64(MaxLimit))
	}
	if p.Window < MinWindow || p.Window > MaxWindow {
		return bad("window", "%s is outside %s..%s", p.Window, MinWindow, MaxWindow)
	}
	if p.Window%time.Second != 0 {
		return bad("window", "%s is not a whole number of seconds", p.Window)
	}
	if p.Algorithm == TokenBucket && p.Limit > int64(p.Window) { // window/limit < 1ns
		return bad("limit", "token_bucket needs at least 1ns between tokens; %d per %s is too many", p.Limit, p.Window)
	}
	return nil
}

// Key names one counter under a policy. Subject is who is limited (a client
// key, an address, a user id); Scope optionally narrows it (the endpoint of
// seed 001, docs/seeds.md). Two keys are the same counter when both fields are equal.
type Key struct {
	Subject string
	Scope   string
}

// Validate checks the key's size bounds.
func (k Key) Validate() error {
	if k.Subject == "" {
		return fmt.Errorf("limiter: key subject is empty: %w", ErrInvalidKey)
	}
	if len(k.Subject) > MaxKeyLen || len(k.Scope) > MaxKeyLen {
		return fmt.Errorf("limiter: key longer than %d bytes: %w", MaxKeyLen, ErrInvalidKey)
	}
	return nil
}

// Request is one attempt.
type Request struct {
	Key Key
	// Cost is the number of units the attempt takes, 1..Limit.
	Cost int64
	// Now is the time of the attempt, as read once from the caller's clock.
	Now time.Time
	// Audit, when not empty and the attempt is allowed, asks the store to
	// record one audit row naming this endpoint in the same atomic step
	// (SQLite's api_calls table). Stores without an audit log ignore it.
	Audit string
}

// CheckRequest validates what every store checks before it touches state:
// the policy, the key, and a cost in 1..p.Limit.
func CheckRequest(p Policy, r Request) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := r.Key.Validate(); err != nil {
		return err
	}
	if r.Cost < 1 || r.Cost > p.Limit {
		return fmt.Errorf("limiter: cost %d is outside 1..%d: %w", r.Cost, p.Limit, ErrInvalidCost)
	}
	return nil
}
