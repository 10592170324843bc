package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lab's table in the docs and the run it was taken from.
const (
	labTableDoc  = "../../docs/algorithms.md"
	labReportDoc = "../../docs/lab/report.json"
)

// labTableRows maps the first cell of each figure row of the docs' table to
// the figures report.json gives for one algorithm, in the cell's order.
func labTableRows(r allReport) map[string]func(alg string) []float64 {
	acc := func(kind string, alg string) algAccuracy {
		for _, a := range r.Accuracy {
			if a.Trace.Kind != kind || a.Truth == truthAttempts {
				continue
			}
			for _, x := range a.Algorithms {
				if x.Algorithm == alg {
					return x
				}
			}
		}
		return algAccuracy{Algorithm: "missing", ErrorShare: math.NaN(), WorstOvershoot: math.NaN(), RateMAD: math.NaN()}
	}
	cost := func(alg string, figure func(costRow) float64) []float64 {
		var out []float64
		for _, store := range []string{"memory", "sqlite", "redis"} {
			v := math.NaN()
			for _, row := range r.Cost.Rows {
				if row.Algorithm == alg && row.Store == store {
					v = figure(row)
				}
			}
			out = append(out, v)
		}
		return out
	}
	errors := func(kind string) func(string) []float64 {
		return func(alg string) []float64 { return []float64{100 * acc(kind, alg).ErrorShare} }
	}
	return map[string]func(string) []float64{
		"false decisions, steady trace":   errors(kindSteady),
		"false decisions, boundary trace": errors(kindBoundary),
		"false decisions, population":     errors(kindPopulation),
		"worst burst (any trace)": func(alg string) []float64 {
			w := 0.0
			for _, k := range []string{kindSteady, kindBoundary, kindPopulation} {
				w = max(w, acc(k, alg).WorstOvershoot)
			}
			return []float64{w}
		},
		"rate error, population": func(alg string) []float64 { return []float64{acc(kindPopulation, alg).RateMAD} },
		"bytes per key":          func(alg string) []float64 { return cost(alg, func(c costRow) float64 { return c.BytesPerKey }) },
		"writes per decision":    func(alg string) []float64 { return cost(alg, func(c costRow) float64 { return c.WritesPerDecision }) },
	}
}

var (
	tableAlg    = regexp.MustCompile("`([a-z_]+)`")
	tableNumber = regexp.MustCompile(`\d[\d,]*(\.\d+)?`)
)

// checkLabTable returns each cell of the docs' lab table that differs from
// report.json, at the precision the cell is written with.
func checkLabTable(md, report []byte) ([]string, error) {
	var r allReport
	if err := json.Unmarshal(report, &r); err != nil {
		return nil, err
	}
	rows := labTableRows(r)
	var algs []string
	var bad []string
	seen := map[string]bool{}
	for line := range strings.SplitSeq(string(md), "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 2 {
			continue
		}
		if strings.TrimSpace(cells[0]) == "" && strings.Contains(line, "`fixed_window`") {
			algs = nil
			for _, c := range cells[1:] {
				if m := tableAlg.FindStringSubmatch(c); m != nil {
					algs = append(algs, m[1])
				}
			}
			continue
		}
		for prefix, want := range rows {
			if algs == nil || !strings.HasPrefix(strings.TrimSpace(cells[0]), prefix) {
				continue
			}
			seen[prefix] = true
			for i, alg := range algs {
				if i+1 >= len(cells) {
					bad = append(bad, fmt.Sprintf("%s: no cell for %s", prefix, alg))
					continue
				}
				nums := tableNumber.FindAllString(cells[i+1], -1)
				w := want(alg)
				if len(nums) != len(w) {
					bad = append(bad, fmt.Sprintf("%s, %s: %q holds %d figures, want %d", prefix, alg, cells[i+1], len(nums), len(w)))
					continue
				}
				for j, n := range nums {
					if ok, decimals := sameFigure(n, w[j]); !ok {
						bad = append(bad, fmt.Sprintf("%s, %s: the docs say %s, report.json %.*f", prefix, alg, n, decimals, w[j]))
					}
				}
			}
		}
	}
	for prefix := range rows {
		if !seen[prefix] {
			bad = append(bad, fmt.Sprintf("no row %q in the table", prefix))
		}
	}
	return bad, nil
}

