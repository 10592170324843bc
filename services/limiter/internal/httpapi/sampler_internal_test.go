package httpapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The sampler passes the first burst events of each interval, and reports
// with the next event it passes how many it dropped.
func TestSampler(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSampler(3, 10*time.Second, func() time.Time { return now })
	var passed, dropped []int
	step := func(n int, d time.Duration) {
		for range n {
			ok, before := s.take()
			if ok {
				passed = append(passed, before)
			} else {
				dropped = append(dropped, 0)
			}
			now = now.Add(d)
		}
	}
	step(1000, time.Millisecond) // one second: 3 pass, 997 dropped
	assert.Equal(t, []int{0, 0, 0}, passed)
	assert.Len(t, dropped, 997)
	now = now.Add(10 * time.Second)
	step(2, time.Millisecond)
	assert.Equal(t, []int{0, 0, 0, 997, 0}, passed, "the count comes with the next line")
	now = now.Add(-time.Hour) // a clock stepping back starts an interval
	passed = nil
	step(1, 0)
	assert.Equal(t, []int{0}, passed)
}
