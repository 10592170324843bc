package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Algorithm names a rate-limiting algorithm. The values are the names used in
// configuration files.
type Algorithm string

// The algorithms Tollgate implements.
const (
	FixedWindow      Algorithm = "fixed_window"
	SlidingLog       Algorithm = "sliding_log"
	SlidingWindow    Algorithm = "sliding_window"
	TokenBucket      Algorithm = "token_bucket"
	SlidingLogUnsafe Algorithm = "sliding_log_unsafe"
)

// Algorithms lists every algorithm in a stable order, the unsafe
// demonstration last.
var Algorithms = []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, SlidingLogUnsafe}

// algorithmNames is Algorithms as the text of an error message.
var algorithmNames = func() string {
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}()

// ParseAlgorithm returns the algorithm named s, or an error wrapping
// [ErrUnknownAlgorithm].
func ParseAlgorithm(s string) (Algorithm, error) {
	if a := Algorithm(s); a.known() {
		return a, nil
	}
	return "", fmt.Errorf("limiter: %q: %w", s, ErrUnknownAlgorithm)
}

// known reports whether a is one of Algorithms. A switch, not a loop over
// Algorithms: stores validate the policy on every decision.
func (a Algorithm) known() bool {
	switch a {
	case FixedWindow, SlidingLog, SlidingWindow, TokenBucket, SlidingLogUnsafe:
		return true
	}
	return false
}

// Bounds of a policy.
const (
	// MaxLimit is the largest limit a policy may have (2^31).
	MaxLimit = 1 << 31
	// MinWindow is the shortest window; windows are whole seconds so that
	// window starts print as the seeds' ISO 8601 text.
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
// key, an address, a user id); Scope optionally narrows it (the sliding seed's
// endpoint). Two keys are the same counter when both fields are equal.
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

// Decision is the outcome of one attempt, or the state of a key for a peek.
// It is returned by value.
type Decision struct {
	// Allowed is true when the attempt passed. For a peek it says whether an
	// attempt of cost 1 would pass now.
	Allowed bool
	// Limit is the policy's limit.
	Limit int64
	// Remaining is how many units could still pass now, never negative.
	Remaining int64
	// Count is what the store holds for the current window after this
	// decision: every attempt for fixed_window, the recorded units for
	// sliding_log, the weighted estimate (rounded down) for sliding_window,
	// the units in flight for token_bucket.
	Count int64
	// WindowStart is the start of the window the decision was made in: the
	// truncated start for window algorithms, now-window for the others.
	WindowStart time.Time
	// ResetAfter is how long until the key is back to its full limit.
	ResetAfter time.Duration
	// RetryAfter is, when the attempt was refused, how long until an attempt
	// of the same cost could pass; zero when allowed. Never negative.
	RetryAfter time.Duration
}

// Store keeps counters and decides atomically. Implementations must be safe
// for concurrent use; every method is atomic with respect to the others for
// the keys it touches, also across processes sharing the store.
type Store interface {
	// Allow counts one attempt of r.Cost units on r.Key under p and decides.
	Allow(ctx context.Context, p Policy, r Request) (Decision, error)
	// Peek returns the state of k under p at now without counting anything.
	Peek(ctx context.Context, p Policy, k Key, now time.Time) (Decision, error)
	// Reset forgets k under p and returns how many stored records it removed.
	Reset(ctx context.Context, p Policy, k Key) (int64, error)
	// ResetSubject forgets every key of subject under p, whatever its scope.
	ResetSubject(ctx context.Context, p Policy, subject string) (int64, error)
	// Prune removes state that can no longer affect a decision at now: window
	// rows older than two windows, log events older than one window. It
	// returns how many records it removed. Stores that expire state by
	// themselves return 0.
	Prune(ctx context.Context, now time.Time, policies []Policy) (int64, error)
	// Ping reports whether the store can decide right now.
	Ping(ctx context.Context) error
	// Close releases the store; later calls return ErrClosed.
	Close() error
}

// Errors. Stores wrap them with context; test with errors.Is.
var (
	ErrInvalidPolicy    = errors.New("invalid policy")
	ErrUnknownAlgorithm = errors.New("unknown algorithm")
	ErrInvalidKey       = errors.New("invalid key")
	ErrInvalidCost      = errors.New("invalid cost")
	ErrUnsupported      = errors.New("algorithm not supported by this store")
	ErrClosed           = errors.New("store closed")
	ErrUnavailable      = errors.New("store unavailable")
)

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

// Clock tells the time. Implementations return UTC.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock, in UTC.
type SystemClock struct{}

// Now returns the current UTC time.
func (SystemClock) Now() time.Time { return time.Now().UTC() }

// RetryAfterSeconds rounds d up to whole seconds for a Retry-After header:
// 0 for d <= 0, and 1 for any positive d under a second.
func RetryAfterSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Seconds returns d in seconds for JSON bodies, rounded to the millisecond
// (6.809, not 6.8081126229999995) and never negative. The result is the
// float64 nearest to that exact number of milliseconds, so it prints as
// 20.577, never 20.576999999999998 (which whole seconds plus a fraction
// would give).
func Seconds(d time.Duration) float64 {
	return float64(max(0, d.Round(time.Millisecond).Milliseconds())) / 1000
}
