package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// attemptsTrace is handTrace (limit 2 per 10s) with two more sources,
// judged by the attempts truth: a request should be refused when its
// source's attempts in (t-10, t], itself included, exceed 2.
//
// Source 0, times 8 9 11 12 19 19.5 21, attempts in the window:
//
//	1 2 3 4 3 4 4 (at 19: 11 12 19; at 21: 12 19 19.5 21)
//	truth:          A A R R R R R
//	fixed_window:   A A A A R R A  wrongly allowed 11 12 21
//	sliding_log:    A A R R A A R  wrongly allowed 19 19.5
//	sliding_window: A A R R A R A  wrongly allowed 19 21
//	token_bucket:   A A R R A A R  wrongly allowed 19 19.5
//
// Source 1: one request at 10, never over. Source 2: cost 2 at 1 (2 units,
// admitted by all), cost 1 at 2 (3 units: over, refused by all).
//
// Source 3, times 9 9.5 10.5: attempts 1 2 3, over at 10.5 (peak 1.5×).
// fixed_window admits it (a new window: count 1) and never refuses source
// 3: over, never refused. The others refuse 10.5 (sliding_log: 2 in the
// window; sliding_window: 2×0.95+1 = 2.9; token_bucket: tat 24, 24-10.5 >
// 10).
//
// Source 4, times 1 2 11.5: attempts 1 2 2 (1 has left at 11.5): never over.
// sliding_window refuses 11.5 (prev 2 × 0.85 + 1 = 2.7 > 2): refused, never
// over, and a wrong limit. The others admit it.
func attemptsTrace() []event {
	evs := append(handTrace(),
		event{at(9), 3, 1}, event{at(9.5), 3, 1}, event{at(10.5), 3, 1},
		event{at(1), 4, 1}, event{at(2), 4, 1}, event{at(11.5), 4, 1})
	slices.SortStableFunc(evs, func(a, b event) int { return int(a.at - b.at) })
	return evs
}

func TestAttemptsTruthHandComputed(t *testing.T) {
	for _, engine := range []string{engineDirect, engineMemory} {
		for _, workers := range []int{1, 2, 3} {
			msg := fmt.Sprintf("%s engine, %d workers", engine, workers)
			res, err := replay(context.Background(), &sliceSource{ev: attemptsTrace()},
				replayOptions{limit: 2, window: 10 * time.Second, truth: truthAttempts, engine: engine, workers: workers, watch: -1})
			require.NoError(t, err, msg)
			c := traceConfig{kind: kindSteady, limit: 2, window: 10 * time.Second, truth: truthAttempts}
			r := buildAccuracy(c, engine, &sliceSource{}, res)
			assert.Equal(t, truthAttempts, r.Truth)
			assert.Equal(t, int64(16), r.Requests, msg)
			assert.Equal(t, int64(3), r.LimitedSources, "%s: sources 0, 2 and 3 went over", msg)
			assert.Equal(t, int64(7+2+3), r.LimitedRequests, msg)
			want := []struct {
				alg                            string
				wronglyAllowed, wronglyLimited int64
				overNeverRefused               int64
				peak                           float64
				refusedNeverOver               int64
			}{
				{"fixed_window", 3 + 1, 0, 1, 1.5, 0},
				{"sliding_log", 2, 0, 0, 0, 0},
				{"sliding_window", 2, 1, 0, 0, 1},
				{"token_bucket", 2, 0, 0, 0, 0},
			}
			require.Len(t, r.Algorithms, len(want), msg)
			for i, w := range want {
				a := r.Algorithms[i]
				require.NotNil(t, a.Attempts, msg)
				assert.Equal(t, w.alg, a.Algorithm, msg)
				assert.Equal(t, w.wronglyAllowed, a.FalseAllows, "%s %s", msg, w.alg)
				assert.Equal(t, w.wronglyLimited, a.FalseRefusals, "%s %s", msg, w.alg)
				assert.InDelta(t, float64(w.wronglyAllowed+w.wronglyLimited)/16, a.ErrorShare, 1e-12, "%s %s", msg, w.alg)
				assert.Equal(t, w.overNeverRefused, a.Attempts.OverNeverRefused, "%s %s", msg, w.alg)
				assert.InDelta(t, w.peak, a.Attempts.OverNeverRefusedPeak, 1e-12, "%s %s", msg, w.alg)
				assert.Equal(t, w.refusedNeverOver, a.Attempts.RefusedNeverOver, "%s %s", msg, w.alg)
			}
			// fixed_window's count is every attempt in the current fixed
			// window; |count − attempts| ÷ attempts is not 0 at source 0's 11
			// (1 vs 3), 12 (2 vs 4), 21 (1 vs 4), source 3's 10.5 (1 vs 3)
			// and source 4's 11.5 (1 vs 2).
			assert.InDelta(t, (2.0/3+2.0/4+3.0/4+2.0/3+1.0/2)/16, r.Algorithms[0].Attempts.RateDifference, 1e-12, msg)
		}
	}
}

// TestAdmittedTruthUnchanged: the default truth still judges by the exact
// log of admitted units, and reports no attempts figures.
func TestAdmittedTruthUnchanged(t *testing.T) {
	res, err := replay(context.Background(), &sliceSource{ev: attemptsTrace()},
		replayOptions{limit: 2, window: 10 * time.Second, truth: truthAdmitted, engine: engineDirect, workers: 2, watch: -1})
	require.NoError(t, err)
	r := buildAccuracy(traceConfig{kind: kindSteady, limit: 2, window: 10 * time.Second, truth: truthAdmitted}, engineDirect, &sliceSource{}, res)
	// Source 4's 11.5 is admitted by the exact log: sliding_window refuses
	// it wrongly under both truths; source 0's 19 is right to admit here.
	assert.Equal(t, int64(1+1), r.Algorithms[2].FalseRefusals)
	assert.Nil(t, r.Algorithms[2].Attempts)
}

func TestTruthFlag(t *testing.T) {
	code, _, errOut := runLab("accuracy", "--truth", "both")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `--truth "both": want admitted or attempts`)
	code, out, errOut := runLab(append([]string{"accuracy", "--quiet", "--truth", "attempts"}, smallArgs(kindSteady)...)...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "## Accuracy: steady trace, every attempt counted")
	assert.Contains(t, out, "| sources over, never refused |")
	assert.Contains(t, out, "Cloudflare's published figures")
}
