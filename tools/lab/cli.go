package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

const usage = `lab: which rate-limiting algorithm, at what price.

Usage:
  lab accuracy [flags]   replay a trace through every algorithm and compare
                         each decision with an exact sliding log
  lab cost [flags]       bytes per key and writes per decision, per algorithm
                         and store (memory, sqlite, redis)
  lab gen [flags]        write a generated trace as CSV (timestamp,key,cost)
  lab whatif --config F --trace LOG
                         replay an access log through a Tollgate
                         configuration: who would be refused, where, when
  lab all --out DIR      the default traces, both commands, one report with
                         plots in DIR (what "make lab" runs)

Run "lab COMMAND --help" for a command's flags.

The algorithms are fixed_window, sliding_log, sliding_window and token_bucket,
all with the same policy (--limit per --window); every source of a trace is
its own key. The ground truth is an exact sliding log kept by the lab
itself: a request is admitted when the units admitted in (t-window, t] plus
its cost stay within the limit. A false allow is a request an algorithm
admitted that the exact log refuses; a false refusal the reverse.

Traces are generated from --seed (the same seed gives byte-identical
figures) or read from a file, streamed, never loaded whole:
  steady      Poisson sources at rates around the limit
  boundary    bursts straddling window boundaries, over a light background
  population  250,000 sources with Zipf-distributed rates, 100,000,000
              requests: a few abusers far over the limit, most far under
  --trace F   CSV "timestamp,key[,cost]" (RFC 3339 or Unix nanoseconds) or a
              common/combined access log (the host is the key); times from
              1970 to 2260 (a line outside stops the replay, naming it), at
              most --max-keys distinct keys (default 1,000,000)
`

// run executes one command line and returns the exit code: 0 success, 1 a
// failed run, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "accuracy":
		err = runAccuracy(ctx, args[1:], stdout, stderr)
	case "cost":
		err = runCost(ctx, args[1:], stdout, stderr)
	case "gen":
		err = runGen(ctx, args[1:], stdout, stderr)
	case "all":
		err = runAll(ctx, args[1:], stdout, stderr)
	case "whatif":
		err = runWhatif(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "lab: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintln(stderr, err)
		return 2
	}
	fmt.Fprintln(stderr, err)
	return 1
}

// usageError is a bad command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// newFlagSet returns a flag set that prints its help on stdout when asked
// and its errors on stderr.
func newFlagSet(name, about string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("lab "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, "Usage: lab %s [flags]\n\n%s\n\nFlags:\n", name, about)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	return fs
}

// parseFlags parses args and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}

// traceFlags registers the flags that choose a trace and its policy.
func traceFlags(fs *flag.FlagSet, c *traceConfig) {
	fs.StringVar(&c.kind, "kind", c.kind, "generated trace: steady, boundary or population")
	fs.StringVar(&c.file, "trace", "", "replay this file instead: CSV timestamp,key[,cost] or a common/combined access log")
	fs.StringVar(&c.format, "format", c.format, "format of --trace: auto, csv or clf")
	fs.Uint64Var(&c.seed, "seed", c.seed, "seed of the generated trace")
	fs.Int64Var(&c.limit, "limit", c.limit, "units allowed per window, every algorithm")
	fs.DurationVar(&c.window, "window", c.window, "window length, whole seconds")
	fs.IntVar(&c.maxKeys, "max-keys", c.maxKeys, "most distinct sources a replay holds (about 1.2 KB each until it ends); a trace with more stops with an error")
	fs.IntVar(&c.steady.Sources, "steady-sources", c.steady.Sources, "steady: number of sources")
	fs.IntVar(&c.steady.Windows, "steady-windows", c.steady.Windows, "steady: duration in windows")
	fs.IntVar(&c.boundary.Sources, "boundary-sources", c.boundary.Sources, "boundary: number of sources")
	fs.IntVar(&c.boundary.Windows, "boundary-windows", c.boundary.Windows, "boundary: duration in windows")
	fs.IntVar(&c.population.Sources, "population-sources", c.population.Sources, "population: number of sources")
	fs.Int64Var(&c.population.Requests, "population-requests", c.population.Requests, "population: number of requests")
	fs.Float64Var(&c.population.S, "population-zipf", c.population.S, "population: Zipf exponent of the source rates")
	fs.IntVar(&c.population.AtLimit, "population-at-limit", c.population.AtLimit, "population: rank of the source that sends exactly the limit")
}

