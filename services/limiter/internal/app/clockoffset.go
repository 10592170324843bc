package app

import (
	"fmt"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// ClockOffsetEnv names a TEST-ONLY environment variable: a Go duration
// ("-90s", "3h") added to the service's clock, so that a test can run two
// service processes whose clocks disagree (clock-skew tests). Only main reads
// it, through ClockOffsetFromEnv; it has no flag and no YAML key, and the
// service logs a WARN at start when it is set. Never set it in production.
//
// With the redis store in server-time mode (the default) the offset changes
// nothing a shared limit depends on: Redis's TIME decides. With
// --redis-client-time it shifts the windows the instance counts in.
const ClockOffsetEnv = "LIMITER_TEST_CLOCK_OFFSET"

// ClockOffsetFromEnv reads ClockOffsetEnv through getenv and returns the
// option that applies it: WithClockOffset, or an option that does nothing
// when the variable is unset or empty. A value that is not a duration is a
// configuration error naming the variable.
func ClockOffsetFromEnv(getenv func(string) string) (Option, error) {
	v := getenv(ClockOffsetEnv)
	if v == "" {
		return func(*App) {}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, &config.Error{Field: ClockOffsetEnv, Reason: fmt.Sprintf("%q is not a duration such as -90s or 2h", v)}
	}
	return WithClockOffset(d), nil
}

// WithClockOffset shifts the app's clock by d (test only; see
// ClockOffsetEnv). It composes with WithClock in any order, and it does not
// switch the redis store to client time the way an injected clock does.
func WithClockOffset(d time.Duration) Option { return func(a *App) { a.clockOffset = d } }

// shiftedClock is a clock d ahead of another (behind when d < 0).
type shiftedClock struct {
	clock limiter.Clock
	d     time.Duration
}

// Now returns the underlying clock's time plus the offset.
func (c shiftedClock) Now() time.Time { return c.clock.Now().Add(c.d) }
