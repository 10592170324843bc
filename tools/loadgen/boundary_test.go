package main

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestUnixFloor(t *testing.T) {
	now := time.Unix(1_000_000_003, 700)
	assert.Equal(t, time.Unix(1_000_000_002, 0), unixFloor(now, 2*time.Second))
	assert.Equal(t, time.Unix(1_000_000_001, 0), unixFloor(now, 7*time.Second))
	assert.NotEqual(t, now.Truncate(7*time.Second).Unix(), unixFloor(now, 7*time.Second).Unix(),
		"aligned on the Unix epoch, not on time.Truncate's year 1")
	assert.Equal(t, time.Unix(-4, 0), unixFloor(time.Unix(-3, 0), 2*time.Second))
}

func TestPlanBoundary(t *testing.T) {
	const limit, window, cycles = 20, 2 * time.Second, 3
	now := time.Unix(1_000_000_001, 900_000_000) // 1.9s into a 2s window
	p := planBoundary(now, limit, window, cycles)

	assert.Equal(t, time.Unix(1_000_000_004, 0), p.First, "the first boundary leaving a quarter window plus the lead")
	assert.True(t, unixFloor(p.First, window).Equal(p.First))
	assert.False(t, p.Sends[0].Before(now.Add(planLead)))
	require.Len(t, p.Sends, cycles*burstFactor*limit/2)
	assert.True(t, slices.IsSortedFunc(p.Sends, func(a, b time.Time) int { return a.Compare(b) }))
	assert.InDelta(t, 80.0, p.Rate(), 1e-9)

	perBurst := len(p.Sends) / cycles
	for c := range cycles {
		burst := p.Sends[c*perBurst : (c+1)*perBurst]
		boundary := p.First.Add(time.Duration(2*c) * window)
		assert.Equal(t, boundary.Add(-window/4), burst[0], "burst %d starts a quarter window early", c)
		assert.True(t, burst[len(burst)-1].Before(boundary.Add(window/4)))
		before := slices.IndexFunc(burst, func(s time.Time) bool { return !s.Before(boundary) })
		assert.Equal(t, 2*limit, before, "burst %d: 2×limit before the boundary", c)
	}
	assert.Equal(t, 100, p.bins(), "10s from half a window before the first boundary to half a window after the last")
	assert.Equal(t, []float64{0, 2, 4, 6, 8}, p.axis().Boundaries)
}

// result fakes one vegeta result: sent at ms after start, answered after
// latency, with the given status code.
func result(start time.Time, ms int, latency time.Duration, code uint16) vegeta.Result {
	return vegeta.Result{Timestamp: start.Add(time.Duration(ms) * time.Millisecond), Latency: latency, Code: code}
}

func TestAnalyzeBoundaryFixedWindowDoubleBurst(t *testing.T) {
	const limit, window = 4, time.Second
	p := boundaryPlan{Limit: limit, Window: window, First: time.Unix(1_000_000_000, 0), Cycles: 1}
	// A fixed window admits the first 4 on each side of the boundary, refuses
	// the rest; one request fails.
	var rs vegeta.Results
	for i, ms := range []int{-250, -240, -230, -220, -210, -200, 0, 10, 20, 30, 40, 50} {
		code := uint16(http.StatusTooManyRequests)
		if i < 4 || (i >= 6 && i < 10) {
			code = http.StatusOK
		}
		rs = append(rs, result(p.First, ms, time.Millisecond, code))
	}
	rs = append(rs, result(p.First, 60, time.Millisecond, http.StatusServiceUnavailable))

	row := analyzeBoundary(p, "fixed_window", rs)
	assert.Equal(t, tally{Admitted: 8, Refused: 4, Failed: 1, FirstFailure: "status 503"}, row.tally)
	assert.Equal(t, 8, row.MaxSpan)
	assert.InDelta(t, 2.0, row.Multiple(limit), 1e-9)
	require.Len(t, row.Counts, 10, "1s from -0.5s to +0.5s in 100ms bins")
	assert.Equal(t, []int{0, 0, 4, 0, 0, 4, 0, 0, 0, 0}, row.Counts)
}
