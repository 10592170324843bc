package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func runCost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := defaultCostConfig()
	var o outputFlags
	stores := strings.Join(c.stores, ",")
	fs := newFlagSet("cost", "Measure, per algorithm and store, the bytes each key holds and the writes each decision makes.\nRedis is measured on a private redis-server started for the run, and skipped when\nredis-server is not on PATH.", stdout, stderr)
	costFlags(fs, &c, &stores)
	o.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.check(stores); err != nil {
		return err
	}
	r, err := cost(ctx, c, newReporter(stderr, o.quiet))
	if err != nil {
		return err
	}
	return o.emit(stdout, "report.md", r, r.writeMarkdown)
}

func costFlags(fs interface {
	IntVar(*int, string, int, string)
	Int64Var(*int64, string, int64, string)
	DurationVar(*time.Duration, string, time.Duration, string)
	StringVar(*string, string, string, string)
}, c *costConfig, stores *string) {
	fs.IntVar(&c.keys, "keys", c.keys, "keys per measurement")
	fs.Int64Var(&c.limit, "cost-limit", c.limit, "limit of the cost workload's policy; each key gets twice as many attempts")
	fs.DurationVar(&c.window, "cost-window", c.window, "window of the cost workload's policy")
	fs.StringVar(stores, "stores", *stores, "stores to measure, comma-separated: memory, sqlite, redis")
	fs.IntVar(&c.clients, "clients", c.clients, "goroutines sending the attempts")
}

// check validates the cost configuration and sets its stores.
func (c *costConfig) check(stores string) error {
	c.stores = nil
	for s := range strings.SplitSeq(stores, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case storeMemory, storeSQLite, storeRedis:
			if !slices.Contains(c.stores, s) {
				c.stores = append(c.stores, s)
			}
		default:
			return usageError{fmt.Sprintf("lab: --stores: unknown store %q: want memory, sqlite or redis", s)}
		}
	}
	switch {
	case c.keys < 1:
		return usageError{"lab: --keys: want at least 1"}
	case c.clients < 1:
		return usageError{"lab: --clients: want at least 1"}
	case c.limit < 1 || 2*c.limit > int64(c.window/time.Millisecond):
		return usageError{fmt.Sprintf("lab: --cost-limit %d: want 1..%d (two attempts per millisecond of the window)", c.limit, c.window/time.Millisecond/2)}
	}
	if _, err := policies(c.limit, c.window); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

// allReport is `lab all`'s JSON document.
type allReport struct {
	Command  string           `json:"command"`
	Accuracy []accuracyReport `json:"accuracy"`
	Cost     costReport       `json:"cost"`
}

// allEngines are the engines `lab all` replays each trace kind with: the
// memory store where it is fast enough, the direct engine for the
// 100-million-request population.
var allEngines = map[string]string{kindSteady: engineMemory, kindBoundary: engineMemory, kindPopulation: engineDirect}

func runAll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := defaultTraceConfig()
	cc := defaultCostConfig()
	var o outputFlags
	workers := defaultWorkers()
	stores := strings.Join(cc.stores, ",")
	fs := newFlagSet("all", "Replay the steady, boundary and population traces (steady and boundary on the memory\nstore, population on the direct engine; the population under the attempts truth too), measure the cost, and write one report\n(report.md, report.json) with its plots into --out.", stdout, stderr)
	traceFlags(fs, &c)
	costFlags(fs, &cc, &stores)
	o.register(fs)
	fs.IntVar(&workers, "workers", workers, "goroutines replaying, each a share of the sources")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.out == "" {
		return usageError{"lab all: --out DIR is required"}
	}
	if c.file != "" {
		return usageError{"lab all: --trace: all replays the generated traces; use lab accuracy --trace"}
	}
	if err := c.check(); err != nil {
		return err
	}
	if err := cc.check(stores); err != nil {
		return err
	}
	rep := newReporter(stderr, o.quiet)
	all := allReport{Command: "all"}
	// The population once more under the attempts truth: the figures to
	// set beside Cloudflare's.
	for _, run := range []struct{ kind, truth string }{
		{kindSteady, truthAdmitted}, {kindBoundary, truthAdmitted}, {kindPopulation, truthAdmitted}, {kindPopulation, truthAttempts},
	} {
		tc := c
		tc.kind, tc.truth = run.kind, run.truth
		r, err := accuracy(ctx, tc, allEngines[run.kind], workers, rep)
		if err != nil {
			return err
		}
		if !o.quiet {
			fmt.Fprintln(stderr, throughput(r))
		}
		if err := r.plot(o.out, tc.name()); err != nil {
			return err
		}
		all.Accuracy = append(all.Accuracy, r)
	}
	var err error
	if all.Cost, err = cost(ctx, cc, rep); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.out, "report.md"), all.writeMarkdown); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.out, "report.json"), func(w io.Writer) error { return writeJSON(w, all) }); err != nil {
		return err
	}
	if o.json {
		return writeJSON(stdout, all)
	}
	return all.writeMarkdown(stdout)
}

