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

// refusalKeys bounds the keys the refusal sampler remembers; when it is
// full, it forgets them all (their folded counts with them) and starts
// again, so that a flood of distinct keys cannot grow it.
const refusalKeys = 100_000

// keySampler passes the first event of each key in each second (Unix
// seconds of the time given) and counts the others, which the key's next
// passed event reports. It is safe for concurrent use.
type keySampler struct {
	max  int
	mu   sync.Mutex
	keys map[string]*keySample
}

type keySample struct {
	second int64 // of the last event passed
	folded int   // events dropped since
}

func newKeySampler(max int) *keySampler {
	return &keySampler{max: max, keys: map[string]*keySample{}}
}

// take reports whether an event of key at now may be logged and, when it
// may, how many of key's were dropped before it.
func (s *keySampler) take(key string, now time.Time) (ok bool, folded int) {
	sec := now.Unix()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	if k == nil {
		if len(s.keys) >= s.max {
			clear(s.keys)
		}
		s.keys[key] = &keySample{second: sec}
		return true, 0
	}
	if k.second == sec {
		k.folded++
		return false, 0
	}
	k.second = sec
	folded, k.folded = k.folded, 0
	return true, folded
}
