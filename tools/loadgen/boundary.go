package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// The boundary attack: quiet, then a burst from a quarter window before to a
// quarter window after a window boundary, repeated at every other boundary so
// that the window before each burst starts unused. Inside a burst loadgen
// sends burstFactor × limit / window requests per second: 2×limit on each
// side of the boundary, enough to exhaust any budget the moment it opens.
const (
	burstFactor = 8
	binWidth    = 100 * time.Millisecond
	// planLead is the least time left to start the attackers before the
	// first send.
	planLead = 100 * time.Millisecond
)

// unixFloor truncates t down to a multiple of w since the Unix epoch, as the
// service's fixed window does.
func unixFloor(t time.Time, w time.Duration) time.Time {
	n := t.UnixNano()
	off := n % int64(w)
	if off < 0 {
		off += int64(w)
	}
	return time.Unix(0, n-off)
}

// boundaryPlan is the schedule of a boundary attack, the same for every
// policy.
type boundaryPlan struct {
	Limit  int64
	Window time.Duration
	// First is the window boundary of the first burst, a multiple of Window
	// since the Unix epoch; burst c straddles First + 2·c·Window.
	First  time.Time
	Cycles int
	// Sends are the instants of the requests, sorted.
	Sends []time.Time
}

// planBoundary schedules cycles bursts starting after now.
func planBoundary(now time.Time, limit int64, window time.Duration, cycles int) boundaryPlan {
	quarter := window / 4
	t := now.Add(planLead + quarter)
	first := unixFloor(t, window)
	if first.Before(t) {
		first = first.Add(window)
	}
	perBurst := burstFactor * limit / 2 // requests in the half window a burst lasts
	plan := boundaryPlan{Limit: limit, Window: window, First: first, Cycles: cycles}
	for c := range cycles {
		begin := first.Add(time.Duration(2*c)*window - quarter)
		for i := range perBurst {
			plan.Sends = append(plan.Sends, begin.Add(time.Duration(int64(window/2)*i/perBurst)))
		}
	}
	return plan
}

// Rate is the send rate inside a burst, in requests per second.
func (p boundaryPlan) Rate() float64 {
	return burstFactor * float64(p.Limit) / p.Window.Seconds()
}

// origin is where the plot's timeline starts: half a window before the first
// burst's boundary.
func (p boundaryPlan) origin() time.Time { return p.First.Add(-p.Window / 2) }

// bins is the number of binWidth bins from origin to half a window after
// the last burst's boundary.
func (p boundaryPlan) bins() int {
	span := time.Duration(2*(p.Cycles-1))*p.Window + p.Window
	return int(span / binWidth)
}

// axis returns the plot's time axis, in seconds from First.
func (p boundaryPlan) axis() boundaryAxis {
	a := boundaryAxis{Origin: -p.Window.Seconds() / 2, Bin: binWidth.Seconds()}
	for k := range 2*(p.Cycles-1) + 1 {
		a.Boundaries = append(a.Boundaries, float64(k)*p.Window.Seconds())
	}
	return a
}

// boundaryRow is what one policy did under the boundary attack.
type boundaryRow struct {
	Policy string
	tally
	// MaxSpan is the most requests the service certainly admitted within
	// one window-length span (see MaxWithin).
	MaxSpan int
	// Counts are the admitted requests per binWidth bin from the plan's
	// origin, each placed at the middle of its flight.
	Counts []int
}

// Multiple is MaxSpan as a multiple of the limit.
func (r boundaryRow) Multiple(limit int64) float64 { return float64(r.MaxSpan) / float64(limit) }

// analyzeBoundary reduces one policy's results.
func analyzeBoundary(plan boundaryPlan, policy string, rs vegeta.Results) boundaryRow {
	row := boundaryRow{Policy: policy}
	var spans []Span
	var mids []time.Time
	for i := range rs {
		r := &rs[i]
		row.add(r)
		if outcomeOf(r) == admitted {
			s := spanOf(r)
			spans = append(spans, s)
			mids = append(mids, s.Start.Add(s.End.Sub(s.Start)/2))
		}
	}
	row.MaxSpan = MaxWithin(spans, plan.Window)
	row.Counts = Bins(mids, plan.origin(), binWidth, plan.bins())
	return row
}

// boundaryResult is the outcome of the boundary scenario.
type boundaryResult struct {
	Plan boundaryPlan
	Rows []boundaryRow
	Plot string // PNG file name in the output folder
}

