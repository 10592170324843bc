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
