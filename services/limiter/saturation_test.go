package main

// The saturation test: two service processes on a healthy Redis, starved of
// CPU as on a crowded node, must still decide exactly and answer no 5xx. It
// takes about a minute and owns the machine's CPUs while it runs, so it runs
// only when asked: LIMITER_SATURATION=1 (make saturation).

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// saturationLimit is the limit of the saturation test's policy.
const saturationLimit = 50

// saturationPolicies: a day's window, so that no boundary falls in the test.
var saturationPolicies = fmt.Sprintf(`policies:
  flood: { algorithm: fixed_window, limit: %d, window: 24h }
`, saturationLimit)

// TestSaturation pins two service processes to CPU 0 beside three busy
// loops, and Redis, this test and its load to CPU 1. Bursts of 400 and
// 1,000 simultaneous requests (fresh connections) on one key, three of each
// in a row, allow exactly the limit and answer no 5xx; then 256 keep-alive
// connections for 10 s answer at most 0.1% 5xx, the circuit breaker never
// opens, and every key allowed exactly min(limit, attempts).
func TestSaturation(t *testing.T) {
	if os.Getenv("LIMITER_SATURATION") == "" {
		t.Skip("set LIMITER_SATURATION=1 (make saturation): about a minute with both CPUs busy")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	taskset, err := exec.LookPath("taskset")
	require.NoError(t, err, "taskset (util-linux) pins the processes")
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("pins redis-server to a CPU: needs a private one")
	}
	pin := func(pid int, cpu string) {
		out, err := exec.Command(taskset, "-a", "-p", "-c", cpu, strconv.Itoa(pid)).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	pin(os.Getpid(), "1")
	pin(srv.PID(), "1")
	for range 3 {
		busy := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done")
		require.NoError(t, busy.Start())
		t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })
	}
	wrapper := []string{taskset, "-c", "0"}
	instances := []*instance{
		launchInstance(t, wrapper, srv.URL(), saturationPolicies, nil),
		launchInstance(t, wrapper, srv.URL(), saturationPolicies, nil),
	}

	for _, n := range []int{400, 1000} {
		for round := 1; round <= 3; round++ {
			key := fmt.Sprintf("burst-%d-%d", n, round)
			got := floodBurst(instances, key, n)
			t.Logf("burst of %d #%d: %s", n, round, got)
			assert.Equal(t, int64(saturationLimit), got.allowed, "burst of %d #%d: %s", n, round, got)
			assert.Zero(t, got.failed, "burst of %d #%d: %s", n, round, got)
		}
	}

	got, perKey, notReady := sustained(instances, 256, 200, 10*time.Second)
	t.Logf("256 connections for 10s: %s; /readyz 503 at %d polls", got, notReady)
	total := got.allowed + got.limited + got.failed
	require.Positive(t, total)
	assert.LessOrEqual(t, float64(got.failed), 0.001*float64(total), "at most 0.1%% 5xx: %s", got)
	assert.Zero(t, notReady, "/readyz answered 503 while Redis was healthy")
	for key, c := range perKey {
		if c.failed == 0 {
			assert.Equal(t, min(saturationLimit, c.allowed+c.limited), c.allowed, "key %s: %s", key, c)
		}
	}
	for i, in := range instances {
		assert.Zero(t, in.logsContaining("circuit breaker open"), "instance %d: the breaker opened", i)
		if errs := in.logLines("store error"); len(errs) > 0 {
			t.Logf("instance %d: %d store errors logged, the first: %s", i, len(errs), errs[0])
		}
	}
}

// tally counts answers: 200, 429, and everything else (5xx, transport
// errors).
type tally struct {
	allowed, limited, failed int64
	statuses                 map[string]int64 // the failed answers by status and problem type; "0": no answer
}

func (c tally) String() string {
	return fmt.Sprintf("%d allowed, %d limited, %d failed %v", c.allowed, c.limited, c.failed, c.statuses)
}

// counter is a tally that concurrent senders add to.
type counter struct {
	mu sync.Mutex
	tally
}

func (c *counter) add(a reply) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch a.status {
	case http.StatusOK:
		c.allowed++
	case http.StatusTooManyRequests:
		c.limited++
	default:
		c.failed++
		if c.statuses == nil {
			c.statuses = map[string]int64{}
		}
		c.statuses[strconv.Itoa(a.status)+" "+a.problem]++
	}
}

func (c *counter) get() tally {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tally
}

// reply is an answer's status (0 when none came) and, for a failure, its
// problem type.
type reply struct {
	status  int
	problem string
}

// postCheck sends one POST /v1/check of the policy flood for key.
func postCheck(hc *http.Client, in *instance, key string) reply {
	resp, err := hc.Post(in.url+"/v1/check", "application/json", strings.NewReader(`{"policy":"flood","key":"`+key+`"}`))
	if err != nil {
		return reply{}
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode}
	if r.status != http.StatusOK && r.status != http.StatusTooManyRequests {
		var p struct{ Type string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		r.problem = p.Type
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return r
}

// floodBurst sends n requests for key at once, each on a new connection,
// alternating between the instances.
func floodBurst(instances []*instance, key string, n int) tally {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var (
		c     counter
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			c.add(postCheck(hc, instances[i%len(instances)], key))
		})
	}
	close(start)
	wg.Wait()
	return c.get()
}

// sustained keeps conns keep-alive connections busy for d (each sending one
// request after another on keys keys, in turn), alternating between the
// instances, while polling /readyz of each every 250ms. It returns the
// answers, the answers per key and how many polls answered other than 200.
func sustained(instances []*instance, conns, keys int, d time.Duration) (tally, map[string]tally, int) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: conns}}
	perKey := make([]counter, keys)
	var (
		all      counter
		notReady atomic.Int64
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for w := range conns {
		wg.Go(func() {
			for i := 0; i < 1_000_000 && time.Now().Before(deadline); i++ {
				k := (w + i*conns) % keys
				r := postCheck(hc, instances[w%len(instances)], "steady-"+strconv.Itoa(k))
				all.add(r)
				perKey[k].add(r)
			}
		})
	}
	wg.Go(func() {
		for time.Now().Before(deadline) {
			for _, in := range instances {
				resp, err := hc.Get(in.url + "/readyz")
				if err != nil {
					notReady.Add(1)
					continue
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					notReady.Add(1)
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	wg.Wait()
	byKey := make(map[string]tally, keys)
	for k := range perKey {
		byKey["steady-"+strconv.Itoa(k)] = perKey[k].get()
	}
	return all.get(), byKey, int(notReady.Load())
}

// logLines returns the log lines that contain s.
func (in *instance) logLines(s string) []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for line := range strings.SplitSeq(in.logs.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// logsContaining returns how many log lines contain s.
func (in *instance) logsContaining(s string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return strings.Count(in.logs.String(), s)
}
