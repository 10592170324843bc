package main

import (
	"cmp"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot size. PNGs are drawn at 96 dots per inch.
const (
	plotWidth  = 9 * vg.Inch
	plotHeight = 4.5 * vg.Inch
)

// plot writes the report's plots into dir, named after the trace, and
// lists them in r.Plots.
func (r *accuracyReport) plot(dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	errs := "accuracy-" + name + "-errors.png"
	if err := r.plotErrors(filepath.Join(dir, errs)); err != nil {
		return err
	}
	r.Plots = append(r.Plots, errs)
	if r.worst != nil {
		worst := "accuracy-" + name + "-worst-source.png"
		if err := r.plotWorst(filepath.Join(dir, worst)); err != nil {
			return err
		}
		r.Plots = append(r.Plots, worst)
	}
	return nil
}

// plotErrors draws, per algorithm, the shares of false allows and false
// refusals, side by side, each bar labelled with its value. Under the
// admitted truth sliding_log is the truth itself: it has no bar, and its
// slot says so.
func (r *accuracyReport) plotErrors(path string) error {
	p := plot.New()
	p.Add(plotter.NewGrid())
	attempts := r.Truth == truthAttempts
	judged := r.Algorithms
	if !attempts {
		judged = slices.DeleteFunc(slices.Clone(judged), func(a algAccuracy) bool { return a.Algorithm == string(limiter.SlidingLog) })
	}
	best := slices.MinFunc(judged, func(x, y algAccuracy) int { return cmp.Compare(x.ErrorShare, y.ErrorShare) })
	worst := slices.MaxFunc(judged, func(x, y algAccuracy) int { return cmp.Compare(x.ErrorShare, y.ErrorShare) })
	judge := "judged against an exact sliding log of the units admitted"
	if attempts {
		judge = "judged against every attempt counted in a sliding window (Cloudflare's measure)"
	}
	p.Title.Text = fmt.Sprintf("%s trace: %s errs least (%s of requests), %s most (%s)\n%s; %s requests",
		r.Trace.Kind, best.Algorithm, shareText(best.ErrorShare), worst.Algorithm, shareText(worst.ErrorShare), judge, thousands(r.Requests))
	p.Y.Label.Text = "share of all requests (%)"
	p.X.Label.Text = "algorithm (same limit, same trace)"
	allows, refusals := make(plotter.Values, len(r.Algorithms)), make(plotter.Values, len(r.Algorithms))
	names := make([]string, len(r.Algorithms))
	for i, a := range r.Algorithms {
		allows[i], refusals[i], names[i] = 100*a.FalseAllowShare, 100*a.FalseRefusalShare, a.Algorithm
	}
	truth := -1
	if !attempts {
		truth = slices.Index(names, string(limiter.SlidingLog))
		names[truth] += "\n(the truth itself: no bar)"
	}
	w := vg.Points(28)
	top := 0.0
	for i, set := range []struct {
		label string
		vals  plotter.Values
	}{{"false allows (admitted, should refuse)", allows}, {"false refusals (refused, should admit)", refusals}} {
		bars, err := plotter.NewBarChart(set.vals, w)
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(2*i-1) * w / 2
		p.Add(bars)
		p.Legend.Add(set.label, bars)
		xys := make(plotter.XYs, len(set.vals))
		texts := make([]string, len(set.vals))
		for j, v := range set.vals {
			xys[j] = plotter.XY{X: float64(j), Y: v}
			if j != truth {
				texts[j] = shareText(v / 100)
			}
			top = max(top, v)
		}
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		labels.Offset.X = vg.Length(2*i-1) * w / 2
		for j := range labels.TextStyle {
			labels.TextStyle[j].XAlign = -0.5
			labels.TextStyle[j].YAlign = 0
		}
		p.Add(labels)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Y.Min = 0
	// Headroom: the value labels, and the legend above the tallest bar.
	p.Y.Max = 1.4*top + 0.1
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	return save(p, path)
}

// shareText prints a share as a percentage, with more digits for the small
// ones (a bar of 0.004% must not read 0.0%).
func shareText(share float64) string {
	switch v := 100 * share; {
	case v == 0:
		return "0"
	case v < 0.1:
		return fmt.Sprintf("%.3f%%", v)
	default:
		return fmt.Sprintf("%.1f%%", v)
	}
}

// thousands prints n with thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// trailing turns a series' per-bin counts into the units of the
// window-length span ending at each bin; the first window only fills the
// sums and is left out.
func (s *series) trailing(counts []int64) plotter.XYs {
	var xy plotter.XYs
	var sum int64
	for i := range counts {
		sum += counts[i]
		if j := i - seriesBins; j >= 0 {
			sum -= counts[j]
		}
		if i >= seriesBins-1 {
			xy = append(xy, plotter.XY{X: float64(int64(i+1)*s.bin) / float64(time.Second), Y: float64(sum)})
		}
	}
	return xy
}

// disagreement returns the spans, in the x of trailing, where some
// algorithm's line leaves the truth's, in order; sliding_log counts only
// when it is not the truth itself.
func (s *series) disagreement(withLog bool) [][2]float64 {
	exact := s.trailing(s.exact)
	differs := make([]bool, len(exact))
	for a, alg := range labAlgorithms {
		if alg == limiter.SlidingLog && !withLog {
			continue
		}
		for i, xy := range s.trailing(s.algs[a]) {
			differs[i] = differs[i] || xy.Y != exact[i].Y
		}
	}
	var spans [][2]float64
	for i, d := range differs {
		switch {
		case !d:
		case i > 0 && differs[i-1]:
			spans[len(spans)-1][1] = exact[i].X
		default:
			spans = append(spans, [2]float64{exact[i].X, exact[i].X})
		}
	}
	return spans
}

// plotWorst draws, a twentieth of a window at a time, the units the worst
// source had admitted in the window-length span just past, by the exact log
// and by each algorithm, zoomed on the span where they disagree (shaded):
// where a line rises above the limit, the algorithm let a burst through.
func (r *accuracyReport) plotWorst(path string) error {
	s := r.worst
	p := plot.New()
	p.Add(plotter.NewGrid())
	var attempts int64
	for _, n := range s.attempts {
		attempts += n
	}
	limit := float64(r.Policy.Limit)
	// Under the attempts truth the black line is what that truth admits
	// (while the attempts in the window stay within the limit), and
	// sliding_log is judged like the others.
	attemptsTruth := r.Truth == truthAttempts
	truthName := "exact sliding log (= sliding_log)"
	if attemptsTruth {
		truthName = "the truth: admitted while attempts in the window ≤ limit"
	}
	var peaks []string
	top, peakX, peakAlg := limit, 0.0, ""
	for a, alg := range labAlgorithms {
		if alg == limiter.SlidingLog && !attemptsTruth {
			continue // on the exact line by construction
		}
		peak := 0.0
		for _, xy := range s.trailing(s.algs[a]) {
			if xy.Y > peak {
				peak = xy.Y
			}
			if xy.Y > top {
				top, peakX, peakAlg = xy.Y, xy.X, string(alg)
			}
		}
		peaks = append(peaks, fmt.Sprintf("%s %.2f×", alg, peak/limit))
	}
	window := r.Policy.WindowSeconds
	// Zoom: from a window before the first disagreement to a window and a
	// half past it or past the highest peak, whichever is later.
	xs := s.trailing(s.exact)
	zoom := [2]float64{xs[0].X, xs[len(xs)-1].X}
	if spans := s.disagreement(attemptsTruth); len(spans) > 0 {
		for i, sp := range spans {
			shade, err := plotter.NewPolygon(plotter.XYs{{X: sp[0], Y: 0}, {X: sp[1], Y: 0}, {X: sp[1], Y: 1.5 * top}, {X: sp[0], Y: 1.5 * top}})
			if err != nil {
				return fmt.Errorf("lab: plot: %w", err)
			}
			shade.Color, shade.LineStyle.Width = color.Gray{Y: 232}, 0
			p.Add(shade)
			if i == 0 {
				p.Legend.Add("the algorithms disagree", shade)
			}
		}
		zoom = [2]float64{max(xs[0].X, spans[0][0]-window), min(xs[len(xs)-1].X, max(spans[0][0], peakX)+1.5*window)}
	}
	finding := "no algorithm let more than the limit through in one window"
	if peakAlg != "" {
		finding = fmt.Sprintf("%s let %.2f× the limit through in one window", peakAlg, top/limit)
	}
	p.Title.Text = fmt.Sprintf("%s trace, source %s: %s\nmost admitted in one window ÷ limit: %s (the truth: 1× at most)\n%s requests in this series, %s false decisions in all (shaded: where the lines part)",
		r.Trace.Kind, r.WorstSource, finding, strings.Join(peaks, ", "), thousands(attempts), thousands(r.WorstFalses))
	p.X.Label.Text = "seconds since " + time.Unix(0, s.origin).UTC().Format(time.RFC3339)
	p.Y.Label.Text = fmt.Sprintf("units admitted in the last %gs (limit %d)", window, r.Policy.Limit)
	exact, err := plotter.NewLine(s.trailing(s.exact))
	if err != nil {
		return fmt.Errorf("lab: plot: %w", err)
	}
	exact.Color, exact.Width = color.Black, vg.Points(3)
	p.Add(exact)
	p.Legend.Add(truthName, exact)
	for a, alg := range labAlgorithms {
		if alg == limiter.SlidingLog && !attemptsTruth {
			continue // on the exact line by construction
		}
		l, err := plotter.NewLine(s.trailing(s.algs[a]))
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		l.Color = plotutil.Color(a)
		l.Dashes = plotutil.Dashes(a)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(string(alg), l)
	}
	lim := plotter.NewFunction(func(float64) float64 { return limit })
	lim.Color = color.Gray{Y: 150}
	lim.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(lim)
	p.Legend.Add("limit", lim)
	p.Legend.Top = true
	p.Y.Min = 0
	// Headroom above the highest line for the legend: the spike is never
	// clipped.
	p.Y.Max = 1.5 * top
	p.Y.Tick.Marker = limitTicks{limit: limit}
	p.X.Min, p.X.Max = zoom[0], zoom[1] // after Add, which widens the axes to the data
	return save(p, path)
}

// limitTicks marks the y axis in halves of the limit, the limit named.
type limitTicks struct{ limit float64 }

func (t limitTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for i := 0; float64(i)*t.limit/2 <= hi; i++ {
		v := float64(i) * t.limit / 2
		if v < lo {
			continue
		}
		label := strconv.FormatFloat(v, 'f', -1, 64)
		if i == 2 {
			label += " (limit)"
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// save writes p as a PNG.
func save(p *plot.Plot, path string) error {
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Title.TextStyle.Font.Size = vg.Points(11)
	if err := p.Save(plotWidth, plotHeight, path); err != nil {
		return fmt.Errorf("lab: plot %s: %w", path, err)
	}
	return nil
}
