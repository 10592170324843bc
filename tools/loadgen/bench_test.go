package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBenchTarget(t *testing.T) {
	got, err := parseBenchTarget("redis=http://127.0.0.1:8080/@12+34")
	require.NoError(t, err)
	assert.Equal(t, benchTarget{Name: "redis", URL: "http://127.0.0.1:8080", PIDs: []int{12, 34}}, got)
	got, err = parseBenchTarget("base=https://127.0.0.1:1")
	require.NoError(t, err)
	assert.Equal(t, benchTarget{Name: "base", URL: "https://127.0.0.1:1"}, got)
	for _, bad := range []string{"", "http://127.0.0.1:1", "=http://127.0.0.1:1", "a=ftp://x", "a=http://", "a=http://h@", "a=http://h@0", "a=http://h@1+x"} {
		_, err := parseBenchTarget(bad)
		assert.Error(t, err, "%q", bad)
	}
	var l benchTargets
	require.NoError(t, l.Set("a=http://127.0.0.1:1"))
	assert.Error(t, l.Set("a=http://127.0.0.1:2"), "a name given twice")
}

func TestParseStatCPU(t *testing.T) {
	// utime 150 and stime 50 ticks: 2s; the command name holds spaces and
	// parentheses.
	line := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 900 0 0 0 150 50 0 0 20 0 9 0 100 1000 200\n"
	got, err := parseStatCPU(line)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, got)
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 -5 1 0", "1 (x) S 1 2 3 4 5 6 7 8 9 10 a 1 0"} {
		_, err := parseStatCPU(bad)
		assert.Error(t, err, "%q", bad)
	}
	self, err := cpuTime([]int{os.Getpid()})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, self, time.Duration(0))
	_, err = cpuTime([]int{1 << 30})
	assert.Error(t, err, "no such process")
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 0.0, median([]float64{}))
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	xs := []time.Duration{3, 1, 2}
	assert.Equal(t, time.Duration(2), median(xs))
	assert.Equal(t, []time.Duration{3, 1, 2}, xs, "not modified")
}

// countingServer serves the baseline and counts its answers by status;
// every failEvery-th request (0: none) is answered 503 instead.
type countingServer struct {
	*httptest.Server
	ok, failed atomic.Int64
}

func newCountingServer(t *testing.T, failEvery int64) *countingServer {
	cs := &countingServer{}
	base := baselineHandler(false)
	var n atomic.Int64
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == checkPath && failEvery > 0 && n.Add(1)%failEvery == 0 {
			cs.failed.Add(1)
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == checkPath {
			cs.ok.Add(1)
		}
		base.ServeHTTP(w, r)
	}))
	t.Cleanup(cs.Close)
	return cs
}

// Every request bench sends is counted once in its tables: the runs' answers
// add up to what each server answered (less the one probe), failures
// included, and the ratio compares each round with the baseline's.
func TestBenchCountsEveryAnswer(t *testing.T) {
	base, flaky := newCountingServer(t, 0), newCountingServer(t, 7)
	pid := strconv.Itoa(os.Getpid())
	out := filepath.Join(t.TempDir(), "bench.md")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"bench", "--target", "baseline=" + base.URL + "@" + pid, "--target", "flaky=" + flaky.URL,
		"--rounds", "2", "--duration", "150ms", "--connections", "4", "--warmup", "0", "--fixed-rate", "200",
		"--fixed-duration", "150ms", "--keys", "10", "--out", out, "--goal", "flaky=9/1us"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())

	tables, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, stdout.String(), string(tables))
	assert.Contains(t, stdout.String(), "| baseline | ")
	assert.Contains(t, stdout.String(), "| flaky | ")
	assert.Contains(t, stdout.String(), "### Fixed rate (vegeta): POST /v1/check at 200 req/s for 150ms per target")
	assert.Contains(t, stdout.String(), "- flaky: ", "the first failure is named")
	assert.Contains(t, stdout.String(), "`503 Service Unavailable`")
	assert.Regexp(t, `\| baseline \| \d+ \| 1\.00 \|  \| [0-9.]+ms \| [0-9.]+ms \| [0-9.]+µs \| \+0\.0µs \|  \| n/a \| 0 \|`, stdout.String())
	assert.Regexp(t, `\| flaky \| \d+ \| [0-9.]+ \| ≥ 9\.00: \*\*short by [0-9.]+\*\* \| [0-9.]+ms \| [0-9.]+ms \| n/a \| n/a \|  \| n/a \| [1-9]\d* \|`,
		stdout.String(), "no PID: no CPU; a goal it cannot reach")
	assert.Contains(t, stderr.String(), "bench: vegeta /v1/check round 2/2")
}

// runBench's own counts match the servers' exactly.
func TestBenchRunsMatchServerCounts(t *testing.T) {
	base, flaky := newCountingServer(t, 0), newCountingServer(t, 5)
	var targets benchTargets
	require.NoError(t, targets.Set("baseline="+base.URL))
	require.NoError(t, targets.Set("flaky="+flaky.URL))
	o := benchOptions{targets: targets, baseline: "baseline", policy: "p", route: "check", generator: "vegeta", rounds: 2, duration: 100 * time.Millisecond,
		connections: 3, fixedRate: 100, fixedFor: 100 * time.Millisecond, keys: 5, timeout: 5 * time.Second}
	require.NoError(t, o.validate())
	res, err := runBench(t.Context(), o, &bytes.Buffer{})
	require.NoError(t, err)
	for i, cs := range []*countingServer{base, flaky} {
		row := res.rows[i]
		require.Len(t, row.Runs, 2)
		require.Len(t, row.Ratios, 2)
		require.NotNil(t, row.Fixed)
		var ok, failed int64
		for _, r := range append(row.Runs, *row.Fixed) {
			ok += int64(r.OK)
			failed += int64(r.Failed)
			assert.Equal(t, time.Duration(-1), r.CPU, "no PID given")
		}
		assert.Equal(t, cs.ok.Load(), ok+1, "%s: answered 200, plus the probe", row.Target.Name)
		assert.Equal(t, cs.failed.Load(), failed, "%s: answered 503", row.Target.Name)
	}
	assert.Equal(t, []float64{1, 1}, res.rows[0].Ratios)
	assert.Positive(t, flaky.failed.Load())
}
