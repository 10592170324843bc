package httpapi

import (
	"sync"
	"time"
)

// Store errors are logged sampled: while a store fails, every request
// fails, and one line each would flood the log (35,000 lines in 9 s was
// seen) and slow the service down. The first storeErrorBurst of each
// storeErrorInterval are logged; the rest are counted, and the count is
// logged with the first error logged after them.
const (
	storeErrorBurst    = 10
	storeErrorInterval = 10 * time.Second
)

// sampler passes the first burst events of each interval and counts the
// others. It is safe for concurrent use.
type sampler struct {
	burst    int
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	start   time.Time // of the current interval
	passed  int       // events passed in it
	dropped int       // events dropped since the last one passed
}

func newSampler(burst int, interval time.Duration, now func() time.Time) *sampler {
	return &sampler{burst: burst, interval: interval, now: now}
}

// take reports whether an event happening now may be logged and, when it
// may, how many were dropped before it.
func (s *sampler) take() (ok bool, dropped int) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.start) >= s.interval || now.Before(s.start) {
		s.start, s.passed = now, 0
	}
	if s.passed >= s.burst {
		s.dropped++
		return false, 0
	}
	s.passed++
	dropped, s.dropped = s.dropped, 0
	return true, dropped
}
