package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressMode says how progress reaches the user.
type progressMode int

const (
	// progressLog prints a plain line now and then: stderr is a file or a
	// CI log, where carriage-return redraws would pile up.
	progressLog progressMode = iota
	// progressTerminal redraws one bar in place.
	progressTerminal
	// progressQuiet prints nothing (--quiet).
	progressQuiet
)

// logEvery is the interval between two plain progress lines in a log.
const logEvery = 10 * time.Second

// progressModeOf picks the mode for w: quiet when asked, a bar when w is a
// terminal, plain lines otherwise.
func progressModeOf(w io.Writer, quiet bool) progressMode {
	if quiet {
		return progressQuiet
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return progressTerminal
	}
	return progressLog
}

// progress reports how far a scenario is, with its rate and the time left,
// on w. Add and SetTotal are safe for concurrent use; Stop must be called
// once.
type progress struct {
	w     io.Writer
	mode  progressMode
	label string
	unit  string
	bar   *progressbar.ProgressBar // keeps the count, the rate and the ETA in every mode
	stop  chan struct{}
	wg    sync.WaitGroup
}

// startProgress starts reporting on total units (requests, steps…).
func startProgress(w io.Writer, mode progressMode, label, unit string, total int64) *progress {
	p := &progress{w: w, mode: mode, label: label, unit: unit, stop: make(chan struct{})}
	out := io.Discard
	if mode == progressTerminal {
		out = w
	}
	p.bar = progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(out),
		progressbar.OptionSetDescription(fmt.Sprintf("%-10s", label)),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(250*time.Millisecond),
		progressbar.OptionSetRenderBlankState(mode == progressTerminal),
	)
	if mode == progressLog {
		p.wg.Go(func() {
			tick := time.NewTicker(logEvery)
			defer tick.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-tick.C:
					fmt.Fprintln(p.w, p.line())
				}
			}
		})
	}
	return p
}

// Add records n more units done.
func (p *progress) Add(n int64) { _ = p.bar.Add64(n) }

// SetTotal changes the number of units expected, when a run ends early.
func (p *progress) SetTotal(n int64) { p.bar.ChangeMax64(max(n, 1)) }

// Stop reports the final state and ends the line.
func (p *progress) Stop() {
	close(p.stop)
	p.wg.Wait()
	switch p.mode {
	case progressTerminal:
		_ = p.bar.Exit()
		fmt.Fprintf(p.w, "\r%s\n", p.bar.String())
	case progressLog:
		fmt.Fprintln(p.w, p.line())
	}
}

// line is one plain progress line:
// "race: 150/500 requests (30%), 125 requests/s, 2.8s left".
func (p *progress) line() string {
	return renderLine(p.label, p.unit, p.bar.State())
}

func renderLine(label, unit string, s progressbar.State) string {
	rate := 0.0
	if s.SecondsSince > 0 {
		rate = float64(s.CurrentNum) / s.SecondsSince
	}
	left := "done"
	if s.CurrentNum < s.Max {
		left = "ETA " + (time.Duration(s.SecondsLeft * float64(time.Second))).Round(100*time.Millisecond).String()
	}
	return fmt.Sprintf("%s: %d/%d %s (%.0f%%), %.0f %s/s, %s", label, s.CurrentNum, s.Max, unit, 100*s.CurrentPercent, rate, unit, left)
}
