package decide

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// The recent error rate that makes the service unready: over the last
// healthWindow seconds, at least healthMinFailures store calls failed and
// they were at least half of all calls. A store can take its write lock
// and still fail every decision (a full disk, a read-only file); the rate
// is what decisions actually do.
const (
	healthWindow      = 10
	healthMinFailures = 5
)

// health counts the store calls of decisions that succeeded and failed,
// per second of the decider's clock, over the last healthWindow seconds.
// It is lock-free: a bucket reused for a new second is cleared by the first
// call that sees it stale, and a count racing that clearing may be lost,
// which an error rate can afford. The zero value is ready to use.
type health struct {
	buckets [healthWindow]bucket
}

type bucket struct {
	sec            atomic.Int64
	passed, failed atomic.Int64
}

// record counts one store call at now. A call its caller gave up on
// (context.Canceled) says nothing of the store and is not counted.
func (h *health) record(now time.Time, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	s := now.Unix()
	b := &h.buckets[uint64(s)%healthWindow]
	if old := b.sec.Load(); old != s && b.sec.CompareAndSwap(old, s) {
		b.passed.Store(0)
		b.failed.Store(0)
	}
	if err != nil {
		b.failed.Add(1)
	} else {
		b.passed.Add(1)
	}
}

// check returns an error when the store calls of the last healthWindow
// seconds before now failed too often.
func (h *health) check(now time.Time) error {
	s := now.Unix()
	var passed, failed int64
	for i := range h.buckets {
		b := &h.buckets[i]
		if sec := b.sec.Load(); sec > s-healthWindow && sec <= s {
			passed += b.passed.Load()
			failed += b.failed.Load()
		}
	}
	if failed >= healthMinFailures && failed >= passed {
		return fmt.Errorf("decide: %d of the last %d store calls failed in %ds", failed, failed+passed, healthWindow)
	}
	return nil
}
