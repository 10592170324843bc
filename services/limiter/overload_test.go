package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestOverloadIsShedNotBlamedOnRedis freezes Redis under an instance whose
// decision budget (100ms) is far shorter than its Redis I/O timeout (10s):
// the calls already written wait for Redis, and when it is thawed their
// decisions are used (200 or 429), late as they are; the calls that never got a
// turn are shed once their budget is spent: 503 with the overloaded problem
// type and Retry-After, counted in tollgate_overloaded_total and never as
// store errors; a client that gives up is no store error either.
func TestOverloadIsShedNotBlamedOnRedis(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("freezes Redis: needs a private redis-server")
	}
	in := startInstance(t, srv, fourAlgorithms, []string{"--redis-timeout=10s", "--decision-timeout=100ms"})
	code, _, _ := check(t, in, "sliding_log", "warm")
	require.Equal(t, http.StatusOK, code)

	srv.Freeze()
	type result struct {
		code  int
		body  map[string]any
		retry string
	}
	const n = 300
	results := make(chan result, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := client.Post(in.url+"/v1/check", "application/json", strings.NewReader(`{"policy":"sliding_log","key":"frozen"}`))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			results <- result{resp.StatusCode, body, resp.Header.Get("Retry-After")}
		})
	}
	// A client that gives up on a call waiting for the frozen Redis.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.url+"/v1/check", strings.NewReader(`{"policy":"token_bucket","key":"gone"}`))
	require.NoError(t, err)
	if resp, err := client.Do(req); err == nil {
		_ = resp.Body.Close()
	}
	cancel()
	// The shed requests answer within their budget; thaw once most have.
	require.Eventually(t, func() bool { return len(results) >= n/2 }, 30*time.Second, 10*time.Millisecond)
	srv.Thaw()
	wg.Wait()
	close(results)
	counts := map[int]int{}
	for r := range results {
		counts[r.code]++
		if r.code == http.StatusServiceUnavailable {
			assert.Equal(t, "urn:tollgate:problem:overloaded", r.body["type"])
			assert.Equal(t, "1", r.retry)
		}
	}
	t.Logf("answers while Redis was frozen: %v", counts)
	assert.Positive(t, counts[http.StatusServiceUnavailable], "some requests were shed")
	assert.Positive(t, counts[http.StatusOK], "the requests already sent got Redis's late decision")
	assert.Equal(t, n, counts[http.StatusOK]+counts[http.StatusTooManyRequests]+counts[http.StatusServiceUnavailable],
		"only decisions and 503 overloaded: %v", counts)

	metrics := scrape(t, in)
	assert.Contains(t, metrics, "tollgate_store_errors_total{store=\"redis\"} 0")
	shed := metricValue(t, metrics, "tollgate_overloaded_total")
	// The client that gave up is not counted, unless its request's budget
	// ran out before the server saw it leave.
	assert.Contains(t, []float64{float64(counts[http.StatusServiceUnavailable]), float64(counts[http.StatusServiceUnavailable] + 1)}, shed)
	assert.Contains(t, metrics, `tollgate_redis_breaker_state{state="closed"} 1`)
	assert.Contains(t, metrics, "tollgate_redis_breaker_opens_total 0")
	assert.Equal(t, http.StatusOK, ready(t, in))
}

// metricValue returns the value of the sample named name (with its labels,
// if any) in a /metrics text.
func metricValue(t *testing.T, metrics, name string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no sample %s", name)
	return 0
}