// TestDocsTableMatchesTheRun: the figures the docs print are those of the
// committed run; rerun `make lab` and copy them when either changes.
func TestDocsTableMatchesTheRun(t *testing.T) {
	md, err := os.ReadFile(labTableDoc)
	require.NoError(t, err)
	report, err := os.ReadFile(labReportDoc)
	require.NoError(t, err)
	bad, err := checkLabTable(md, report)
	require.NoError(t, err)
	assert.Empty(t, bad)

	// The check can fail: one figure changed, one row gone.
	doctored := strings.Replace(string(md), "| 19.4% |", "| 19.5% |", 1)
	require.NotEqual(t, string(md), doctored, "the steady trace's fixed_window figure is in the docs")
	bad, err = checkLabTable([]byte(doctored), report)
	require.NoError(t, err)
	assert.Equal(t, []string{"false decisions, steady trace, fixed_window: the docs say 19.5, report.json 19.4"}, bad)
	bad, err = checkLabTable([]byte(strings.Replace(string(md), "| rate error, population", "| rate fault", 1)), report)
	require.NoError(t, err)
	assert.Equal(t, []string{`no row "rate error, population" in the table`}, bad)
}

// checkBothTruthsTable returns each figure of md's population table under
// both truths (the one beside Cloudflare's figures, whose header names
// "wrongly allowed or limited") that differs from report.json, at the
// precision it is written with, and a complaint when md has no such table.
func checkBothTruthsTable(md, report []byte) ([]string, error) {
	var r allReport
	if err := json.Unmarshal(report, &r); err != nil {
		return nil, err
	}
	att, ok := r.population(truthAttempts)
	adm, ok2 := r.population(truthAdmitted)
	if !ok || !ok2 {
		return []string{"report.json holds no population run under each truth"}, nil
	}
	want := map[string][]float64{}
	for i, x := range att.Algorithms {
		w := []float64{100 * x.ErrorShare, float64(x.Attempts.OverNeverRefused)}
		if x.Attempts.OverNeverRefused > 0 {
			w = append(w, x.Attempts.OverNeverRefusedPeak)
		}
		want[x.Algorithm] = append(w, float64(x.Attempts.RefusedNeverOver), 100*x.Attempts.RateDifference, 100*adm.Algorithms[i].ErrorShare)
	}
	var bad []string
	seen := map[string]bool{}
	inTable := false
	for line := range strings.SplitSeq(string(md), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if strings.Contains(line, "wrongly allowed or limited") {
			inTable = true
			continue
		}
		m := tableAlg.FindStringSubmatch(cells[0])
		if !inTable || m == nil || want[m[1]] == nil {
			continue
		}
		alg := m[1]
		seen[alg] = true
		nums := tableNumber.FindAllString(strings.Join(cells[1:], "|"), -1)
		if len(nums) != len(want[alg]) {
			bad = append(bad, fmt.Sprintf("%s: %q holds %d figures, want %d", alg, line, len(nums), len(want[alg])))
			continue
		}
		for j, n := range nums {
			if ok, decimals := sameFigure(n, want[alg][j]); !ok {
				bad = append(bad, fmt.Sprintf("%s, figure %d: the docs say %s, report.json %.*f", alg, j+1, n, decimals, want[alg][j]))
			}
		}
	}
	for _, x := range att.Algorithms {
		if !seen[x.Algorithm] {
			bad = append(bad, fmt.Sprintf("no row for %s in the table under both truths", x.Algorithm))
		}
	}
	return bad, nil
}

// TestBothTruthsTableMatchesTheRun: the population table under both truths
// that README and docs/algorithms.md print is the committed run's.
func TestBothTruthsTableMatchesTheRun(t *testing.T) {
	report, err := os.ReadFile(labReportDoc)
	require.NoError(t, err)
	for _, doc := range []string{labTableDoc, "../../README.md"} {
		md, err := os.ReadFile(doc)
		require.NoError(t, err)
		bad, err := checkBothTruthsTable(md, report)
		require.NoError(t, err)
		assert.Empty(t, bad, doc)
	}

	// The check can fail: one figure changed, one row gone.
	md, err := os.ReadFile(labTableDoc)
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `sliding_window` \\| [0-9.]+%").FindString(string(md))
	require.NotEmpty(t, row, "the table has a sliding_window row")
	doctored := strings.Replace(string(md), row, "| `sliding_window` | 99.9999%", 1)
	bad, err := checkBothTruthsTable([]byte(doctored), report)
	require.NoError(t, err)
	require.Len(t, bad, 1)
	assert.Contains(t, bad[0], "sliding_window, figure 1: the docs say 99.9999")
	bad, err = checkBothTruthsTable([]byte(strings.Replace(string(md), row, "| `sliding_widow` | 1%", 1)), report)
	require.NoError(t, err)
	assert.Equal(t, []string{"no row for sliding_window in the table under both truths"}, bad)
}

// sameFigure reports whether n, a figure as the docs print it (thousands
// separated by commas), is want rounded to n's decimals, and how many
// decimals n has.
func sameFigure(n string, want float64) (same bool, decimals int) {
	if _, frac, ok := strings.Cut(n, "."); ok {
		decimals = len(frac)
	}
	got, _ := strconv.ParseFloat(strings.ReplaceAll(n, ",", ""), 64)
	scale := math.Pow(10, float64(decimals))
	return math.Round(want*scale) == math.Round(got*scale), decimals
}
