package limiter

import "time"

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
