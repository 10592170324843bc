package httplimit

import "time"

// The texts of durations in answers: whole seconds in header fields,
// milliseconds in JSON bodies.

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
