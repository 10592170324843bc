package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// points returns instant spans at the given milliseconds after t0.
func points(ms ...int) []Span {
	s := make([]Span, len(ms))
	for i, m := range ms {
		s[i] = Span{Start: at(m), End: at(m)}
	}
	return s
}

func TestMaxWithinInstants(t *testing.T) {
	const w = 2 * time.Second
	cases := []struct {
		name string
		ms   []int
		want int
	}{
		{"empty", nil, 0},
		{"one", []int{5}, 1},
		{"right edge is exclusive", []int{0, 2000}, 1},
		{"just inside the right edge", []int{0, 1999}, 2},
		{"left edge is inclusive", []int{1000, 1000, 2999}, 3},
		{"unsorted input", []int{4100, 0, 4000, 1500, 2100, 3900}, 3},
		{"fixed window double burst", []int{1900, 1910, 1920, 2000, 2010, 2020, 4500}, 6},
		{"steady one per 500ms", []int{0, 500, 1000, 1500, 2000, 2500, 3000}, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, MaxWithin(points(c.ms...), w))
		})
	}
}

func TestMaxWithinCountsOnlyWholeFlights(t *testing.T) {
	const w = time.Second
	spans := []Span{
		{Start: at(0), End: at(10)},
		{Start: at(500), End: at(990)},
		{Start: at(900), End: at(1000)}, // ends on the edge of [0, 1000): out
		{Start: at(950), End: at(1200)},
	}
	orig := append([]Span(nil), spans...)
	// [0,1000) holds the first two; [500,1500) holds the last three.
	assert.Equal(t, 3, MaxWithin(spans, w))
	assert.Equal(t, orig, spans, "MaxWithin must not reorder its input")
}

func TestMaxWithinNeverOverstatesAnExactLimiter(t *testing.T) {
	// A sliding log with limit 3 per second admits at most 3 in any second of
	// the server's clock; whatever the flight times, MaxWithin stays at 3.
	decided := []int{0, 100, 200, 1000, 1100, 1200, 2000, 2100, 2200}
	var spans []Span
	for i, d := range decided {
		before, after := (i*7)%13, (i*11)%17 // uneven, made-up network delays
		spans = append(spans, Span{Start: at(d - before), End: at(d + after)})
	}
	assert.Equal(t, 3, MaxWithin(spans, time.Second))
}

func TestBins(t *testing.T) {
	ts := []time.Time{at(-1), at(0), at(99), at(100), at(250), at(299), at(300), at(10_000)}
	assert.Equal(t, []int{2, 1, 2}, Bins(ts, t0, 100*time.Millisecond, 3))
	assert.Empty(t, Bins(ts, t0, 100*time.Millisecond, 0))
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, 50*time.Millisecond, Percentile(ds, 0.5))
	assert.Equal(t, 90*time.Millisecond, Percentile(ds, 0.9))
	assert.Equal(t, 99*time.Millisecond, Percentile(ds, 0.99))
	assert.Equal(t, 100*time.Millisecond, Percentile(ds, 1))
	assert.Equal(t, time.Millisecond, Percentile(ds, 0))
	assert.Equal(t, 100*time.Millisecond, Percentile(ds, 7), "q is clamped")
	assert.Equal(t, time.Duration(0), Percentile(nil, 0.5))

	three := []time.Duration{10, 20, 30}
	assert.Equal(t, time.Duration(20), Percentile(three, 0.5), "nearest rank: ceil(1.5) = 2nd")
	assert.Equal(t, time.Duration(30), Percentile(three, 0.9))
}

func TestSummarizeSortsAndReadsExactPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- { // descending on purpose
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	got := summarize(ds)
	require.Len(t, ds, 1000)
	assert.Equal(t, Latencies{P50: 500 * time.Microsecond, P90: 900 * time.Microsecond, P99: 990 * time.Microsecond, Max: time.Millisecond}, got)
}