// runBoundary runs the boundary attack on every policy at once, one key
// each, and plots the admitted requests.
func runBoundary(ctx context.Context, e *env) (boundaryResult, error) {
	o := e.opts
	plan := planBoundary(time.Now(), o.limit, o.window, o.cycles)
	prog := startProgress(e.stderr, e.progress, "boundary", "requests", int64(len(plan.Sends)*len(o.policies)))
	res := boundaryResult{Plan: plan, Rows: make([]boundaryRow, len(o.policies)), Plot: "boundary.png"}
	var wg sync.WaitGroup
	for i, policy := range o.policies {
		wg.Go(func() {
			rs := attack(ctx, e.client, attackSpec{
				Name:     "boundary-" + policy,
				Targeter: vegeta.NewStaticTargeter(checkTarget(o.target, policy, e.key("boundary", policy))),
				Pacer:    schedulePacer(plan.Sends),
				Workers:  uint64(o.workers),
			}, prog)
			res.Rows[i] = analyzeBoundary(plan, policy, rs)
		})
	}
	wg.Wait()
	prog.Stop()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("loadgen: boundary: %w", err)
	}
	panels := make([]boundaryPanel, len(res.Rows))
	for i, r := range res.Rows {
		panels[i] = boundaryPanel{
			Title:  fmt.Sprintf("%s: at most %d admitted in any %s span (%.2f× the limit of %d)", r.Policy, r.MaxSpan, plan.Window, r.Multiple(plan.Limit), plan.Limit),
			Counts: r.Counts,
		}
	}
	return res, plotBoundary(filepath.Join(o.out, res.Plot), panels, plan.axis())
}

// expectations says what each algorithm should show under the boundary
// attack, by the policy names of the demo configuration.
var expectations = map[string]string{
	"fixed_window":       "≈2×: a full limit just before the boundary and another just after",
	"sliding_log":        "≤1×: exact, by construction",
	"sliding_window":     "a small excess (≈1.2× here; < 2× in the worst case)",
	"token_bucket":       "≈1.5× here: a full bucket (1×) plus the refill during the burst",
	"sliding_log_unsafe": "≤1× at this low concurrency; see the race",
}

func (b boundaryResult) markdown(w io.Writer) {
	p := b.Plan
	fmt.Fprintf(w, "## Boundary: the fixed window's double burst\n\n")
	fmt.Fprintf(w, "Each policy (limit %d per %s) gets its own key and the same traffic: quiet, then %.0f requests/s "+
		"from %s before to %s after every other window boundary (%d bursts of %d requests, windows aligned on Unix time "+
		"as the fixed window truncates it). The worst span is the most requests admitted within any %s span, counting "+
		"only requests whose whole flight (send to answer) fits in the span, so it never overstates.\n\n",
		p.Limit, p.Window, p.Rate(), p.Window/4, p.Window/4, p.Cycles, len(p.Sends)/max(p.Cycles, 1), p.Window)
	fmt.Fprintf(w, "| policy | sent | admitted | refused | failed | worst %s span | × limit | expected |\n", p.Window)
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range b.Rows {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %.2f× | %s |\n",
			r.Policy, r.Total(), r.Admitted, r.Refused, r.Failed, r.MaxSpan, r.Multiple(p.Limit), expectation(r.Policy))
	}
	fmt.Fprintln(w)
	for _, r := range b.Rows {
		fmt.Fprint(w, r.note(r.Policy))
	}
	fmt.Fprintf(w, "\n![admitted requests per %s, window boundaries dashed](%s)\n\n", binWidth, b.Plot)
}

func (b boundaryResult) summary(w io.Writer) {
	fmt.Fprintf(w, "boundary  limit %d per %s, %d bursts at %.0f/s\n", b.Plan.Limit, b.Plan.Window, b.Plan.Cycles, b.Plan.Rate())
	for _, r := range b.Rows {
		fmt.Fprintf(w, "  %-20s worst %s span %4d = %.2f× limit  (admitted %d, refused %d, failed %d)\n",
			r.Policy, b.Plan.Window, r.MaxSpan, r.Multiple(b.Plan.Limit), r.Admitted, r.Refused, r.Failed)
	}
}

func expectation(policy string) string {
	if s, ok := expectations[policy]; ok {
		return s
	}
	return "—"
}
