package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
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
		p.X.Label.Text = "seconds from the first burst's window boundary (dashed lines: the window boundaries)"
		p.Y.Label.Text = fmt.Sprintf("admitted per %gs", axis.Bin)
		p.Y.Min, p.Y.Max = 0, float64(peak)*1.35 // headroom for the legend
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
		for j, x := range axis.Boundaries {
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: p.Y.Max}})
			if err != nil {
				return fmt.Errorf("loadgen: plot boundary: %w", err)
			}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			if j == 0 {
				p.Legend.Add("window boundary", l)
			}
		}
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(9)
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
// round, each labelled with its count, and the limit as a dashed line. The
// title says which policies kept to the limit in every round.
func plotRace(path string, groups []raceBars, limit int64, n int) error {
	p := plot.New()
	p.Y.Label.Text = "requests admitted in the round"
	p.X.Label.Text = fmt.Sprintf("policy (bars left to right: rounds 1 to %d, each %d simultaneous requests on a fresh key)", raceRounds(groups), n)
	p.Y.Min = 0
	rounds, peak := raceRounds(groups), int(limit)
	names := make([]string, len(groups))
	var kept, over []string
	for i, g := range groups {
		names[i] = g.Policy
		most := 0
		for _, a := range g.Admitted {
			most = max(most, a)
		}
		peak = max(peak, most)
		if int64(most) <= limit {
			kept = append(kept, g.Policy)
		} else {
			over = append(over, fmt.Sprintf("%s up to %d (%.1f×)", g.Policy, most, float64(most)/float64(limit)))
		}
	}
	p.Title.Text = fmt.Sprintf("%d simultaneous requests on a fresh key, limit %d: ", n, limit)
	switch {
	case len(over) == 0:
		p.Title.Text += "every policy admitted at most the limit in every round"
	case len(kept) == 0:
		p.Title.Text += "over the limit: " + strings.Join(over, ", ")
	default:
		p.Title.Text += fmt.Sprintf("%s never over the limit\n%s", strings.Join(kept, ", "), strings.Join(over, ", "))
	}
	p.Y.Max = float64(peak) * 1.35 // headroom for the labels and the legend
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
		xys := make(plotter.XYs, len(vals))
		texts := make([]string, len(vals))
		for i, v := range vals {
			xys[i], texts[i] = plotter.XY{X: float64(i), Y: v}, strconv.Itoa(int(v))
		}
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return fmt.Errorf("loadgen: plot race: %w", err)
		}
		labels.Offset.X = bars.Offset
		for j := range labels.TextStyle {
			labels.TextStyle[j].XAlign, labels.TextStyle[j].YAlign = -0.5, 0
			labels.TextStyle[j].Font.Size = vg.Points(8)
		}
		p.Add(labels)
	}
	l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: float64(limit)}, {X: float64(len(groups)) - 0.5, Y: float64(limit)}})
	if err != nil {
		return fmt.Errorf("loadgen: plot race: %w", err)
	}
	l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(l)
	p.Legend.Add(fmt.Sprintf("limit (%d)", limit), l)
	// One column in small type with room between the rows, top left where
	// the bars of the first policies stay at the limit.
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.Padding = vg.Points(2)
	p.Legend.XOffs = vg.Points(8)
	if len(names) > 0 {
		p.NominalX(names...) // it panics on no names
	}
	return savePNG(path, chartHeight, p)
}

// raceRounds is the most rounds any policy ran.
func raceRounds(groups []raceBars) int {
	rounds := 0
	for _, g := range groups {
		rounds = max(rounds, len(g.Admitted))
	}
	return rounds
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

// latencyMarks are the quantiles the latency plot marks and labels on
// each curve.
var latencyMarks = []struct {
	q     float64
	label string
}{{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}, {0.999, "p99.9"}}

// plotLatency writes the latency distribution of each policy: latency
// (milliseconds) against quantile on a "nines" scale, the way HdrHistogram
// draws it, each curve marked at p50, p90, p99 and p99.9, and the title's
// second line giving every policy's p50 and p99: one run's tail is noisy,
// the percentiles say what it measured.
func plotLatency(path, title string, curves []latencyCurve) error {
	p := plot.New()
	p.X.Label.Text = "quantile (nines scale: each step right is ten times rarer; dots at p50, p90, p99, p99.9)"
	p.Y.Label.Text = "latency (ms)"
	p.Y.Min = 0
	top, highest := 0.0, 0.0
	var summary []string
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
		highest = max(highest, xys[n-1].Y)
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("loadgen: plot latency: %w", err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(c.Policy, l)
		var marks plotter.XYs
		for _, m := range latencyMarks {
			if k := int(m.q * float64(n)); k < n && ninesX(float64(k)/float64(n)) <= xys[n-1].X {
				marks = append(marks, xys[k])
			}
		}
		if len(marks) > 0 {
			sc, err := plotter.NewScatter(marks)
			if err != nil {
				return fmt.Errorf("loadgen: plot latency: %w", err)
			}
			sc.Color, sc.Shape, sc.Radius = plotutil.Color(i), draw.CircleGlyph{}, vg.Points(3)
			p.Add(sc)
		}
		summary = append(summary, fmt.Sprintf("%s p50 %s, p99 %s", c.Policy, msText(c.Sorted[n/2]), msText(c.Sorted[min(n-1, n*99/100)])))
	}
	p.Title.Text = title
	for i := 0; i < len(summary); i += 2 {
		p.Title.Text += "\n" + strings.Join(summary[i:min(i+2, len(summary))], ", ")
	}
	var ticks []plot.Tick
	for _, m := range nines {
		if x := ninesX(m.q); x <= top+1e-9 {
			ticks = append(ticks, plot.Tick{Value: x, Label: m.label})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Max = 1.3 * highest // headroom for the legend
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.Padding = vg.Points(2)
	return savePNG(path, chartHeight, p)
}

// msText prints a latency in milliseconds.
func msText(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + " ms"
}
