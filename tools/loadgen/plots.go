package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot sizes. PNGs are drawn at vgimg.DefaultDPI (96 dots per inch).
const (
	plotWidth   = 10 * vg.Inch
	panelHeight = 2.4 * vg.Inch
	chartHeight = 5 * vg.Inch
)

// savePNG draws plots stacked top to bottom, each panelH high, into a PNG
// file at path.
func savePNG(path string, panelH vg.Length, plots ...*plot.Plot) error {
	if len(plots) == 0 {
		return fmt.Errorf("loadgen: plot %s: nothing to draw", path)
	}
	img := vgimg.New(plotWidth, panelH*vg.Length(len(plots)))
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Millimeter, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 3 * vg.Millimeter}
	canvases := plot.Align(rows, tiles, draw.New(img))
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadgen: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("loadgen: plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("loadgen: plot %s: %w", path, err)
	}
	return nil
}

// boundaryPanel is one policy's admitted requests per bin.
type boundaryPanel struct {
	Title  string
	Counts []int
}

// boundaryAxis places the boundary panels on a common time axis, in seconds
// relative to the first burst's window boundary.
type boundaryAxis struct {
	Origin     float64   // where bin 0 starts
	Bin        float64   // bin width
	Boundaries []float64 // window boundaries to mark
}

// plotBoundary writes one panel per policy: a histogram of admitted requests
// per bin with the window boundaries as dashed vertical lines.
func plotBoundary(path string, panels []boundaryPanel, axis boundaryAxis) error {
	peak := 1
	for _, p := range panels {
		for _, c := range p.Counts {
			peak = max(peak, c)
		}
	}
	plots := make([]*plot.Plot, len(panels))
	for i, panel := range panels {
		p := plot.New()
		p.Title.Text = panel.Title
		p.X.Label.Text = "seconds from the first burst's window boundary"
		p.Y.Label.Text = fmt.Sprintf("admitted / %gs", axis.Bin)
		p.Y.Min, p.Y.Max = 0, float64(peak)*1.1
		p.X.Min = axis.Origin
		p.X.Max = axis.Origin + axis.Bin*float64(len(panel.Counts))
		p.X.Tick.Marker = boundaryTicks(axis.Boundaries)
		h := &plotter.Histogram{Width: axis.Bin, FillColor: plotutil.Color(i)}
		h.LineStyle.Width = 0
		for b, c := range panel.Counts {
			lo := axis.Origin + axis.Bin*float64(b)
			h.Bins = append(h.Bins, plotter.HistogramBin{Min: lo, Max: lo + axis.Bin, Weight: float64(c)})
		}
		p.Add(h)
		for _, x := range axis.Boundaries {
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: p.Y.Max}})
			if err != nil {
				return fmt.Errorf("loadgen: plot boundary: %w", err)
			}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
		}
		plots[i] = p
	}
	return savePNG(path, panelHeight, plots...)
}

// boundaryTicks labels every window boundary.
func boundaryTicks(at []float64) plot.ConstantTicks {
	ticks := make(plot.ConstantTicks, len(at))
	for i, x := range at {
		ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'g', -1, 64)}
	}
	return ticks
}

// raceBars is one policy's admitted count in each race round.
type raceBars struct {
	Policy   string
	Admitted []int
}

// plotRace writes a grouped bar chart: one group per policy, one bar per
// round, and the limit as a dashed horizontal line.
func plotRace(path string, groups []raceBars, limit int64, n int) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%d simultaneous requests on a fresh key: admitted per round (limit %d, dashed)", n, limit)
	p.Y.Label.Text = "admitted"
	p.Y.Min = 0
	rounds, peak := 0, int(limit)
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Policy
		rounds = max(rounds, len(g.Admitted))
		for _, a := range g.Admitted {
			peak = max(peak, a)
		}
	}
	p.Y.Max = float64(peak) * 1.3 // headroom for the legend
	width := vg.Points(max(4, 60/float64(max(rounds, 1))))
	for r := range rounds {
		vals := make(plotter.Values, len(groups))
		for i, g := range groups {
			if r < len(g.Admitted) {
				vals[i] = float64(g.Admitted[r])
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("loadgen: plot race: %w", err)
		}
		bars.Color = plotutil.Color(r)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(r)-float64(rounds-1)/2)
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("round %d", r+1), bars)
	}
	l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: float64(limit)}, {X: float64(len(groups)) - 0.5, Y: float64(limit)}})
	if err != nil {
		return fmt.Errorf("loadgen: plot race: %w", err)
	}
	l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(l)
	p.Legend.Top = true
	p.Legend.Left = true
	if len(names) > 0 {
		p.NominalX(names...) // it panics on no names
	}
	return savePNG(path, chartHeight, p)
}

// latencyCurve is one policy's latencies, sorted ascending.
type latencyCurve struct {
	Policy string
	Sorted []time.Duration
}

// nines are the quantiles marked on the latency plot's x axis.
var nines = []struct {
	q     float64
	label string
}{{0, "0%"}, {0.5, "50%"}, {0.9, "90%"}, {0.99, "99%"}, {0.999, "99.9%"}, {0.9999, "99.99%"}}

// ninesX maps quantile q to the latency plot's x axis: -log10(1-q), so that
// 90% is 1, 99% is 2 and so on.
func ninesX(q float64) float64 { return -math.Log10(1 - q) }

// plotLatency writes the latency distribution of each policy: latency
// (milliseconds) against quantile on a "nines" scale, the way HdrHistogram
// draws it.
func plotLatency(path, title string, curves []latencyCurve) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "quantile"
	p.Y.Label.Text = "latency (ms)"
	p.Y.Min = 0
	top := 0.0
	for i, c := range curves {
		n := len(c.Sorted)
		if n == 0 {
			continue
		}
		xys := make(plotter.XYs, n)
		for k, d := range c.Sorted {
			// The k-th (from 0) of n sorted values is drawn at quantile k/n,
			// so the maximum sits at 1-1/n, as far as n samples can see.
			xys[k] = plotter.XY{X: ninesX(float64(k) / float64(n)), Y: float64(d) / float64(time.Millisecond)}
		}
		top = max(top, xys[n-1].X)
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("loadgen: plot latency: %w", err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(c.Policy, l)
	}
	var ticks []plot.Tick
	for _, m := range nines {
		if x := ninesX(m.q); x <= top+1e-9 {
			ticks = append(ticks, plot.Tick{Value: x, Label: m.label})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top = true
	p.Legend.Left = true
	return savePNG(path, chartHeight, p)
}
