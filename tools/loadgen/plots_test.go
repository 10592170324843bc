package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotutil"
)

// decodePNG decodes the PNG at path.
func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "%s is not a valid PNG", path)
	return img
}

// hasColor reports whether some pixel of img is exactly c.
func hasColor(img image.Image, c color.Color) bool {
	r0, g0, b0, a0 := c.RGBA()
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			if r == r0 && g == g0 && bl == b0 && a == a0 {
				return true
			}
		}
	}
	return false
}

func TestPlotBoundaryWritesAPanelPerPolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "boundary.png")
	panels := []boundaryPanel{
		{Title: "fixed_window", Counts: []int{0, 0, 4, 0, 0, 4, 0, 0, 0, 0}},
		{Title: "sliding_log", Counts: []int{0, 0, 4, 0, 0, 0, 0, 0, 0, 0}},
	}
	require.NoError(t, plotBoundary(path, panels, boundaryAxis{Origin: -0.5, Bin: 0.1, Boundaries: []float64{0}}))
	img := decodePNG(t, path)
	assert.Equal(t, image.Rect(0, 0, 960, 461), img.Bounds(), "10in wide, 2×2.4in high at 96 dpi")
	assert.True(t, hasColor(img, plotutil.Color(0)), "the first panel's bars are drawn")
	assert.True(t, hasColor(img, plotutil.Color(1)), "the second panel's bars are drawn")
}

func TestPlotRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "race.png")
	groups := []raceBars{{Policy: "sliding_log", Admitted: []int{20, 20, 20}}, {Policy: "sliding_log_unsafe", Admitted: []int{75, 120, 90}}}
	require.NoError(t, plotRace(path, groups, 20, 500))
	img := decodePNG(t, path)
	assert.Equal(t, image.Rect(0, 0, 960, 480), img.Bounds())
	for r := range 3 {
		assert.True(t, hasColor(img, plotutil.Color(r)), "round %d has its bars", r+1)
	}
	assert.NoError(t, plotRace(filepath.Join(t.TempDir(), "empty.png"), nil, 20, 500), "no data still draws axes")
}

func TestPlotLatency(t *testing.T) {
	path := filepath.Join(t.TempDir(), "latency.png")
	var ds []time.Duration
	for i := 1; i <= 1000; i++ {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	require.NoError(t, plotLatency(path, "latency", []latencyCurve{{Policy: "a", Sorted: ds}, {Policy: "empty"}}))
	img := decodePNG(t, path)
	assert.Equal(t, image.Rect(0, 0, 960, 480), img.Bounds())
	assert.True(t, hasColor(img, plotutil.Color(0)))
}

func TestPlotErrors(t *testing.T) {
	err := plotRace(filepath.Join(t.TempDir(), "missing", "race.png"), nil, 1, 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "loadgen: plot")

	path := filepath.Join(t.TempDir(), "none.png")
	require.Error(t, plotBoundary(path, nil, boundaryAxis{Bin: 0.1}))
	assert.NoFileExists(t, path)
}
