package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runLab(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelp(t *testing.T) {
	code, out, _ := runLab("--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "lab accuracy")
	assert.Contains(t, out, "false allow")
	for _, cmd := range []string{"accuracy", "cost", "gen", "all"} {
		code, out, _ := runLab(cmd, "--help")
		assert.Equal(t, 0, code, cmd)
		assert.Contains(t, out, "Usage: lab "+cmd, cmd)
		if cmd != "gen" { // gen writes a trace, not figures
			assert.Contains(t, out, "-json", cmd)
		}
	}
}

func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"accuracy", "--limit", "0"},
		{"accuracy", "--window", "1500ms"},
		{"accuracy", "--kind", "bursty"},
		{"accuracy", "--engine", "redis"},
		{"accuracy", "extra"},
		{"accuracy", "--population-at-limit", "0"},
		{"cost", "--stores", "memory,postgres"},
		{"cost", "--keys", "0"},
		{"all"},
		{"gen", "--trace", "x.csv"},
	} {
		code, _, errOut := runLab(args...)
		assert.Equal(t, 2, code, "%q", args)
		assert.NotEmpty(t, errOut, "%q", args)
	}
	code, _, errOut := runLab("accuracy", "--trace", filepath.Join(t.TempDir(), "missing.csv"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no such file")
	empty := filepath.Join(t.TempDir(), "empty.csv")
	require.NoError(t, os.WriteFile(empty, []byte("timestamp,key\n"), 0o600))
	code, _, errOut = runLab("accuracy", "--trace", empty)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "holds no request")
}

func TestAccuracyJSONFields(t *testing.T) {
	var doc map[string]any
	require.NoError(t, json.Unmarshal(accuracyJSON(t, smallArgs(kindBoundary)...), &doc))
	algs := doc["algorithms"].([]any)
	require.Len(t, algs, 4)
	for _, a := range algs {
		for _, field := range []string{"algorithm", "requests", "admitted", "false_allows", "false_refusals", "worst_overshoot"} {
			assert.Contains(t, a, field)
		}
	}
	assert.Equal(t, "fixed_window", algs[0].(map[string]any)["algorithm"])
	assert.InDelta(t, 2.0, algs[0].(map[string]any)["worst_overshoot"], 1e-9, "a boundary burst lets the fixed window admit twice its limit")
}

func TestAccuracyOnAnAccessLog(t *testing.T) {
	var b strings.Builder
	// Client .1 sends 5 requests in one second, client .2 one: limit 3.
	for i := range 5 {
		b.WriteString(`10.0.0.1 - - [01/Jan/2026:00:00:0` + string(rune('0'+i)) + ` +0000] "GET / HTTP/1.1" 200 1` + "\n")
	}
	b.WriteString(`10.0.0.2 - - [01/Jan/2026:00:00:09 +0000] "GET / HTTP/1.1" 200 1` + "\n")
	path := filepath.Join(t.TempDir(), "access.log")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	code, out, errOut := runLab("accuracy", "--trace", path, "--limit", "3", "--window", "10s", "--json", "--quiet")
	require.Equal(t, 0, code, errOut)
	var r accuracyReport
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, int64(6), r.Requests)
	assert.Equal(t, int64(2), r.Sources)
	assert.Equal(t, int64(1), r.LimitedSources)
	assert.Equal(t, int64(4), r.ExactAdmitted, "3 of .1's, and .2's")
	assert.Equal(t, "file", r.Trace.Kind)
}

func TestAllWritesTheReport(t *testing.T) {
	out := t.TempDir()
	args := append([]string{"all", "--out", out, "--quiet", "--keys", "5", "--cost-limit", "4", "--stores", "memory,sqlite"}, smallArgs(kindSteady)[2:]...)
	code, stdout, errOut := runLab(args...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, stdout, "## Accuracy: population trace")
	assert.Contains(t, stdout, "## Cost")
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Equal(t, stdout, string(report))
	var doc allReport
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Len(t, doc.Accuracy, 4)
	assert.Equal(t, truthAttempts, doc.Accuracy[3].Truth, "the population once more, under the attempts truth")
	assert.Equal(t, kindPopulation, doc.Accuracy[3].Trace.Kind)
	assert.Contains(t, stdout, "## Accuracy: population trace, every attempt counted")
	assert.Contains(t, stdout, "| Cloudflare, published (about 400M requests, 270k sources) | 0.003% |")
	bad, err := checkBothTruthsTable(report, raw)
	require.NoError(t, err)
	assert.Empty(t, bad, "report.md's table under both truths is report.json's")
	assert.Len(t, doc.Cost.Rows, 8)
	for _, r := range doc.Accuracy {
		for _, p := range r.Plots {
			fi, err := os.Stat(filepath.Join(out, p))
			require.NoError(t, err)
			assert.Positive(t, fi.Size())
			assert.Contains(t, string(report), "("+p+")")
		}
	}
}

// TestProgressWithoutATerminal: plain lines at each tenth, nothing when
// quiet.
func TestProgressWithoutATerminal(t *testing.T) {
	var buf bytes.Buffer
	p := reporter{w: &buf}.start("replay", "events", 100)
	for range 20 {
		p.Add(5)
	}
	p.Finish()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	assert.Len(t, lines, 10, buf.String())
	assert.Contains(t, lines[0], "lab: replay:  10% (10/100 events")
	assert.Contains(t, lines[9], "100% (100/100 events")
	assert.NotContains(t, buf.String(), "\r")

	buf.Reset()
	q := reporter{w: &buf, quiet: true}.start("replay", "events", 100)
	q.Add(100)
	q.Finish()
	assert.Empty(t, buf.String())
}
