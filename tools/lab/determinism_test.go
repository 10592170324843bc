package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallTraces are the three generated traces at a size a test can afford.
func smallTraces() []traceConfig {
	c := defaultTraceConfig()
	c.steady = steadyParams{Sources: 30, Windows: 6, Low: 0.5, High: 1.5}
	c.boundary = boundaryParams{Sources: 20, Windows: 7, Every: 3, Burst: 1, Background: 0.1, MaxSpan: 0.1}
	c.population = populationParams{Sources: 5000, Requests: 30_000, S: 1.1, AtLimit: 20}
	var out []traceConfig
	for _, k := range []string{kindSteady, kindBoundary, kindPopulation} {
		tc := c
		tc.kind = k
		out = append(out, tc)
	}
	return out
}

// accuracyJSON runs lab accuracy with args and returns its JSON output.
func accuracyJSON(t *testing.T, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"accuracy", "--json", "--quiet"}, args...), &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	return out.Bytes()
}

func smallArgs(kind string) []string {
	return []string{"--kind", kind,
		"--steady-sources", "30", "--steady-windows", "6",
		"--boundary-sources", "20", "--boundary-windows", "7",
		"--population-sources", "5000", "--population-requests", "30000", "--population-at-limit", "20"}
}

func TestSameSeedSameFigures(t *testing.T) {
	for _, truth := range []string{truthAdmitted, truthAttempts} {
		for _, kind := range []string{kindSteady, kindBoundary, kindPopulation} {
			t.Run(truth+"/"+kind, func(t *testing.T) {
				args := append(smallArgs(kind), "--truth", truth)
				first := accuracyJSON(t, append(args, "--seed", "7", "--workers", "1")...)
				again := accuracyJSON(t, append(args, "--seed", "7", "--workers", "3")...)
				assert.Equal(t, string(first), string(again), "same seed, another split of the work")
				assert.Equal(t, string(first), string(accuracyJSON(t, append(args, "--seed", "7", "--workers", "1")...)), "same seed, same run")
				other := accuracyJSON(t, append(args, "--seed", "8")...)
				assert.NotEqual(t, string(first), string(other), "another seed, another trace")
			})
		}
	}
}

// TestEnginesAgree shows that the direct engine (the library's algorithm
// functions on the lab's own state) decides exactly as the memory store.
func TestEnginesAgree(t *testing.T) {
	for _, c := range smallTraces() {
		t.Run(c.kind, func(t *testing.T) {
			var got [2]accuracyReport
			for i, engine := range []string{engineDirect, engineMemory} {
				r, err := accuracy(context.Background(), c, engine, 2, reporter{quiet: true})
				require.NoError(t, err)
				r.Engine, r.elapsed = "", 0
				got[i] = r
			}
			assert.Equal(t, got[0], got[1])
			assert.Positive(t, got[0].Algorithms[0].FalseAllows, "a trace on which the fixed window errs")
		})
	}
}

// TestGeneratedTraceReplaysFromItsCSV writes a trace with lab gen and
// replays the file: the figures are the generated trace's.
func TestGeneratedTraceReplaysFromItsCSV(t *testing.T) {
	for _, kind := range []string{kindSteady, kindBoundary} {
		var csv, errOut bytes.Buffer
		require.Equal(t, 0, run(context.Background(), append([]string{"gen", "--quiet"}, smallArgs(kind)...), &csv, &errOut), errOut.String())
		path := filepath.Join(t.TempDir(), kind+".csv")
		require.NoError(t, os.WriteFile(path, csv.Bytes(), 0o600))
		gen, err := accuracy(context.Background(), smallTraces()[map[string]int{kindSteady: 0, kindBoundary: 1}[kind]], engineDirect, 2, reporter{quiet: true})
		require.NoError(t, err)
		c := defaultTraceConfig()
		c.kind, c.file = kindFile, path
		file, err := accuracy(context.Background(), c, engineDirect, 2, reporter{quiet: true})
		require.NoError(t, err)
		assert.Empty(t, file.Notes, "nothing skipped or moved")
		assert.Equal(t, gen.Algorithms, file.Algorithms, kind)
		assert.Equal(t, gen.Requests, file.Requests)
		assert.Equal(t, gen.WorstSource, file.WorstSource)
		assert.Equal(t, gen.Trace.Start, file.Trace.Start)
		lines := bytes.Count(csv.Bytes(), []byte{'\n'})
		assert.Equal(t, strconv.Itoa(lines), strconv.FormatInt(file.Requests, 10))
	}
}