// check validates a trace configuration after the flags.
func (c *traceConfig) check() error {
	if c.file != "" {
		c.kind = kindFile
	}
	bad := func(format string, args ...any) error { return usageError{fmt.Sprintf("lab: "+format, args...)} }
	switch {
	case c.limit < 1:
		return bad("--limit %d: want at least 1", c.limit)
	case c.window < time.Second || c.window%time.Second != 0:
		return bad("--window %s: want whole seconds, at least 1s", c.window)
	case c.steady.Sources < 1 || c.steady.Windows < 1:
		return bad("steady: want at least one source and one window")
	case c.boundary.Sources < 1 || c.boundary.Windows < 2:
		return bad("boundary: want at least one source and two windows")
	case c.population.Sources < 1 || c.population.Requests < 1 || c.population.S <= 0:
		return bad("population: want sources, requests and a Zipf exponent above zero")
	case c.population.AtLimit < 1 || c.population.AtLimit > c.population.Sources:
		return bad("--population-at-limit %d: want a rank in 1..%d", c.population.AtLimit, c.population.Sources)
	case c.truth != truthAdmitted && c.truth != truthAttempts:
		return bad("--truth %q: want %s or %s", c.truth, truthAdmitted, truthAttempts)
	case c.maxKeys < 1 || c.maxKeys > 1<<31:
		return bad("--max-keys %d: want at least 1, at most %d", c.maxKeys, 1<<31)
	}
	sources := map[string]int{kindSteady: c.steady.Sources, kindBoundary: c.boundary.Sources, kindPopulation: c.population.Sources, kindFile: 0}
	n, ok := sources[c.kind]
	switch {
	case !ok:
		return bad("--kind %q: want steady, boundary or population", c.kind)
	case n > c.maxKeys:
		return bad("--%s-sources %d is above --max-keys %d", c.kind, n, c.maxKeys)
	}
	if _, err := policies(c.limit, c.window); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

// outputFlags are the flags every measuring command has.
type outputFlags struct {
	json  bool
	quiet bool
	out   string
}

func (o *outputFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "print the figures as one JSON document instead of Markdown")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress on stderr")
	fs.StringVar(&o.out, "out", "", "also write the Markdown report (report.md) and PNG plots into this directory")
}

// emit writes a command's report: its Markdown into --out as name (when
// given), then v as JSON (--json) or the Markdown on stdout.
func (o outputFlags) emit(stdout io.Writer, name string, v any, markdown func(io.Writer) error) error {
	if o.out != "" {
		if err := writeFile(filepath.Join(o.out, name), markdown); err != nil {
			return err
		}
	}
	if o.json {
		return writeJSON(stdout, v)
	}
	return markdown(stdout)
}

func runAccuracy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := defaultTraceConfig()
	var o outputFlags
	engine := engineDirect
	workers := defaultWorkers()
	fs := newFlagSet("accuracy", "Replay a trace through every algorithm with the trace's own timestamps and compare each\ndecision with an exact sliding log of the same limit and window.", stdout, stderr)
	traceFlags(fs, &c)
	o.register(fs)
	fs.StringVar(&engine, "engine", engine, "direct (library algorithm functions on compact state; fast) or memory (memstore through limiter.Store)")
	fs.IntVar(&workers, "workers", workers, "goroutines replaying, each a share of the sources")
	fs.StringVar(&c.truth, "truth", c.truth, "ground truth: admitted (an exact sliding log of admitted units) or attempts (every attempt counted in a sliding window, as Cloudflare measures)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if workers < 1 {
		return usageError{"lab: --workers: want at least 1"}
	}
	if engine != engineDirect && engine != engineMemory {
		return usageError{fmt.Sprintf("lab: --engine %q: want %s or %s", engine, engineDirect, engineMemory)}
	}
	r, err := accuracy(ctx, c, engine, workers, newReporter(stderr, o.quiet))
	if err != nil {
		return err
	}
	if !o.quiet {
		fmt.Fprintln(stderr, throughput(r))
	}
	if o.out != "" {
		if err := r.plot(o.out, c.name()); err != nil {
			return err
		}
	}
	return o.emit(stdout, "report.md", r, r.writeMarkdown)
}

// throughput says how fast the replay went (not part of the report: it
// differs from run to run).
func throughput(r accuracyReport) string {
	secs := r.elapsed.Seconds()
	decisions := float64(r.Requests) * nAlgs
	return fmt.Sprintf("lab: replayed %d requests through %d algorithms and the exact log in %.1fs: %.3g requests/s, %.3g algorithm decisions/s (%s engine)",
		r.Requests, nAlgs, secs, float64(r.Requests)/secs, decisions/secs, r.Engine)
}

func runGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := defaultTraceConfig()
	var quiet bool
	fs := newFlagSet("gen", "Write a generated trace to stdout as CSV: timestamp (Unix nanoseconds),key,cost.\n\"lab accuracy --trace FILE\" replays it exactly as the generated trace.", stdout, stderr)
	traceFlags(fs, &c)
	fs.BoolVar(&quiet, "quiet", false, "no progress on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if c.kind == kindFile {
		return usageError{"lab gen: --trace: gen writes generated traces only"}
	}
	src, _, err := c.open()
	if err != nil {
		return err
	}
	_, total := src.progress()
	prog := newReporter(stderr, quiet).start("gen "+c.name(), src.unit(), total)
	defer prog.Finish()
	return writeCSV(ctx, stdout, src, prog)
}

// writeCSV streams src to w as CSV.
func writeCSV(ctx context.Context, w io.Writer, src source, prog *progress) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	buf := make([]event, batchSize)
	var line []byte
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("lab: gen: %w", err)
		}
		n, err := src.next(buf)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		for _, e := range buf[:n] {
			line = fmt.Appendf(line[:0], "%d,%s,%d\n", e.at, src.name(e.key), e.cost)
			if _, err := bw.Write(line); err != nil {
				return fmt.Errorf("lab: gen: %w", err)
			}
		}
		prog.Add(int64(n))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("lab: gen: %w", err)
	}
	return nil
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("lab: json: %w", err)
	}
	return nil
}

// writeFile creates path (and its directory) and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	bw := bufio.NewWriter(f)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("lab: %w", cerr)
	}
	return err
}
