package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Each route's requests put the key where the service reads it, and the
// baseline answers every route bench drives on it.
func TestBenchRouteRequests(t *testing.T) {
	base := httptest.NewServer(baselineHandler(false))
	t.Cleanup(base.Close)
	for _, r := range benchRoutes {
		tr := r.targeter(base.URL, "pol", "pre", 3)
		var got []vegeta.Target
		for range 4 {
			var tg vegeta.Target
			require.NoError(t, tr(&tg))
			got = append(got, tg)
		}
		assert.Equal(t, r.Method, got[0].Method, r.Name)
		assert.Equal(t, base.URL+r.Path, got[0].URL, r.Name)
		want := []string{"pre-0", "pre-1", "pre-2", "pre-0"}
		if r.NumericKeys {
			want = []string{"1", "2", "3", "1"}
		}
		for i, tg := range got {
			assert.Equal(t, want[i], keyOf(t, r, tg), "%s: request %d cycles over the keys", r.Name, i)
		}
		if r.Name == "json" || r.Name == "gubernator" {
			continue // the baseline has neither: the peers have their own tests
		}
		req, err := http.NewRequest(got[0].Method, got[0].URL, bytes.NewReader(got[0].Body))
		require.NoError(t, err)
		req.Header = got[0].Header
		resp, err := base.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, r.Name)
		assert.NoError(t, r.probe(t.Context(), base.Client(), base.URL, "pol", "probe"), r.Name)
	}
	_, ok := lookupRoute("nope")
	assert.False(t, ok)
}

// keyOf reads the key of a request the way the service does.
func keyOf(t *testing.T, r benchRoute, tg vegeta.Target) string {
	t.Helper()
	if r.KeyHeader != "" {
		return tg.Header.Get(r.KeyHeader)
	}
	switch r.Name {
	case "check":
		var b checkRequest
		require.NoError(t, json.Unmarshal(tg.Body, &b))
		assert.Equal(t, checkRequest{Policy: "pol", Key: b.Key, Cost: 1}, b)
		return b.Key
	case "json":
		var b struct {
			Domain      string
			Descriptors []struct{ Entries []struct{ Key, Value string } }
		}
		require.NoError(t, json.Unmarshal(tg.Body, &b))
		require.Equal(t, "pol", b.Domain)
		require.Len(t, b.Descriptors, 1)
		require.Len(t, b.Descriptors[0].Entries, 1)
		assert.Equal(t, envoyDescriptorKey, b.Descriptors[0].Entries[0].Key)
		return b.Descriptors[0].Entries[0].Value
	case "gubernator":
		b := decodeGubernator(t, tg.Body)
		require.Len(t, b.Requests, 1)
		got := b.Requests[0]
		assert.Equal(t, gubernatorRequest{Name: "pol", UniqueKey: got.UniqueKey, Hits: 1, Limit: 2000000000, Duration: 1000}, got)
		return got.UniqueKey
	}
	t.Fatalf("route %s: no key", r.Name)
	return ""
}

