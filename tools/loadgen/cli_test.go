package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// command returns the named subcommand.
func commandNamed(t *testing.T, name string) command {
	t.Helper()
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no command %q", name)
	return command{}
}

// testEnv parses args as flags of command name and prepares a run.
func testEnv(t *testing.T, name string, args ...string) *env {
	t.Helper()
	var stderr bytes.Buffer
	o, err := parse(commandNamed(t, name), args, &stderr)
	require.NoError(t, err, stderr.String())
	return newEnv(o, io.Discard)
}

// deadURL returns a loopback URL nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitOK, run(t.Context(), []string{"--help"}, &stdout, &stderr))
	for _, c := range commands {
		assert.Contains(t, stdout.String(), c.name)
	}
	stderr.Reset()
	assert.Equal(t, exitOK, run(t.Context(), []string{"race", "--help"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-rounds")
	assert.NotContains(t, stderr.String(), "-cycles", "race lists its own flags only")
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "Usage"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"race", "--n", "x"}, "invalid value"},
		{[]string{"race", "extra"}, "unexpected arguments"},
		{[]string{"boundary", "--window", "1500ms"}, "--window must be whole seconds"},
		{[]string{"boundary", "--limit", "0"}, "--limit must be in 1..10000"},
		{[]string{"boundary", "--target", "127.0.0.1:8080"}, "not an http(s) URL"},
		{[]string{"throughput", "--max-rate", "10"}, "--max-rate must be at least 250"},
		{[]string{"all", "--policies", ","}, "empty list"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, exitUsage, run(t.Context(), c.args, &stdout, &stderr), "%q", c.args)
		assert.Contains(t, stderr.String(), c.want, "%q", c.args)
	}
}

func TestTargetDownIsOneLineAndExit2(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"all", "--target", deadURL(t), "--out", t.TempDir(), "--seed", "42"}, &stdout, &stderr)
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), stderr.String())
	assert.Contains(t, stderr.String(), "/healthz")
	assert.Contains(t, stderr.String(), "target is not healthy")
	assert.Contains(t, stdout.String(), "seed 42 (key prefix lg", "the seed is printed")
}

func TestProbeRefusesAPolicyWithAnotherLimit(t *testing.T) {
	srv := httptest.NewServer(baselineHandler(false))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"race", "--target", srv.URL, "--out", t.TempDir()}, &stdout, &stderr)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr.String(), "the service's limit is 1000000, loadgen plans with --limit 20")
}

func TestThroughputCommandAgainstBaseline(t *testing.T) {
	srv := httptest.NewServer(baselineHandler(false))
	defer srv.Close()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"throughput", "--target", srv.URL + "/", "--out", out, "--policies", "baseline",
		"--step", "100ms", "--max-rate", "250", "--rate", "100", "--duration", "200ms", "--store-label", "baseline"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "## Throughput and latency (store: baseline)")
	assert.Contains(t, string(report), "](latency.png)")
	decodePNG(t, filepath.Join(out, "latency.png"))
	assert.Contains(t, stdout.String(), "report: "+filepath.Join(out, "report.md"))
	assert.Regexp(t, `(?m)^throughput: \d+/\d+ steps \(100%\), \d+ steps/s, done$`, stderr.String(), "a final progress line on stderr")
	assert.NotContains(t, stderr.String(), "\r", "no redraws in a log")
}

func TestSeedFixesTheKeyPrefix(t *testing.T) {
	a := testEnv(t, "race", "--seed", "7")
	b := testEnv(t, "race", "--seed", "7")
	c := testEnv(t, "race", "--seed", "8")
	assert.Equal(t, a.prefix, b.prefix)
	assert.NotEqual(t, a.prefix, c.prefix)
	assert.Equal(t, a.prefix+"-race-p-3", a.key("race", "p", "3"))
	assert.NotZero(t, testEnv(t, "race").opts.seed, "seed 0 draws one from the clock")
}

func TestBaselineServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	stdout := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"baseline", "--addr", "127.0.0.1:0"}, stdout, io.Discard) }()

	addr := regexp.MustCompile(`http://127\.0\.0\.1:\d+`)
	require.Eventually(t, func() bool { return addr.MatchString(stdout.String()) }, 10*time.Second, 10*time.Millisecond)
	url := addr.FindString(stdout.String())

	resp, err := http.Post(url+checkPath, "application/json", strings.NewReader(`{"policy":"p","key":"k","cost":1}`))
	require.NoError(t, err)
	var d decision
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&d))
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, d.Allowed)

	resp, err = http.Post(url+checkPath, "application/json", strings.NewReader(`not json`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code)
	case <-time.After(10 * time.Second):
		t.Fatal("baseline did not stop")
	}
	_, err = http.Get(url + "/healthz")
	assert.Error(t, err, "the baseline no longer listens")
}

// The scenarios against the baseline, which admits everything: every count
// is known exactly.

