package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress draws a one-line text progress bar on w (the terminal's stderr),
// redrawn in place with a carriage return four times a second. Add and
// SetTotal are safe for concurrent use; Stop must be called once.
type progress struct {
	w     io.Writer
	label string
	unit  string
	began time.Time
	done  atomic.Int64
	total atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
}

// barWidth is the number of cells of the bar.
const barWidth = 30

// startProgress starts drawing a bar for total units (requests, seconds…).
func startProgress(w io.Writer, label, unit string, total int64) *progress {
	p := &progress{w: w, label: label, unit: unit, began: time.Now(), stop: make(chan struct{})}
	p.total.Store(total)
	p.wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				p.draw()
			}
		}
	})
	return p
}

// Add records n more units done.
func (p *progress) Add(n int64) { p.done.Add(n) }

// SetTotal changes the number of units expected, when a run ends early.
func (p *progress) SetTotal(n int64) { p.total.Store(n) }

// Stop draws the final state and ends the line.
func (p *progress) Stop() {
	close(p.stop)
	p.wg.Wait()
	p.draw()
	fmt.Fprintln(p.w)
}

func (p *progress) draw() {
	fmt.Fprint(p.w, "\r"+renderBar(p.label, p.unit, p.done.Load(), p.total.Load(), time.Since(p.began)))
}

// renderBar formats one state of the bar, e.g.
// "race     [#########.....................]  30%  150/500 requests  1.2s".
func renderBar(label, unit string, done, total int64, elapsed time.Duration) string {
	frac := 1.0
	if total > 0 {
		frac = min(max(float64(done)/float64(total), 0), 1)
	}
	cells := int(frac * barWidth)
	return fmt.Sprintf("%-10s [%s%s] %3.0f%%  %d/%d %s  %.1fs ",
		label, strings.Repeat("#", cells), strings.Repeat(".", barWidth-cells),
		frac*100, done, total, unit, elapsed.Seconds())
}
