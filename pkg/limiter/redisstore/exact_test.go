package redisstore

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// The conformance suite's random schedules use small limits and windows.
// These tests put the scripts' arithmetic at the edges where doubles would
// round: limits up to 2^31, windows up to a year, times to the nanosecond.
// The state is written straight into Redis, the attempt is made at the exact
// instant a decision flips and one nanosecond before, and the store's
// decision and written state must be those of the root package's arithmetic.

// slidingCase is a sliding_window state: counts of the previous and the
// current window, and an attempt's cost.
type slidingCase struct {
	limit           int64
	window          time.Duration
	prev, cur, cost int64
}

func TestSlidingWindowExact(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := openStore(t, srv, srv.Prefix(), WithClientTime())
	const maxLimit, maxWindow = limiter.MaxLimit, limiter.MaxWindow
	cases := []slidingCase{
		{maxLimit, maxWindow, maxLimit, 0, 1},
		{maxLimit, maxWindow, maxLimit, 1, 1},
		{maxLimit, maxWindow, 3, maxLimit - 3, 1},
		{maxLimit, maxWindow, maxLimit - 1, 0, maxLimit - 7},
		{maxLimit, time.Second, maxLimit, 0, 1},
		{1, maxWindow, 1, 0, 1},
		{4, time.Minute, 4, 0, 1},
	}
	rng := rand.New(rand.NewPCG(20260101, 1))
	for range 60 {
		limit := 1 + rng.Int64N(maxLimit)
		window := time.Duration(1+rng.Int64N(int64(maxWindow/time.Second))) * time.Second
		prev := 1 + rng.Int64N(limit)
		room := rng.Int64N(prev) // < prev: the decision flips inside the window
		cost := 1 + rng.Int64N(limit-room)
		cases = append(cases, slidingCase{limit, window, prev, limit - cost - room, cost})
	}
	k := limiter.Key{Subject: "edge"}
	flips := 0
	for i, c := range cases {
		p := policy(fmt.Sprintf("sw-%d", i), limiter.SlidingWindow, c.limit, c.window)
		require.NoError(t, p.Validate())
		key := keyName(s.prefix, p.Name, k, suffixSliding)
		start := limiter.WindowStart(base, p.Window)
		curField := strconv.FormatInt(start.Unix(), 10)
		prevField := strconv.FormatInt(start.Add(-p.Window).Unix(), 10)
		// prev×(w−e) <= room×w  ⇔  e >= w − floor(room×w/prev): the flip.
		w := int64(p.Window)
		room := c.limit - c.cur - c.cost
		q := new(big.Int).Mul(big.NewInt(room), big.NewInt(w))
		flip := w - q.Quo(q, big.NewInt(c.prev)).Int64()
		for _, e := range []int64{flip - 1, flip} {
			if e < 0 || e >= w {
				continue
			}
			now := start.Add(time.Duration(e))
			require.NoError(t, rdb.Del(t.Context(), key).Err())
			require.NoError(t, rdb.HSet(t.Context(), key, prevField, c.prev, curField, c.cur).Err())
			d := allow(t, s, p, k, c.cost, now)
			want := limiter.SlidingWindowDecide(p, c.prev, c.cur, c.cost, now)
			assert.Equal(t, want, d, "case %d %+v at +%dns", i, c, e)
			assert.Equal(t, e >= flip, d.Allowed, "case %d %+v at +%dns (flip %d)", i, c, e, flip)
			wantCur := c.cur
			if want.Allowed {
				wantCur += c.cost
				flips++
			}
			got, err := rdb.HGet(t.Context(), key, curField).Int64()
			require.NoError(t, err)
			assert.Equal(t, wantCur, got, "case %d: current window's count after the attempt", i)
		}
	}
	assert.Positive(t, flips)
}

func TestTokenBucketExact(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := openStore(t, srv, srv.Prefix(), WithClientTime())
	type bucketCase struct {
		limit  int64
		window time.Duration
		cost   int64
	}
	cases := []bucketCase{
		{limiter.MaxLimit, limiter.MaxWindow, 1},
		{limiter.MaxLimit, limiter.MaxWindow, limiter.MaxLimit},
		{1_000_000_000, time.Second, 3},
		{3, time.Minute, 2},
	}
	rng := rand.New(rand.NewPCG(20260101, 2))
	for len(cases) < 60 {
		c := bucketCase{1 + rng.Int64N(limiter.MaxLimit), time.Duration(1+rng.Int64N(int64(limiter.MaxWindow/time.Second))) * time.Second, 0}
		c.cost = 1 + rng.Int64N(c.limit)
		if policy("x", limiter.TokenBucket, c.limit, c.window).Validate() == nil {
			cases = append(cases, c)
		}
	}
	k := limiter.Key{Subject: "edge"}
	for i, c := range cases {
		p := policy(fmt.Sprintf("tb-%d", i), limiter.TokenBucket, c.limit, c.window)
		key := keyName(s.prefix, p.Name, k, suffixBucket)
		now := base.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		n := now.UnixNano()
		step := int64(p.Window) / p.Limit
		// Allowed while tat + cost×step − now <= limit×step: the last tat
		// that passes, and one nanosecond later.
		last := n + step*p.Limit - c.cost*step
		for _, tat := range []int64{last, last + 1} {
			require.NoError(t, rdb.Set(t.Context(), key, fmt.Sprintf("%d:%d", tat/1e9, tat%1e9), 0).Err())
			d := allow(t, s, p, k, c.cost, now)
			want, wantTat := limiter.TokenBucketDecide(p, tat, c.cost, now)
			assert.Equal(t, want, d, "case %d %+v tat %d", i, c, tat)
			assert.Equal(t, tat == last || last < n, d.Allowed, "case %d %+v tat %d", i, c, tat)
			got, err := rdb.Get(t.Context(), key).Result()
			require.NoError(t, err)
			stored := fmt.Sprintf("%d:%d", wantTat/1e9, wantTat%1e9)
			if wantTat != tat { // set again, with when
				stored += fmt.Sprintf(":%d:%d", n/1e9, n%1e9)
			}
			assert.Equal(t, stored, got, "case %d: stored tat", i)
			// A reset returns the units in flight when the tat was set; a
			// value without that time (written by the test) counts 0.
			units, err := s.Reset(t.Context(), p, k)
			require.NoError(t, err)
			wantUnits := int64(0)
			if wantTat != tat {
				wantUnits = want.Count
			}
			assert.Equal(t, wantUnits, units, "case %d: units reset", i)
		}
	}
}
