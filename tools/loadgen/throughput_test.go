package main

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// ceiling returns a try function for ramp under which every rate up to
// limit holds, and records the rates tried. flaky rates fail on their first
// try only.
func ceiling(limit int, tried *[]int, flaky ...int) func(int) (stepResult, error) {
	failedOnce := map[int]bool{}
	return func(rate int) (stepResult, error) {
		*tried = append(*tried, rate)
		for _, f := range flaky {
			if f == rate && !failedOnce[rate] {
				failedOnce[rate] = true
				return stepResult{Rate: rate}, nil
			}
		}
		return stepResult{Rate: rate, Held: rate <= limit}, nil
	}
}

func TestRamp(t *testing.T) {
	cases := []struct {
		name       string
		limit      int
		maxRate    int
		flaky      []int
		wantBest   int
		wantCapped bool
		wantTried  []int
	}{
		{"doubles then bisects", 3000, 16000, nil, 3000, false, []int{250, 500, 1000, 2000, 4000, 4000, 3000, 3500, 3500}},
		{"a single failure is retried", 3000, 16000, []int{1000}, 3000, false, []int{250, 500, 1000, 1000, 2000, 4000, 4000, 3000, 3500, 3500}},
		{"capped at max-rate", 1 << 30, 2000, nil, 2000, true, []int{250, 500, 1000, 2000}},
		{"nothing holds", 0, 16000, nil, 0, false, []int{250, 250, 125, 125, 62, 62}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tried []int
			steps, best, capped, err := ramp(250, c.maxRate, ceiling(c.limit, &tried, c.flaky...))
			require.NoError(t, err)
			assert.Equal(t, c.wantBest, best)
			assert.Equal(t, c.wantCapped, capped)
			assert.Equal(t, c.wantTried, tried)
			assert.Len(t, steps, len(tried))
			assert.LessOrEqual(t, len(steps), rampSteps(250, c.maxRate))
		})
	}
}

func TestRampStopsOnError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	steps, best, _, err := ramp(250, 16000, func(rate int) (stepResult, error) {
		calls++
		if rate == 1000 {
			return stepResult{}, boom
		}
		return stepResult{Rate: rate, Held: true}, nil
	})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 3, calls)
	assert.Equal(t, 500, best)
	assert.Len(t, steps, 2)
}

func TestJudgeStep(t *testing.T) {
	start := time.Unix(1_000_000_000, 0)
	// 100 requests over 990ms at 100/s: 98 answered (one 429), 2 failed.
	build := func(slow time.Duration, failures int) vegeta.Results {
		var rs vegeta.Results
		for i := range 100 {
			code := uint16(http.StatusOK)
			switch {
			case i < failures:
				code = 0
			case i == 50:
				code = http.StatusTooManyRequests
			}
			lat := time.Millisecond
			if i == 99 {
				lat = slow
			}
			rs = append(rs, result(start, i*10, lat, code))
		}
		return rs
	}
	held := judgeStep(100, build(time.Millisecond, 1), 50*time.Millisecond)
	assert.True(t, held.Held)
	assert.Equal(t, tally{Admitted: 98, Refused: 1, Failed: 1, FirstFailure: "status 0"}, held.tally)
	assert.InDelta(t, 100.0, held.Sent, 1.5)

	assert.False(t, judgeStep(100, build(time.Millisecond, 2), 50*time.Millisecond).Held, "98% answered is below 99%")
	assert.False(t, judgeStep(200, build(time.Millisecond, 0), 50*time.Millisecond).Held, "sent half the rate")
	// One slow request in 100 is the p99 (nearest rank 99 of 100 is the 99th, not the slow 100th).
	assert.True(t, judgeStep(100, build(time.Second, 0), 50*time.Millisecond).Held)
	slow := build(time.Second, 0)
	slow[98].Latency = time.Second
	assert.False(t, judgeStep(100, slow, 50*time.Millisecond).Held, "two slow requests in 100 push p99 over")
	assert.False(t, judgeStep(100, nil, 50*time.Millisecond).Held, "no results hold nothing")
}
