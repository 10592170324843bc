package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
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
// refusals, side by side.
func (r *accuracyReport) plotErrors(path string) error {
	p := plot.New()
	p.Add(plotter.NewGrid())
	attempts := r.Truth == truthAttempts
	var shares []string
	for _, a := range r.Algorithms {
		if attempts || a.Algorithm != string(limiter.SlidingLog) {
			shares = append(shares, fmt.Sprintf("%s %.1f%%", a.Algorithm, 100*a.ErrorShare))
		}
	}
	p.Title.Text = fmt.Sprintf("%s trace (%d requests): share of decisions an exact sliding log takes the other way\n%s",
		r.Trace.Kind, r.Requests, strings.Join(shares, ", "))
	if attempts {
		p.Title.Text = fmt.Sprintf("%s trace (%d requests), every attempt counted: share of requests wrongly allowed or limited\n%s",
			r.Trace.Kind, r.Requests, strings.Join(shares, ", "))
	}
	p.Y.Label.Text = "share of all requests (%)"
	allows, refusals := make(plotter.Values, len(r.Algorithms)), make(plotter.Values, len(r.Algorithms))
	names := make([]string, len(r.Algorithms))
	for i, a := range r.Algorithms {
		allows[i], refusals[i], names[i] = 100*a.FalseAllowShare, 100*a.FalseRefusalShare, a.Algorithm
	}
	w := vg.Points(28)
	top := 0.0
	for i, set := range []struct {
		label string
		vals  plotter.Values
	}{{"false allows", allows}, {"false refusals", refusals}} {
		bars, err := plotter.NewBarChart(set.vals, w)
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(2*i-1) * w / 2
		p.Add(bars)
		p.Legend.Add(set.label, bars)
		// A value on each bar; 0 where the bar is absent (sliding_log is
		// the truth, so it has none).
		xys := make(plotter.XYs, len(set.vals))
		texts := make([]string, len(set.vals))
		for j, v := range set.vals {
			xys[j] = plotter.XY{X: float64(j), Y: v}
			texts[j] = fmt.Sprintf("%.1f%%", v)
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
	if !attempts {
		names[slices.Index(names, string(limiter.SlidingLog))] += "\n(the truth: no error)"
	}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Y.Min = 0
	p.Y.Max = 1.25*top + 0.1 // headroom for the labels and the legend
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	return save(p, path)
}

// plotWorst draws, a twentieth of a window at a time, the units the worst
// source had admitted in the window-length span just past, by the exact log
// and by each algorithm: where a line rises above the limit, the algorithm
// let a burst through.
func (r *accuracyReport) plotWorst(path string) error {
	s := r.worst
	p := plot.New()
	p.Add(plotter.NewGrid())
	var attempts int64
	for _, n := range s.attempts {
		attempts += n
	}
	// The series starts worstLead windows before the first disagreement;
	// its first window only fills the trailing sums and is not drawn.
	line := func(counts []int64) plotter.XYs {
		var xy plotter.XYs
		var trailing int64
		for i := range counts {
			trailing += counts[i]
			if j := i - seriesBins; j >= 0 {
				trailing -= counts[j]
			}
			if i >= seriesBins-1 {
				xy = append(xy, plotter.XY{X: float64(int64(i+1)*s.bin) / float64(time.Second), Y: float64(trailing)})
			}
		}
		return xy
	}
	var peaks []string
	top := float64(r.Policy.Limit)
	for a, alg := range labAlgorithms {
		if alg == limiter.SlidingLog {
			continue
		}
		peak := 0.0
		for _, xy := range line(s.algs[a]) {
			peak = max(peak, xy.Y)
		}
		top = max(top, peak)
		peaks = append(peaks, fmt.Sprintf("%s %.2f×", alg, peak/float64(r.Policy.Limit)))
	}
	p.Title.Text = fmt.Sprintf("%s trace, source %s (%d requests here, %d false decisions in all), where the algorithms first disagree\nmost admitted in one window, ÷ the limit: %s (the exact log never exceeds 1×)",
		r.Trace.Kind, r.WorstSource, attempts, r.WorstFalses, strings.Join(peaks, ", "))
	p.X.Label.Text = "seconds since " + time.Unix(0, s.origin).UTC().Format(time.RFC3339Nano)
	p.Y.Label.Text = "units admitted in the last window"
	exact, err := plotter.NewLine(line(s.exact))
	if err != nil {
		return fmt.Errorf("lab: plot: %w", err)
	}
	exact.Color, exact.Width = color.Black, vg.Points(3)
	p.Add(exact)
	p.Legend.Add("exact sliding log", exact)
	for a, alg := range labAlgorithms {
		if alg == "sliding_log" {
			continue // on the exact line by construction
		}
		l, err := plotter.NewLine(line(s.algs[a]))
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		l.Color = plotutil.Color(a)
		l.Dashes = plotutil.Dashes(a)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(string(alg), l)
	}
	limit := plotter.NewFunction(func(float64) float64 { return float64(r.Policy.Limit) })
	limit.Color = color.Gray{Y: 150}
	limit.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(limit)
	p.Legend.Add("limit", limit)
	p.Legend.Top = true
	p.Y.Min = 0
	p.Y.Max = 1.3 * top
	return save(p, path)
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
