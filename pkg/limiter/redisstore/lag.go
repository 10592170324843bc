package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// lagTick is how often the lag monitor wakes up.
const lagTick = 10 * time.Millisecond

// lagMonitor tells whether this process was starved of CPU lately: a
// goroutine wakes every lagTick and notes how late it woke. A reply that did
// not come within the I/O timeout is Redis's fault only if the process could
// have read it in time: when the process itself ran late by a good part of
// that timeout (a crowded node, a paused VM, a long GC pause), the reply may
// well have been waiting in the socket. Such a timeout fails its call but is
// not counted against Redis.
//
// The Go scheduler runs a goroutine woken by a timer before the others
// queued on its processor, so this measures the process's own CPU starvation
// (threads not scheduled by the OS), not a long run queue of goroutines: the
// latter does not delay socket deadlines nor the network poller, which wakes
// a reader whose reply arrived.
type lagMonitor struct {
	threshold time.Duration // lag that counts as starved
	hold      time.Duration // how long a seen lag keeps counting
	origin    time.Time     // monotonic origin of the nanosecond marks below
	lastTick  atomic.Int64  // when the monitor last woke
	starvedTo atomic.Int64  // until when a seen lag counts
	quit      chan struct{}
	wg        sync.WaitGroup

	mu    sync.Mutex
	epoch int64    // now / hold of worst[0]
	worst [2]int64 // the worst lag of this epoch and of the one before
}

// newLagMonitor starts a monitor that calls a lag of threshold or more
// starvation for hold after it was seen. Call stop to end it.
func newLagMonitor(threshold, hold time.Duration) *lagMonitor {
	m := &lagMonitor{threshold: threshold, hold: hold, origin: time.Now(), quit: make(chan struct{})}
	m.wg.Go(m.run)
	return m
}

func (m *lagMonitor) now() int64 { return int64(time.Since(m.origin)) }

func (m *lagMonitor) run() {
	t := time.NewTicker(lagTick)
	defer t.Stop()
	m.lastTick.Store(m.now())
	for {
		select {
		case <-t.C:
			m.tick(m.now())
		case <-m.quit:
			return
		}
	}
}

// tick records a wake-up at now (nanoseconds since origin).
func (m *lagMonitor) tick(now int64) {
	lag := now - m.lastTick.Swap(now) - int64(lagTick)
	if lag >= int64(m.threshold) {
		m.starvedTo.Store(now + int64(m.hold))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roll(now)
	m.worst[0] = max(m.worst[0], lag)
}

// roll moves the epochs on to now's; mu is held.
func (m *lagMonitor) roll(now int64) {
	switch e := now / int64(m.hold); {
	case e == m.epoch:
	case e == m.epoch+1:
		m.epoch, m.worst = e, [2]int64{0, m.worst[0]}
	default:
		m.epoch, m.worst = e, [2]int64{}
	}
}

// recent returns the worst lag of the last hold or so, the lag of right now
// (the monitor late to wake) included: how late this process has been
// running lately.
func (m *lagMonitor) recent() time.Duration {
	now := m.now()
	m.mu.Lock()
	m.roll(now)
	worst := max(m.worst[0], m.worst[1])
	m.mu.Unlock()
	return time.Duration(max(worst, now-m.lastTick.Load()-int64(lagTick), 0))
}

// starved reports whether the process ran late by threshold or more within
// the last hold, or is running late right now (the monitor has not woken
// for that long).
func (m *lagMonitor) starved() bool {
	now := m.now()
	return now < m.starvedTo.Load() || now-m.lastTick.Load()-int64(lagTick) >= int64(m.threshold)
}

func (m *lagMonitor) stop() {
	close(m.quit)
	m.wg.Wait()
}
