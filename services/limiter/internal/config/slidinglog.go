package config

import (
	"fmt"
	"maps"
	"slices"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// checkSlidingLog refuses a sliding_log policy whose limit is over
// SlidingLogMaxLimit: such a key holds up to two limits of events and every
// decision on it counts them, under the store's one writer for SQLite, so
// one hot key slows every other client.
func (c *Config) checkSlidingLog() error {
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		if err := CheckSlidingLogLimit(c.Policies[name], c.SlidingLogMaxLimit); err != nil {
			return &Error{Field: "policies." + name + ".limit", Reason: err.Error()}
		}
	}
	return nil
}

// CheckSlidingLogLimit returns an error when p is a sliding_log policy whose
// limit is over maxLimit, saying what to use instead.
func CheckSlidingLogLimit(p limiter.Policy, maxLimit int) error {
	if (p.Algorithm != limiter.SlidingLog && p.Algorithm != limiter.SlidingLogUnsafe) || p.Limit <= int64(maxLimit) {
		return nil
	}
	return fmt.Errorf("%d is over the sliding_log maximum of %d (--sliding-log-max-limit): a sliding_log key keeps one event per admitted request and counts them on every decision; use sliding_window (two counters, within a few percent of exact) or token_bucket (one timestamp, exact average rate) for a limit this large", p.Limit, maxLimit)
}
