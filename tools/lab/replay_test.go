package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tollgate/tollgate/pkg/limiter"
)

// sliceSource replays a trace written out in a test.
type sliceSource struct {
	ev  []event
	pos int
}

func (s *sliceSource) next(buf []event) (int, error) {
	n := copy(buf, s.ev[s.pos:])
	s.pos += n
	return n, nil
}
func (s *sliceSource) name(k uint32) string          { return sourceName(k) }
func (s *sliceSource) progress() (done, total int64) { return int64(s.pos), int64(len(s.ev)) }
func (s *sliceSource) unit() string                  { return "events" }

// at returns the time secs after a window boundary (traceOrigin is one for
// a 10s window).
func at(secs float64) int64 { return traceOrigin + int64(secs*float64(time.Second)) }

// handTrace is worked out by hand below, limit 2 per 10s window; the
// windows of the fixed and weighted algorithms are [0,10), [10,20), [20,30).
//
// Source 0, times 8 9 11 12 19 19.5 21:
//
//	exact log, units in (t-10, t]:   A A R R A A R  (at 19 both 8 and 9 have left)
//	fixed_window, count after +1:    A A A A R R A  (1 2 | 1 2 3 4 | 1)
//	sliding_window, prev×(10-e)/10 + cur + 1 <= 2:
//	  8,9 cur→2; 11: 2×.9+1=2.8 R; 12: 2×.8+1=2.6 R; 19: 2×.1+0+1=1.2 A cur→1;
//	  19.5: 2×.05+1+1=2.1 R; 21: prev=1, 1×.9+1=1.9 A
//	                                 A A R R A R A
//	token_bucket, T=5s, burst 10s:   tat 13, 18; 11: 23-11=12>10 R; 12: R;
//	  19: tat 24; 19.5: 29-19.5=9.5 A; 21: 34-21=13 R
//	                                 A A R R A A R
//
// So fixed_window: false allows at 11, 12, 21 (3), false refusals at 19,
// 19.5 (2); 4 admitted in (2, 12] → overshoot 2.0. sliding_window: false
// refusal at 19.5, false allow at 21. token_bucket and sliding_log: none.
//
// Source 1: one request at 10, admitted by all: never limited.
// Source 2: cost 2 at 1 (admitted by all: a full bucket admits the limit),
// cost 1 at 2 (refused by all: 2+1 > 2): limited, no error.
func handTrace() []event {
	return []event{
		{at(1), 2, 2}, {at(2), 2, 1},
		{at(8), 0, 1}, {at(9), 0, 1}, {at(10), 1, 1}, {at(11), 0, 1}, {at(12), 0, 1},
		{at(19), 0, 1}, {at(19.5), 0, 1}, {at(21), 0, 1},
	}
}

func TestHandComputedTrace(t *testing.T) {
	for _, engine := range []string{engineDirect, engineMemory} {
		for _, workers := range []int{1, 2, 3} {
			res, err := replay(context.Background(), &sliceSource{ev: handTrace()},
				replayOptions{limit: 2, window: 10 * time.Second, engine: engine, workers: workers, watch: -1})
			require.NoError(t, err)
			r := buildAccuracy(traceConfig{kind: kindSteady, limit: 2, window: 10 * time.Second}, engine, &sliceSource{}, res)
			msg := engine + " engine, workers " + string(rune('0'+workers))
			assert.Equal(t, int64(10), r.Requests, msg)
			assert.Equal(t, int64(3), r.Sources, msg)
			assert.Equal(t, int64(2), r.LimitedSources, msg)
			assert.Equal(t, int64(9), r.LimitedRequests, msg)
			assert.Equal(t, int64(2+4+1), r.ExactAdmitted, msg) // units: source 2's 2, source 0's 4, source 1's 1
			assert.Equal(t, "s0", r.WorstSource, msg)
			assert.Equal(t, int64(5+2), r.WorstFalses, msg)
			want := []struct {
				alg                             string
				admitted, falseAllow, falseRefs int64
				overshoot                       float64
				madUnits                        float64 // sum over limited sources of |admitted - exact|
			}{
				{"fixed_window", 1 + 1 + 5, 3, 2, 2.0, 1},
				{"sliding_log", 1 + 1 + 4, 0, 0, 1.0, 0},
				{"sliding_window", 1 + 1 + 4, 1, 1, 1.0, 0},
				{"token_bucket", 1 + 1 + 4, 0, 0, 1.0, 0},
			}
			require.Len(t, r.Algorithms, len(want), msg)
			for i, w := range want {
				a := r.Algorithms[i]
				assert.Equal(t, w.alg, a.Algorithm, msg)
				assert.Equal(t, int64(10), a.Requests, msg)
				assert.Equal(t, w.admitted, a.Admitted, "%s %s", msg, w.alg)
				assert.Equal(t, w.falseAllow, a.FalseAllows, "%s %s", msg, w.alg)
				assert.Equal(t, w.falseRefs, a.FalseRefusals, "%s %s", msg, w.alg)
				assert.InDelta(t, float64(w.falseAllow)/10, a.FalseAllowShare, 1e-12, msg)
				assert.InDelta(t, float64(w.falseAllow+w.falseRefs)/10, a.ErrorShare, 1e-12, msg)
				assert.InDelta(t, w.overshoot, a.WorstOvershoot, 1e-12, "%s %s", msg, w.alg)
				// Mean over the 2 limited sources, per 10s window over the 20s trace.
				assert.InDelta(t, w.madUnits/2*10/20, a.RateMAD, 1e-12, "%s %s", msg, w.alg)
			}
			assert.Equal(t, "s0", r.Algorithms[0].WorstOvershootSrc, msg)
		}
	}
}

