package offenders_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 45, 0, time.UTC)

func item(i uint64) offenders.Item {
	return offenders.Item{Policy: "ping", Key: "k" + strconv.FormatUint(i, 10)}
}

// zipfStream draws n items from a seeded Zipf distribution over imax keys
// and returns them with their true counts.
func zipfStream(seed uint64, n int, imax uint64) ([]offenders.Item, map[offenders.Item]uint64) {
	z := rand.NewZipf(rand.New(rand.NewPCG(seed, seed)), 1.2, 1, imax-1)
	stream := make([]offenders.Item, n)
	truth := map[offenders.Item]uint64{}
	for i := range stream {
		stream[i] = item(z.Uint64())
		truth[stream[i]]++
	}
	return stream, truth
}

// topTrue returns the n items with the largest true counts.
func topTrue(truth map[offenders.Item]uint64, n int) []offenders.Item {
	items := make([]offenders.Item, 0, len(truth))
	for it := range truth {
		items = append(items, it)
	}
	slices.SortFunc(items, func(a, b offenders.Item) int {
		if truth[a] != truth[b] {
			return int(truth[b]) - int(truth[a])
		}
		return 0
	})
	return items[:n]
}

// assertWithinBounds checks Space-Saving's guarantees on entries against
// the true counts of a stream of n items, with capacity counters.
func assertWithinBounds(t *testing.T, entries []offenders.Entry, truth map[offenders.Item]uint64, unlisted uint64) {
	t.Helper()
	listed := map[offenders.Item]bool{}
	for _, e := range entries {
		listed[e.Item] = true
		assert.LessOrEqual(t, e.Count-e.Error, truth[e.Item], "lower bound of %v", e.Item)
		assert.GreaterOrEqual(t, e.Count, truth[e.Item], "upper bound of %v", e.Item)
	}
	for it, n := range truth {
		if !listed[it] {
			assert.LessOrEqual(t, n, unlisted, "%v is not listed, so it was seen at most Unlisted times", it)
		}
	}
}

func TestSketchIsExactBelowCapacity(t *testing.T) {
	s := offenders.NewSketch(10)
	for i := range uint64(10) {
		for range i + 1 {
			s.Record(item(i))
		}
	}
	require.Equal(t, 10, s.Len())
	assert.Equal(t, uint64(55), s.Seen())
	assert.Equal(t, uint64(1), s.Min(), "full: the least monitored item was seen once")
	got := offenders.Merge(s)
	require.Len(t, got, 10)
	for rank, e := range got {
		want := uint64(10 - rank)
		assert.Equal(t, offenders.Entry{Item: item(want - 1), Count: want}, e)
	}
	_, ok := s.Lookup(item(99))
	assert.False(t, ok)

	s.Reset()
	assert.Equal(t, 0, s.Len())
	assert.Equal(t, uint64(0), s.Seen())
	assert.Equal(t, uint64(0), s.Min(), "not full: an absent item was never seen")
	assert.Empty(t, offenders.Merge(s))
}

func TestSketchReplacesTheLeastCounted(t *testing.T) {
	s := offenders.NewSketch(2)
	for _, i := range []uint64{1, 1, 1, 2, 3, 3} {
		s.Record(item(i))
	}
	// 3, once seen more often than 2 (count 1), took its place and inherited
	// its count as error.
	assert.Equal(t, []offenders.Entry{
		{Item: item(1), Count: 3},
		{Item: item(3), Count: 2, Error: 1},
	}, offenders.Merge(s))

	one := offenders.NewSketch(0) // capacity < 1 counts as 1
	one.Record(item(1))
	one.Record(item(2))
	one.Record(item(2))
	assert.Equal(t, []offenders.Entry{{Item: item(2), Count: 2, Error: 1}}, offenders.Merge(one))
}

// TestSketchFindsTheHeavyHittersOfAZipfStream is the sketch's promise under
// a skewed workload: the true top keys are listed with counts within the
// reported error, and every key seen more than N/k times is listed.
func TestSketchFindsTheHeavyHittersOfAZipfStream(t *testing.T) {
	const n, capacity = 200_000, offenders.DefaultCapacity
	stream, truth := zipfStream(7, n, 1_000_000)
	s := offenders.NewSketch(capacity)
	for _, it := range stream {
		s.Record(it)
	}
	require.Equal(t, capacity, s.Len())
	entries := offenders.Merge(s)
	assertWithinBounds(t, entries, truth, s.Min())
	for _, it := range topTrue(truth, 10) {
		e, ok := s.Lookup(it)
		if assert.True(t, ok, "true top key %v (seen %d times) is monitored", it, truth[it]) {
			assert.LessOrEqual(t, e.Error, uint64(n/capacity), "the error is at most N/k")
		}
	}
	for it, c := range truth {
		if c > n/capacity {
			_, ok := s.Lookup(it)
			assert.True(t, ok, "%v was seen %d > N/k times", it, c)
		}
	}
}

