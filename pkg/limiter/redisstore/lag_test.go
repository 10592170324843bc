package redisstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The lag monitor's arithmetic, without its goroutine: ticks are handed to
// it with the times they woke at.
func TestLagMonitor(t *testing.T) {
	m := &lagMonitor{threshold: time.Second, hold: time.Hour, origin: time.Now()}
	m.lastTick.Store(m.now())
	assert.False(t, m.starved(), "just woke")
	assert.Less(t, m.recent(), time.Second)

	// A wake-up 3s late: starved for the next hour, and recent says how late.
	late := m.lastTick.Load() + int64(lagTick) + int64(3*time.Second)
	m.tick(late)
	assert.True(t, m.starved())
	assert.GreaterOrEqual(t, m.recent(), 3*time.Second)

	// Not woken for longer than the threshold: starved right now.
	n := &lagMonitor{threshold: time.Second, hold: time.Hour, origin: time.Now().Add(-time.Minute)}
	n.lastTick.Store(0)
	assert.True(t, n.starved())
	assert.GreaterOrEqual(t, n.recent(), time.Minute-lagTick)
}