func TestParseWrkOutput(t *testing.T) {
	out := "Running 5s test @ http://127.0.0.1:1\n  1 threads and 64 connections\nloadgen-wrk 1000 5000000 1 2 3 4 5 100 200 300 400\n"
	got, err := parseWrkOutput([]byte(out))
	require.NoError(t, err)
	assert.Equal(t, wrkRun{Requests: 1000, Duration: 5 * time.Second, SocketErrors: 10, StatusErrors: 5,
		Lat: Latencies{P50: 100 * time.Microsecond, P90: 200 * time.Microsecond, P99: 300 * time.Microsecond, Max: 400 * time.Microsecond}}, got)
	for _, bad := range []string{"", "no line\n", "loadgen-wrk 1 2 3\n", "loadgen-wrk 1 2 3 4 5 6 7 8 9 10 x\n", "loadgen-wrk 1 2 3 4 5 6 7 8 9 10 -1\n"} {
		_, err := parseWrkOutput([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
	assert.Equal(t, "1s", wholeSeconds(100*time.Millisecond))
	assert.Equal(t, "5s", wholeSeconds(5*time.Second))
}

func TestBenchGoals(t *testing.T) {
	var g benchGoals
	require.NoError(t, g.Set("memory=0.90/5us"))
	require.NoError(t, g.Set("redis=0.6"))
	assert.Equal(t, benchGoals{"memory": {Ratio: 0.9, CPU: 5 * time.Microsecond, HasCPU: true}, "redis": {Ratio: 0.6}}, g)
	assert.Equal(t, "memory=0.9/5µs,redis=0.6", g.String())
	for _, bad := range []string{"", "memory", "=0.9", "memory=x", "memory=-1", "memory=0.9/5"} {
		assert.Error(t, g.Set(bad), "%q", bad)
	}
}

// keyRecorder answers 200 to every request and records the keys of the
// /v1/check bodies.
type keyRecorder struct {
	*httptest.Server
	mu   sync.Mutex
	keys map[string]int
}

func newKeyRecorder(t *testing.T) *keyRecorder {
	kr := &keyRecorder{keys: map[string]int{}}
	kr.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == checkPath {
			body, _ := io.ReadAll(r.Body)
			var req checkRequest
			if json.Unmarshal(body, &req) != nil {
				http.Error(w, "bad body", http.StatusBadRequest)
				return
			}
			kr.mu.Lock()
			kr.keys[req.Key]++
			kr.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(baselineBody)
	}))
	t.Cleanup(kr.Close)
	return kr
}

// With --generator wrk, the wrk binary sends the route's requests over the
// run's keys at random, and bench counts what wrk reports: at most what the
// server answered, and short of it by at most the requests in flight when
// each run stopped (one per connection).
func TestBenchWithWrk(t *testing.T) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk is not on PATH (Debian package wrk; scripts/bench.sh installs it): the wrk generator is not tested")
	}
	kr := newKeyRecorder(t)
	var targets benchTargets
	require.NoError(t, targets.Set("baseline="+kr.URL+"@"+strconv.Itoa(os.Getpid())))
	const conns, keys = 4, 50
	o := benchOptions{targets: targets, baseline: "baseline", policy: "p", route: "check", generator: "wrk", wrk: wrk,
		rounds: 2, duration: time.Second, connections: conns, fixedFor: time.Second, keys: keys, timeout: 5 * time.Second}
	require.NoError(t, o.validate())
	var stderr bytes.Buffer
	res, err := runBench(t.Context(), o, &stderr)
	require.NoError(t, err, stderr.String())
	var md bytes.Buffer
	res.markdown(&md)
	assert.Contains(t, md.String(), "### Closed loop (wrk): POST /v1/check, 4 connections")
	assert.Regexp(t, `\| baseline \| [1-9]\d* \| 1\.00 \|`, md.String())
	assert.Contains(t, stderr.String(), "bench: wrk /v1/check round 2/2 baseline")

	require.Len(t, res.rows[0].Runs, 2)
	var counted int
	for _, r := range res.rows[0].Runs {
		assert.Zero(t, r.Failed)
		assert.GreaterOrEqual(t, r.CPU, time.Duration(0), "this process's CPU time is read")
		counted += r.OK
	}
	kr.mu.Lock()
	defer kr.mu.Unlock()
	served := -1 // the probe
	keyRE := regexp.MustCompile(`^bench[0-9a-f]{8}-(probe-0|baseline-r[01]-([0-9]|[1-4][0-9]))$`)
	for k, n := range kr.keys {
		assert.Regexp(t, keyRE, k)
		served += n
	}
	assert.Greater(t, len(kr.keys), keys, "both runs spread over their keys")
	assert.LessOrEqual(t, counted, served, "wrk counts only answers the server sent")
	assert.LessOrEqual(t, served, counted+2*conns, "at most one request per connection in flight when a run stops")
}