func TestWorstSourceSeries(t *testing.T) {
	res, err := replay(context.Background(), &sliceSource{ev: handTrace()},
		replayOptions{limit: 2, window: 10 * time.Second, engine: engineDirect, workers: 1, watch: 0, origin: at(0)})
	require.NoError(t, err)
	s := res.watch
	require.NotNil(t, s)
	sum := func(xs []int64) (n int64) {
		for _, x := range xs {
			n += x
		}
		return n
	}
	assert.Equal(t, int64(7), sum(s.attempts), "source 0 alone")
	assert.Equal(t, int64(4), sum(s.exact))
	assert.Equal(t, int64(5), sum(s.algs[0]), "fixed_window")
	// Bins are half a second (a twentieth of 10s): 19.5s is bin 39; the
	// series spans worstWindows windows, whatever the trace's span.
	require.Len(t, s.attempts, worstWindows*seriesBins)
	assert.Equal(t, int64(1), s.attempts[39])
	assert.Equal(t, int64(0), s.algs[2][39], "sliding_window refused 19.5")
}

func TestWindowExpiresAtTheBoundary(t *testing.T) {
	var w window
	for i := range int64(100) {
		w.push(i, 1)
	}
	w.expire(49) // events at or before 49 leave: 50..99 stay
	assert.Equal(t, int64(50), w.sum)
	require.Len(t, w.live(), 50)
	assert.Equal(t, int64(50), w.live()[0].At)
	w.expire(99)
	assert.Equal(t, int64(0), w.sum)
	assert.Empty(t, w.live())
}

// TestSlidingLogSumAgreesOnCosts: the direct engine decides the sliding
// log on the sum of the live units; on a trace of costs 1 to 3, bunched so
// that the log fills, expires and refuses, it decides as the memory store
// does, request by request.
func TestSlidingLogSumAgreesOnCosts(t *testing.T) {
	ps, err := policies(5, 10*time.Second)
	require.NoError(t, err)
	direct, memory := &directEngine{ps: ps}, newMemoryEngine(ps)
	defer memory.close()
	a := int(slices.Index(labAlgorithms[:], limiter.SlidingLog))
	refused := 0
	for i := range 400 {
		e := event{at: at(float64(i) * 0.37), key: uint32(i % 3), cost: uint32(1 + i*7%3)}
		ok1, n1, err := direct.decide(a, int(e.key), e.key, e.at, int64(e.cost))
		require.NoError(t, err)
		ok2, n2, err := memory.decide(a, int(e.key), e.key, e.at, int64(e.cost))
		require.NoError(t, err)
		require.Equal(t, ok2, ok1, "request %d", i)
		require.Equal(t, n2, n1, "request %d's count", i)
		if !ok1 {
			refused++
		}
	}
	assert.Positive(t, refused, "the log filled")
}
