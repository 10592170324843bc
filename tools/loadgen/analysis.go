package main

import (
	"math"
	"slices"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Span is when one request was in flight: the service decided it at some
// instant in [Start, End]. Start is when loadgen began sending it, End when
// the answer had been read. Both come from the same machine clock as the
// service's, since loadgen only targets loopback.
type Span struct {
	Start, End time.Time
}

// spanOf returns the in-flight span of a vegeta result.
func spanOf(r *vegeta.Result) Span {
	return Span{Start: r.Timestamp, End: r.End()}
}

// MaxWithin returns the largest number of spans that lie entirely inside one
// half-open interval [a, a+w): the most requests the service certainly
// decided within one window-length span of its own clock, whatever the
// network delay was. For instants (Start == End) it is the usual sliding
// count over sorted timestamps, with the left edge inclusive and the right
// edge exclusive, so that two events exactly w apart are never counted
// together. It is a lower bound of the true maximum and never overstates it:
// a limiter that admits at most L per window yields at most L here.
//
// It runs in O(n log n + n·k) for n spans and at most k per span; spans is
// not modified.
func MaxWithin(spans []Span, w time.Duration) int {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b Span) int { return a.Start.Compare(b.Start) })
	best := 0
	for i := range s {
		// Any best interval can slide right until its left edge meets the
		// earliest start it contains, so the left edges to try are the starts.
		edge := s[i].Start.Add(w)
		n := 0
		for j := i; j < len(s) && s[j].Start.Before(edge); j++ {
			if s[j].End.Before(edge) {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// Bins counts the instants in n consecutive bins of the given width starting
// at origin: bin i holds [origin+i·width, origin+(i+1)·width). Instants
// outside every bin are ignored. width must be positive.
func Bins(at []time.Time, origin time.Time, width time.Duration, n int) []int {
	bins := make([]int, max(n, 0))
	for _, t := range at {
		d := t.Sub(origin)
		if d < 0 {
			continue
		}
		if i := int(d / width); i < len(bins) {
			bins[i]++
		}
	}
	return bins
}

// Percentile returns the nearest-rank q-quantile of sorted (ascending): the
// smallest value such that at least q of the values are at or below it. q is
// clamped to [0, 1]; the result is 0 for an empty slice.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(min(max(q, 0), 1) * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// Latencies are exact percentiles of a set of request latencies.
type Latencies struct {
	P50, P90, P99, Max time.Duration
}

// summarize returns the exact percentiles of latencies; it sorts the slice.
func summarize(latencies []time.Duration) Latencies {
	slices.Sort(latencies)
	return Latencies{
		P50: Percentile(latencies, 0.50),
		P90: Percentile(latencies, 0.90),
		P99: Percentile(latencies, 0.99),
		Max: Percentile(latencies, 1),
	}
}