func TestMemoryStaysBoundedAfterAMillionDistinctKeys(t *testing.T) {
	tr, err := offenders.NewTracker(time.Minute, offenders.DefaultCapacity)
	require.NoError(t, err)
	for i := range uint64(1_000_000) {
		// Half in the previous interval, half in the current one.
		at := t0
		if i >= 500_000 {
			at = t0.Add(time.Minute)
		}
		tr.Record(at, item(i))
	}
	assert.Equal(t, 2*offenders.DefaultCapacity, tr.Len())
	r := tr.Report(t0.Add(time.Minute))
	assert.Equal(t, uint64(1_000_000), r.Recorded)
	assert.Len(t, r.Entries, 2*offenders.DefaultCapacity)
}

func TestTrackerRotation(t *testing.T) {
	tr, err := offenders.NewTracker(time.Minute, 10)
	require.NoError(t, err)
	minute := t0.Truncate(time.Minute)
	tr.Record(t0, item(1))
	tr.Record(t0, item(1))

	r := tr.Report(t0)
	assert.Equal(t, offenders.Report{
		Since: minute.Add(-time.Minute), Window: time.Minute, Capacity: 10, Recorded: 2,
		Entries: []offenders.Entry{{Item: item(1), Count: 2}},
	}, r)

	next := minute.Add(time.Minute)
	tr.Record(next, item(2))
	r = tr.Report(next.Add(59 * time.Second))
	assert.Equal(t, minute, r.Since, "the previous interval is still reported")
	assert.Equal(t, []offenders.Entry{{Item: item(1), Count: 2}, {Item: item(2), Count: 1}}, r.Entries)

	r = tr.Report(next.Add(time.Minute))
	assert.Equal(t, []offenders.Entry{{Item: item(2), Count: 1}}, r.Entries, "the first interval is gone")

	tr.Record(next.Add(time.Minute), item(3))
	r = tr.Report(next.Add(5 * time.Minute))
	assert.Empty(t, r.Entries, "nothing recorded in the last two intervals")
	assert.Equal(t, uint64(0), r.Recorded)

	tr.Record(next.Add(5*time.Minute), item(4))
	tr.Record(next.Add(time.Minute), item(4)) // the clock stepped back: still the current interval
	r = tr.Report(next.Add(5 * time.Minute))
	assert.Equal(t, []offenders.Entry{{Item: item(4), Count: 2}}, r.Entries)
}

// TestTrackerMergesTwoIntervalsWithinBounds runs a Zipf stream over two
// intervals whose sketches are both full: the merged counts keep the bounds
// against the true totals.
func TestTrackerMergesTwoIntervalsWithinBounds(t *testing.T) {
	const n = 100_000
	tr, err := offenders.NewTracker(time.Minute, 50)
	require.NoError(t, err)
	stream, truth := zipfStream(11, n, 100_000)
	for i, it := range stream {
		at := t0
		if i >= n/2 {
			at = t0.Add(time.Minute)
		}
		tr.Record(at, it)
	}
	r := tr.Report(t0.Add(time.Minute))
	assert.Equal(t, uint64(n), r.Recorded)
	assert.Positive(t, r.Unlisted)
	assertWithinBounds(t, r.Entries, truth, r.Unlisted)
	for _, it := range topTrue(truth, 5) {
		assert.True(t, slices.ContainsFunc(r.Entries, func(e offenders.Entry) bool { return e.Item == it }), "%v is reported", it)
	}
}

func TestTrackerCountsExactlyUnderConcurrency(t *testing.T) {
	const goroutines, each = 16, 500
	tr, err := offenders.NewTracker(time.Minute, goroutines)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range uint64(goroutines) {
		wg.Go(func() {
			for range each {
				tr.Record(t0, item(g))
			}
		})
	}
	wg.Wait()
	r := tr.Report(t0)
	assert.Equal(t, uint64(goroutines*each), r.Recorded)
	require.Len(t, r.Entries, goroutines)
	for _, e := range r.Entries {
		assert.Equal(t, uint64(each), e.Count, "%v", e.Item)
		assert.Equal(t, uint64(0), e.Error)
	}
}

func TestNewTrackerRefusesABadWindow(t *testing.T) {
	for _, w := range []time.Duration{0, -time.Second} {
		_, err := offenders.NewTracker(w, 10)
		require.ErrorIs(t, err, offenders.ErrWindow)
	}
}

func BenchmarkTrackerRecord(b *testing.B) {
	stream, _ := zipfStream(3, 1<<16, 1_000_000)
	tr, err := offenders.NewTracker(time.Minute, offenders.DefaultCapacity)
	require.NoError(b, err)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr.Record(t0, stream[i&(len(stream)-1)])
		i++
	}
}
