package offenders

import (
	"errors"
	"sync"
	"time"
)

// DefaultCapacity is how many items each of a Tracker's sketches monitors
// unless told otherwise.
const DefaultCapacity = 100

// Tracker counts items over the recent past with two sketches: the current
// interval's and the previous one's. Intervals are aligned on multiples of
// the window (as time.Time.Truncate does), and rotate lazily when Record or
// Report sees a later interval, so no goroutine is involved: the time is
// always the caller's. Memory is bounded by 2 × capacity entries whatever
// the number of distinct items. It is safe for concurrent use.
type Tracker struct {
	window time.Duration

	mu        sync.Mutex
	start     time.Time // start of the current interval
	cur, prev *Sketch
}

// ErrWindow is returned by NewTracker for a window that is not positive.
var ErrWindow = errors.New("offenders: the window must be a positive duration")

// NewTracker returns a tracker whose intervals last window, with sketches
// of capacity items (capacity < 1 counts as 1).
func NewTracker(window time.Duration, capacity int) (*Tracker, error) {
	if window <= 0 {
		return nil, ErrWindow
	}
	return &Tracker{window: window, cur: NewSketch(capacity), prev: NewSketch(capacity)}, nil
}

// rotate makes the current interval the one holding now. A clock that steps
// back keeps counting into the current interval. t.mu must be held.
func (t *Tracker) rotate(now time.Time) {
	at := now.Truncate(t.window)
	if !at.After(t.start) {
		return
	}
	if at.Equal(t.start.Add(t.window)) {
		t.prev, t.cur = t.cur, t.prev
	} else {
		t.prev.Reset() // more than one interval went by without a record
	}
	t.cur.Reset()
	t.start = at
}

// Record counts one occurrence of it at now.
func (t *Tracker) Record(now time.Time, it Item) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotate(now)
	t.cur.Record(it)
}

// Report is what a Tracker knows at one moment: the previous and the
// current interval together.
type Report struct {
	// Since is when the previous interval began: the report covers
	// [Since, now], between one and two windows.
	Since  time.Time
	Window time.Duration
	// Capacity is how many items each interval's sketch monitors.
	Capacity int
	// Recorded is how many occurrences the two intervals counted.
	Recorded uint64
	// Unlisted bounds the count of any item that is not among Entries.
	Unlisted uint64
	// Entries are sorted by count, largest first; at most 2 × Capacity.
	Entries []Entry
}

// Report returns the counts of the previous and current intervals at now,
// merged as Merge does.
func (t *Tracker) Report(now time.Time) Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotate(now)
	return Report{
		Since:    t.start.Add(-t.window),
		Window:   t.window,
		Capacity: t.cur.capacity,
		Recorded: t.cur.Seen() + t.prev.Seen(),
		Unlisted: t.cur.Min() + t.prev.Min(),
		Entries:  Merge(t.cur, t.prev),
	}
}

// Len returns how many entries the tracker holds, at most 2 × capacity: the
// measure of its memory.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur.Len() + t.prev.Len()
}