func TestBoundaryAgainstBaselineCountsEveryRequest(t *testing.T) {
	srv := httptest.NewServer(baselineHandler(false))
	defer srv.Close()
	out := t.TempDir()
	e := testEnv(t, "boundary", "--target", srv.URL, "--out", out, "--limit", "5", "--window", "1s", "--cycles", "1", "--policies", "a,b")

	res, err := runBoundary(t.Context(), e)
	require.NoError(t, err)
	require.Len(t, res.Rows, 2)
	for _, r := range res.Rows {
		// 4×limit requests in half a window, all admitted. How many fit in
		// one span depends on how long their flights took on this machine,
		// so only the bounds are certain (the exact arithmetic is tested on
		// recorded results).
		assert.Equal(t, tally{Admitted: 20}, r.tally, r.Policy)
		assert.GreaterOrEqual(t, r.MaxSpan, 1, r.Policy)
		assert.LessOrEqual(t, r.MaxSpan, 20, r.Policy)
		sum := 0
		for _, c := range r.Counts {
			sum += c
		}
		assert.LessOrEqual(t, sum, 20, "no request is binned twice")
	}
	decodePNG(t, filepath.Join(out, res.Plot))
}

func TestRaceAgainstBaselineCountsEveryRequest(t *testing.T) {
	srv := httptest.NewServer(baselineHandler(false))
	defer srv.Close()
	out := t.TempDir()
	e := testEnv(t, "race", "--target", srv.URL, "--out", out, "--window", "1s", "--n", "64", "--rounds", "2", "--race-policies", "a,b")

	res, err := runRace(t.Context(), e)
	require.NoError(t, err)
	require.Len(t, res.Rows, 2)
	for _, r := range res.Rows {
		assert.Equal(t, []int{64, 64}, r.admitted(), r.Policy)
	}
	decodePNG(t, filepath.Join(out, res.Plot))
}

func TestThroughputAgainstBaseline(t *testing.T) {
	srv := httptest.NewServer(baselineHandler(false))
	defer srv.Close()
	out := t.TempDir()
	e := testEnv(t, "throughput", "--target", srv.URL, "--out", out, "--policies", "a", "--step", "100ms",
		"--max-rate", "500", "--rate", "200", "--duration", "300ms", "--keys", "10", "--store-label", "none")

	res, err := runThroughput(t.Context(), e)
	require.NoError(t, err)
	require.Len(t, res.Rows, 1)
	r := res.Rows[0]
	assert.Zero(t, r.Failed)
	assert.Zero(t, r.Refused)
	assert.Positive(t, r.Admitted)
	assert.Len(t, r.sorted, r.Total())
	assert.LessOrEqual(t, r.Lat.P50, r.Lat.P90)
	assert.LessOrEqual(t, r.Lat.P90, r.Lat.P99)
	assert.LessOrEqual(t, r.Lat.P99, r.Lat.Max)
	require.NotEmpty(t, r.Steps)
	assert.Equal(t, 250, r.Steps[0].Rate)
	decodePNG(t, filepath.Join(out, res.Plot))

	var md bytes.Buffer
	res.markdown(&md)
	assert.Contains(t, md.String(), "(store: none)")
	assert.Contains(t, md.String(), "| a |")
}

func TestScenariosStopWhenCancelled(t *testing.T) {
	srv := httptest.NewServer(baselineHandler(false))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	e := testEnv(t, "all", "--target", srv.URL, "--out", t.TempDir(), "--window", "1s", "--cycles", "1")
	_, err := runBoundary(ctx, e)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = runRace(ctx, e)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = runThroughput(ctx, e)
	assert.ErrorIs(t, err, context.Canceled)
}

// With fields, the baseline's allowed decisions carry the header fields the
// service sends (a new request id each time); without, none of them.
func TestBaselineFields(t *testing.T) {
	for _, fields := range []bool{false, true} {
		srv := httptest.NewServer(baselineHandler(fields))
		ids := map[string]bool{}
		for _, r := range []struct{ method, path, header, body string }{
			{http.MethodPost, "/v1/check", "", `{"policy":"p","key":"k"}`},
			{http.MethodGet, "/ping", "X-Client-Key", ""},
			{http.MethodPost, "/rate/check", "X-User-Id", `{"endpoint":"/e"}`},
		} {
			req, err := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader(r.body))
			require.NoError(t, err)
			if r.header != "" {
				req.Header.Set(r.header, "1")
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, r.path)
			for name, want := range baselineFields {
				if fields {
					assert.Equal(t, want, resp.Header.Values(name), "%s %s", r.path, name)
				} else {
					assert.Empty(t, resp.Header.Values(name), "%s %s", r.path, name)
				}
			}
			if id := resp.Header.Get("X-Request-Id"); id != "" {
				ids[id] = true
			}
		}
		srv.Close()
		if fields {
			assert.Len(t, ids, 3, "a new request id per answer")
		} else {
			assert.Empty(t, ids)
		}
	}
}
