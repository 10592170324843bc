package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports a long run's advance on stderr: a bar with rate and ETA
// on a terminal, a plain line at every tenth of the work otherwise (logs and
// CI keep no carriage returns), nothing with --quiet. A nil *progress
// reports nothing. Add is called from one goroutine.
type progress struct {
	bar   *progressbar.ProgressBar // on a terminal
	w     io.Writer                // plain lines otherwise
	label string
	unit  string
	total int64
	done  int64
	next  int64 // the done count of the next plain line
	began time.Time
}

// reporter makes the progress reports of one command.
type reporter struct {
	w     io.Writer
	tty   bool
	quiet bool
}

func newReporter(stderr io.Writer, quiet bool) reporter {
	f, ok := stderr.(*os.File)
	return reporter{w: stderr, tty: ok && term.IsTerminal(int(f.Fd())), quiet: quiet}
}

// start begins reporting total units of work (0 when unknown).
func (r reporter) start(label, unit string, total int64) *progress {
	if r.quiet {
		return nil
	}
	p := &progress{w: r.w, label: label, unit: unit, total: total, next: total / 10, began: time.Now()}
	if r.tty {
		max := total
		if max <= 0 {
			max = -1 // a spinner
		}
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(r.w),
			progressbar.OptionSetDescription(label),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(unit),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200 * time.Millisecond),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(r.w) }),
		}
		if unit == "bytes" {
			opts = append(opts, progressbar.OptionShowBytes(true))
		}
		p.bar = progressbar.NewOptions64(max, opts...)
	}
	return p
}

// Add records n more units done.
func (p *progress) Add(n int64) {
	if p == nil || n == 0 {
		return
	}
	p.done += n
	if p.bar != nil {
		_ = p.bar.Add64(n) // a bar that fails to draw is no reason to stop
		return
	}
	if p.total > 0 && p.done >= p.next && p.done < p.total {
		p.line()
		for p.next <= p.done {
			p.next += max(1, p.total/10)
		}
	}
}

// Finish ends the report with the final count and rate.
func (p *progress) Finish() {
	if p == nil {
		return
	}
	if p.bar != nil {
		_ = p.bar.Finish()
		return
	}
	p.line()
}

func (p *progress) line() {
	secs := time.Since(p.began).Seconds()
	rate := float64(p.done) / max(secs, 1e-9)
	if p.total > 0 {
		fmt.Fprintf(p.w, "lab: %s: %3.0f%% (%d/%d %s, %.3g %s/s)\n", p.label, 100*float64(p.done)/float64(p.total), p.done, p.total, p.unit, rate, p.unit)
		return
	}
	fmt.Fprintf(p.w, "lab: %s: %d %s (%.3g %s/s)\n", p.label, p.done, p.unit, rate, p.unit)
}
