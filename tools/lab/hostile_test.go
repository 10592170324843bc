package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeTrace writes lines as a trace file and returns its path.
func writeTrace(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.csv")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// hostileSpan is a 10-line trace whose one source spans days at a 1s
// window, with false decisions at its start (limit 2: the fixed window
// admits 0.9, 0.95 and 1.05, the exact log refuses 1.05) and at its end.
func hostileSpan(t *testing.T, last time.Time) string {
	t.Helper()
	ns := func(d time.Duration) string { return strconv.FormatInt(traceOrigin+int64(d), 10) }
	end := last.UnixNano() - traceOrigin
	return writeTrace(t,
		ns(900*time.Millisecond)+",a", ns(950*time.Millisecond)+",a", ns(1050*time.Millisecond)+",a",
		ns(2*time.Second)+",b", ns(3*time.Second)+",b",
		ns(time.Duration(end)-100*time.Millisecond)+",a", ns(time.Duration(end)-50*time.Millisecond)+",a",
		ns(time.Duration(end)+50*time.Millisecond)+",a", ns(time.Duration(end)+60*time.Millisecond)+",a",
		ns(time.Duration(end)+70*time.Millisecond)+",a")
}

// TestLongSpanStaysBounded: what the lab keeps for a source, the worst
// source's plot included, is bounded by the window, not by the trace's
// span (issue 24: 30 days at 1s took 5.5 GB).
func TestLongSpanStaysBounded(t *testing.T) {
	origin := time.Unix(0, traceOrigin).UTC()
	for name, last := range map[string]time.Time{
		"30 days":   origin.Add(30 * 24 * time.Hour),
		"year 2200": time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		c := defaultTraceConfig()
		c.kind, c.file, c.limit, c.window = kindFile, hostileSpan(t, last), 2, time.Second
		r, err := accuracy(context.Background(), c, engineDirect, 2, reporter{quiet: true})
		require.NoError(t, err, name)
		assert.Equal(t, int64(10), r.Requests, name)
		assert.Equal(t, "a", r.WorstSource, name)
		require.NotNil(t, r.worst, name)
		assert.LessOrEqual(t, len(r.worst.attempts), worstWindows*seriesBins, name)
		var seen int64
		for _, n := range r.worst.attempts {
			seen += n
		}
		assert.Equal(t, int64(3), seen, "%s: the plot holds the first disagreement's windows: 0.9, 0.95, 1.05", name)
	}
}

// TestOutOfRangeTimestampsAreRefused: a time the lab cannot do arithmetic
// on stops the replay with the line's number, never a panic or a silent
// wrap.
func TestOutOfRangeTimestampsAreRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		lines []string
		want  string
	}{
		"min int64 first": {[]string{"-9223372036854775808,a", "900000000,a", "950000000,a", "1050000000,a"}, "line 1: timestamp -9223372036854775808"},
		"before 1970":     {[]string{"10,a", "1969-12-31T23:59:59Z,a"}, "line 2: timestamp 1969-12-31T23:59:59Z"},
		"after 2262":      {[]string{"2026-01-01T00:00:00Z,a", "2263-01-01T00:00:00Z,a"}, "line 2: timestamp 2263-01-01T00:00:00Z"},
		"clf after 2262":  {[]string{`10.0.0.1 - - [01/Jan/2263:00:00:00 +0000] "GET / HTTP/1.1" 200 5`}, "line 1: timestamp 2263-01-01T00:00:00Z"},
	} {
		code, out, errOut := runLab("accuracy", "--trace", writeTrace(t, tc.lines...), "--limit", "2", "--window", "1s", "--quiet", "--json")
		assert.Equal(t, 1, code, "%s: %s", name, out)
		assert.Contains(t, errOut, tc.want, name)
		assert.Contains(t, errOut, "outside the lab's range", name)
	}
}

// TestMaxKeys: distinct keys are bounded, with a message naming the bound,
// the line and how to raise it; generated traces are held to it too.
func TestMaxKeys(t *testing.T) {
	path := writeTrace(t, "1,a", "2,b", "3,a", "4,c", "5,d", "6,e")
	code, _, errOut := runLab("accuracy", "--trace", path, "--quiet", "--max-keys", "3")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "line 5: more than 3 distinct keys (--max-keys 3)")
	code, _, errOut = runLab("accuracy", "--trace", path, "--quiet", "--max-keys", "5", "--json")
	assert.Equal(t, 0, code, errOut)
	code, _, errOut = runLab("accuracy", "--kind", "population", "--population-sources", "20", "--population-at-limit", "2", "--max-keys", "10")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--population-sources 20 is above --max-keys 10")
	code, _, errOut = runLab("accuracy", "--max-keys", "0")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--max-keys 0: want at least 1, at most")
}

// FuzzReplayAFile: whatever a trace file holds, the replay returns figures
// or an error, never a panic, and counts every request it decided.
func FuzzReplayAFile(f *testing.F) {
	f.Add([]byte("900000000,a\n950000000,a\n1050000000,a\n2,b,2\n"))
	f.Add([]byte("-9223372036854775808,a\n900000000,a\n"))
	f.Add([]byte("2026-01-01T00:00:00Z,a\n2263-01-01T00:00:00Z,a\n"))
	f.Add([]byte(`10.0.0.1 - - [01/Jan/2026:00:00:01 +0000] "GET / HTTP/1.1" 200 5` + "\n"))
	f.Fuzz(func(t *testing.T, trace []byte) {
		src, err := newFileSource(strings.NewReader(string(trace)), 0, formatAuto, 2, 8)
		require.NoError(t, err)
		res, err := replay(context.Background(), src, replayOptions{limit: 2, window: time.Second, engine: engineDirect, workers: 2, watch: -1})
		if err != nil {
			return
		}
		for _, s := range res.stats {
			require.Equal(t, res.events, s.requests)
		}
	})
}
