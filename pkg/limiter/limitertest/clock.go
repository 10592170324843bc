package limitertest

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Clock is a fake limiter.Clock that only moves when told to. It is safe for
// concurrent use; the zero value reads the zero time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

var _ limiter.Clock = (*Clock)(nil)

// NewClock returns a clock that reads t (in UTC) until Set or Advance.
func NewClock(t time.Time) *Clock {
	return &Clock{now: t.UTC()}
}

// Now returns the clock's current time, in UTC.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, forwards or backwards.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.UTC()
}

// Advance moves the clock by d; a negative d moves it backwards.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
