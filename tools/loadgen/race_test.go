package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestAnalyzeRace(t *testing.T) {
	const window = 2 * time.Second
	start := time.Unix(1_000_000_000, 0) // a window boundary
	rs := vegeta.Results{
		result(start, 30, time.Millisecond, http.StatusOK),
		result(start, 10, 5*time.Millisecond, http.StatusOK),
		result(start, 20, time.Millisecond, http.StatusTooManyRequests),
		result(start, 25, time.Millisecond, 0),
	}
	got := analyzeRace(rs, window)
	assert.Equal(t, tally{Admitted: 2, Refused: 1, Failed: 1, FirstFailure: "status 0"}, got.tally)
	assert.Equal(t, 20*time.Millisecond, got.Spread)
	assert.Equal(t, 21*time.Millisecond, got.Took, "from the first send (10ms) to the last answer (31ms)")
	assert.False(t, got.Straddled)

	late := vegeta.Results{result(start, 1990, 20*time.Millisecond, http.StatusOK)}
	assert.True(t, analyzeRace(late, window).Straddled, "answered after the next boundary")
	assert.Equal(t, raceRound{}, analyzeRace(nil, window))
}

func TestRaceVerdict(t *testing.T) {
	r := raceResult{Limit: 20, Window: 2 * time.Second}
	round := func(admitted int, straddled bool) raceRound {
		return raceRound{tally: tally{Admitted: admitted}, Straddled: straddled}
	}
	took := func(admitted int, d time.Duration) raceRound {
		return raceRound{tally: tally{Admitted: admitted}, Took: d}
	}
	// A token bucket of 20 per 2s refills one unit every 100ms.
	assert.Equal(t, "over only by the refill while a round lasted",
		r.verdict(raceRow{Policy: "token_bucket", Rounds: []raceRound{took(23, 350*time.Millisecond), took(20, 0)}}))
	assert.Equal(t, "**over the limit** (up to 24)",
		r.verdict(raceRow{Policy: "token_bucket", Rounds: []raceRound{took(24, 350*time.Millisecond)}}))
	assert.Equal(t, "**over the limit** (up to 23)",
		r.verdict(raceRow{Policy: "sliding_log", Rounds: []raceRound{took(23, 350*time.Millisecond)}}), "no allowance for the others")
	assert.Equal(t, "never over the limit", r.verdict(raceRow{Rounds: []raceRound{round(20, false), round(19, true)}}))
	assert.Equal(t, "over only when a burst straddled a window boundary", r.verdict(raceRow{Rounds: []raceRound{round(20, false), round(40, true)}}))
	assert.Equal(t, "**over the limit** (up to 90)", r.verdict(raceRow{Rounds: []raceRound{round(90, false), round(21, true)}}))
	assert.Equal(t, "never over the limit", r.verdict(raceRow{}))
}

func TestPacers(t *testing.T) {
	p := countPacer(3)
	for hits := range uint64(3) {
		wait, stop := p.Pace(time.Hour, hits)
		assert.Equal(t, time.Duration(0), wait)
		assert.False(t, stop)
	}
	_, stop := p.Pace(0, 3)
	assert.True(t, stop)

	now := time.Now()
	s := schedulePacer{now.Add(-time.Second), now.Add(time.Hour), now.Add(2 * time.Hour)}
	wait, stop := s.Pace(0, 0)
	assert.Equal(t, time.Duration(0), wait, "a past instant is sent at once")
	assert.False(t, stop)
	wait, _ = s.Pace(0, 1)
	assert.InDelta(t, float64(time.Hour), float64(wait), float64(time.Minute))
	_, stop = s.Pace(0, 3)
	assert.True(t, stop)
	assert.InDelta(t, 2/(7201.0), s.Rate(0), 1e-9)
	assert.Equal(t, 0.0, schedulePacer{now}.Rate(0))
}
