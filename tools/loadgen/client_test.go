package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestPolicyWindow(t *testing.T) {
	cases := []struct {
		field string
		want  time.Duration
		ok    bool
	}{
		{`"default";q=20;w=2`, 2 * time.Second, true},
		{`"burst";w=60;q=100, "daily";q=1000;w=86400`, time.Minute, true},
		{`"p"; q=20; w=5`, 5 * time.Second, true},
		{`"p";q=20`, 0, false},
		{`"p";q=20;w=-1`, 0, false},
		{``, 0, false},
	}
	for _, c := range cases {
		got, ok := policyWindow(c.field)
		assert.Equal(t, c.ok, ok, c.field)
		assert.Equal(t, c.want, got, c.field)
	}
}

func TestWaitHealthy(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	require.NoError(t, waitHealthy(t.Context(), http.DefaultClient, srv.URL, time.Minute))
	assert.Equal(t, int64(3), calls.Load(), "asked until the third answer was 200")

	calls.Store(0)
	err := waitHealthy(t.Context(), http.DefaultClient, srv.URL, 0)
	require.ErrorIs(t, err, errTargetDown)
	assert.Contains(t, err.Error(), "503 Service Unavailable")
	assert.Equal(t, int64(1), calls.Load(), "wait 0 asks once")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, waitHealthy(ctx, http.DefaultClient, deadURL(t), time.Minute), context.Canceled)
}

func TestTallyNotesTheFirstFailure(t *testing.T) {
	var a tally
	a.add(&vegeta.Result{Code: http.StatusOK})
	a.add(&vegeta.Result{Code: http.StatusTooManyRequests})
	assert.Empty(t, a.note("p"))
	a.add(&vegeta.Result{Error: "dial tcp: connection refused"})
	a.add(&vegeta.Result{Code: http.StatusInternalServerError, Error: "500 Internal Server Error"})
	assert.Equal(t, tally{Admitted: 1, Refused: 1, Failed: 2, FirstFailure: "dial tcp: connection refused"}, a)
	assert.Equal(t, "- p: 2 failed, the first with: `dial tcp: connection refused`\n", a.note("p"))

	var b tally
	b.add(&vegeta.Result{Code: http.StatusNotFound})
	b.merge(a)
	assert.Equal(t, tally{Admitted: 1, Refused: 1, Failed: 3, FirstFailure: "status 404"}, b)
	assert.Equal(t, 5, b.Total())
}

func TestCheckTargetBody(t *testing.T) {
	tgt := checkTarget("http://127.0.0.1:1", "sliding_log", `k"1`)
	assert.Equal(t, http.MethodPost, tgt.Method)
	assert.Equal(t, "http://127.0.0.1:1/v1/check", tgt.URL)
	var body checkRequest
	require.NoError(t, json.Unmarshal(tgt.Body, &body))
	assert.Equal(t, checkRequest{Policy: "sliding_log", Key: `k"1`, Cost: 1}, body)
}

func TestKeyTargeterCyclesExactlyUnderConcurrency(t *testing.T) {
	const keys, goroutines, each = 7, 16, 70
	tr := keyTargeter("http://127.0.0.1:1", "p", "pre", keys)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				var tgt vegeta.Target
				if !assert.NoError(t, tr(&tgt)) {
					return
				}
				var body checkRequest
				if !assert.NoError(t, json.Unmarshal(tgt.Body, &body)) {
					return
				}
				mu.Lock()
				seen[body.Key]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, keys)
	for i := range keys {
		assert.Equal(t, goroutines*each/keys, seen["pre-"+string(rune('0'+i))])
	}
	assert.ErrorIs(t, tr(nil), vegeta.ErrNilTarget)
}