// gubernatorRequest is gubernator.proto's RateLimitReq, the fields bench sends.
type gubernatorRequest struct {
	Name      string `json:"name"`
	UniqueKey string `json:"unique_key"`
	Hits      int64  `json:"hits"`
	Limit     int64  `json:"limit"`
	Duration  int64  `json:"duration"`
}

// decodeGubernator reads a GetRateLimitsReq as gubernator's gateway does:
// a field it does not know is an error.
func decodeGubernator(t *testing.T, body []byte) (req struct {
	Requests []gubernatorRequest `json:"requests"`
}) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	require.NoError(t, d.Decode(&req), "%s", body)
	return req
}

// fakeGubernator answers POST /v1/GetRateLimits as gubernator does, with
// the status in the body, counting the unique keys of well-formed requests;
// a request without a name or key gets gubernator's 200 with an error.
func fakeGubernator(t *testing.T) (*httptest.Server, *sync.Map) {
	var keys sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/GetRateLimits" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req := decodeGubernator(t, body)
		w.Header().Set("Content-Type", "application/json")
		if len(req.Requests) != 1 || req.Requests[0].Name == "" || req.Requests[0].UniqueKey == "" {
			io.WriteString(w, `{"responses":[{"status":"UNDER_LIMIT","error":"field 'unique_key' cannot be empty"}]}`)
			return
		}
		keys.Store(req.Requests[0].UniqueKey, true)
		io.WriteString(w, `{"responses":[{"status":"UNDER_LIMIT","limit":"2000000000","remaining":"1999999999","error":""}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &keys
}

// --target-route sends one target gubernator's requests and the others
// --route's, over the same keys: the fake peer sees well-formed
// GetRateLimits calls only, the Tollgate-shaped target /v1/check only.
func TestBenchTargetRoute(t *testing.T) {
	kr := newKeyRecorder(t)
	guber, keys := fakeGubernator(t)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"bench", "--target", "memory=" + kr.URL, "--target", "gubernator=" + guber.URL,
		"--target-route", "gubernator=gubernator", "--baseline", "gubernator",
		"--rounds", "1", "--duration", "200ms", "--connections", "2", "--warmup", "0", "--fixed-rate", "0", "--keys", "3"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	assert.Contains(t, stdout.String(), "Target gubernator is sent POST /v1/GetRateLimits instead, with the same keys.")
	assert.Regexp(t, `\| gubernator \| [1-9]\d* \| 1\.00 \|.*\| 0 \|`, stdout.String(), "no failed request")
	assert.Contains(t, stderr.String(), "bench: vegeta /v1/GetRateLimits round 1/1 gubernator")
	var guberKeys []string
	keys.Range(func(k, _ any) bool { guberKeys = append(guberKeys, k.(string)); return true })
	assert.Len(t, guberKeys, 4, "the probe's key and the run's three")
	for _, k := range guberKeys {
		assert.Regexp(t, `^bench[0-9a-f]{8}-(probe-0|gubernator-r0-[0-2])$`, k)
	}
	kr.mu.Lock()
	defer kr.mu.Unlock()
	assert.Len(t, kr.keys, 4, "memory gets /v1/check over as many keys")

	// A peer answering 200 with an error inside has made no decision.
	bad, ok := lookupRoute("gubernator")
	require.True(t, ok)
	bad.Body = `{"requests":[{"name":"{policy}","unique_key":""}]}`
	assert.ErrorContains(t, bad.probe(t.Context(), guber.Client(), guber.URL, "pol", "probe"), "cannot be empty")

	for _, args := range [][]string{
		{"--target-route", "nope=gubernator"},
		{"--target-route", "gubernator=nope"},
		{"--target-route", "gubernator=grpc"},
	} {
		code := run(t.Context(), append([]string{"bench", "--target", "gubernator=" + guber.URL}, args...), io.Discard, io.Discard)
		assert.Equal(t, exitUsage, code, "%v", args)
	}
}
