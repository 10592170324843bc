package limitertest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
)

func TestClockIsSafeForConcurrentUse(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := limitertest.NewClock(start)
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, start.Add(10*time.Second), c.Now())
	c.Set(start)
	assert.Equal(t, start, c.Now())
}