func (a allReport) writeMarkdown(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "# Tollgate algorithm lab\n\nGenerated by `lab all` (`make lab`). Every figure below comes from a seeded trace or a measured store; the same flags give the same figures.\n\n"); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := a.writeBothTruths(w); err != nil {
		return err
	}
	for _, r := range a.Accuracy {
		if err := r.writeMarkdown(w); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	return a.Cost.writeMarkdown(w)
}

// population returns the population run under truth, if there is one.
func (a allReport) population(truth string) (accuracyReport, bool) {
	for _, r := range a.Accuracy {
		if r.Trace.Kind == kindPopulation && r.Truth == truth {
			return r, true
		}
	}
	return accuracyReport{}, false
}

// writeBothTruths prints the population's figures under both truths in one
// table, below Cloudflare's published figures for its sliding window.
func (a allReport) writeBothTruths(w io.Writer) error {
	att, ok := a.population(truthAttempts)
	adm, ok2 := a.population(truthAdmitted)
	if !ok || !ok2 {
		return nil
	}
	ew := &errWriter{w: w}
	ew.printf("## The population under both truths, beside Cloudflare's figures\n\n")
	ew.printf("Trace (seed %d): %s. Policy: %d per %s for every algorithm. %d sources went over the limit (every attempt counted) and sent %s of the requests.\n\n",
		att.Trace.Seed, att.Trace.Description, att.Policy.Limit, time.Duration(att.Policy.WindowSeconds*float64(time.Second)), att.LimitedSources, percent(float64(att.LimitedRequests)/float64(att.Requests)))
	ew.printf("| | wrongly allowed or limited (every attempt counted) | sources over, never refused (worst peak ÷ limit) | sources refused, never over | mean rate difference | false decisions (admitted units counted) |\n")
	ew.printf("|---|---:|---:|---:|---:|---:|\n")
	ew.printf("| Cloudflare, published (about 400M requests, 270k sources) | 0.003%% | a few (< 1.15×) | 0 | ~6%% | |\n")
	for i, x := range att.Algorithms {
		over := fmt.Sprint(x.Attempts.OverNeverRefused)
		if x.Attempts.OverNeverRefused > 0 {
			over += fmt.Sprintf(" (%.2f×)", x.Attempts.OverNeverRefusedPeak)
		}
		ew.printf("| `%s` | %s | %s | %d | %.1f%% | %.2f%% |\n", x.Algorithm, percent(x.ErrorShare), over,
			x.Attempts.RefusedNeverOver, 100*x.Attempts.RateDifference, 100*adm.Algorithms[i].ErrorShare)
	}
	ew.printf("\nEvery attempt counted: a request is wrongly allowed when its source's attempts in the last window, itself included, exceed the limit, wrongly limited when they do not (Cloudflare's measure). Admitted units counted: the exact sliding log of what was admitted is the truth, so `sliding_log` makes no false decision there. The sections below give each run in full.\n\n")
	return ew.err
}
