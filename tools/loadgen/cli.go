package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // a run failed part-way
	exitUsage = 2 // bad flags, target down, or a policy the target does not have
)

// options are the flags of one run.
type options struct {
	target, out            string
	seed                   uint64
	limit                  int64
	window                 time.Duration
	workers, maxWorkers    int
	timeout, wait          time.Duration
	policies, racePolicies list
	cycles                 int
	n, rounds              int
	rate, maxRate, keys    int
	duration, step, maxP99 time.Duration
	storeLabel, addr       string
	quiet, fields          bool // fields: the baseline sends the service's header fields
	bench                  benchOptions
}

// list is a comma-separated flag value.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *list) Set(s string) error {
	var out list
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	if len(out) == 0 {
		return errors.New("empty list")
	}
	*l = out
	return nil
}

// flagGroup registers related flags.
type flagGroup func(fs *flag.FlagSet, o *options)

func commonFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.target, "target", "http://127.0.0.1:8080", "base `URL` of the running Tollgate service")
	fs.DurationVar(&o.wait, "wait", 0, "wait up to this long for the target's /healthz to answer 200 (0: ask once)")
	fs.StringVar(&o.out, "out", "loadgen-out", "output `DIR` for report.md and the PNG plots (created)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the random key prefix, printed at start (0: from the clock); reuse a seed only against a fresh store")
	fs.Int64Var(&o.limit, "limit", 20, "the policies' limit, checked against the service's answers")
	fs.DurationVar(&o.window, "window", 2*time.Second, "the policies' window (whole seconds), checked against the RateLimit-Policy field when present")
	fs.IntVar(&o.workers, "workers", 32, "vegeta workers started per attack (race uses --n)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "timeout of one request")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress on stderr (by default a bar on a terminal, a plain line every 10s in a log)")
}

func policyFlags(fs *flag.FlagSet, o *options) {
	o.policies = list{"fixed_window", "sliding_log", "sliding_window", "token_bucket"}
	fs.Var(&o.policies, "policies", "comma-separated `policies` for boundary and throughput (one per algorithm, same limit and window)")
}

func boundaryFlags(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.cycles, "cycles", 3, "boundary: bursts to send, one every two windows")
}

func raceFlags(fs *flag.FlagSet, o *options) {
	o.racePolicies = list{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "sliding_log_unsafe"}
	fs.Var(&o.racePolicies, "race-policies", "race: comma-separated `policies` to race")
	fs.IntVar(&o.n, "n", 500, "race: simultaneous requests per round")
	fs.IntVar(&o.rounds, "rounds", 5, "race: rounds per policy, each on a fresh key")
}

func throughputFlags(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.rate, "rate", 1000, "throughput: requests per second of the latency measurement")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "throughput: length of the latency measurement per policy")
	fs.DurationVar(&o.step, "step", time.Second, "throughput: length of one ramp step")
	fs.IntVar(&o.maxRate, "max-rate", 16000, "throughput: highest ramp rate, requests per second")
	fs.DurationVar(&o.maxP99, "max-p99", 50*time.Millisecond, "throughput: a ramp step with a higher p99 latency does not hold")
	fs.IntVar(&o.keys, "keys", 10000, "throughput: keys each step rotates over")
	fs.IntVar(&o.maxWorkers, "max-workers", 1000, "throughput: most vegeta workers per attack")
	fs.StringVar(&o.storeLabel, "store-label", "unknown", "throughput: the store the target runs on (memory, sqlite, redis), for the report")
}

func benchFlags(fs *flag.FlagSet, o *options) {
	b := &o.bench
	fs.Var(&b.targets, "target", "a server to drive, `NAME=URL[@PID[+PID...]]`; repeat for each (the PIDs' CPU time is the server's cost)")
	fs.StringVar(&b.baseline, "baseline", "baseline", "the --target NAME the others' rates are compared with (empty: no ratio)")
	fs.StringVar(&b.policy, "policy", "bench", "the policy every /v1/check asks for; give it a limit no run reaches")
	fs.IntVar(&b.rounds, "rounds", 3, "rounds; each drives every target once, the order rotating")
	fs.DurationVar(&b.duration, "duration", 5*time.Second, "length of one target's closed-loop run")
	fs.IntVar(&b.connections, "connections", 64, "closed-loop clients (keep-alive connections), each sending as soon as answered")
	fs.IntVar(&b.fixedRate, "fixed-rate", 5000, "requests per second of the latency run after the rounds (0: none)")
	fs.DurationVar(&b.fixedFor, "fixed-duration", 5*time.Second, "length of one target's fixed-rate run")
	fs.IntVar(&b.keys, "keys", 100000, "keys each run spreads over (vegeta in turn, wrk at random), fresh ones per run")
	fs.DurationVar(&b.timeout, "timeout", 5*time.Second, "timeout of one request")
	fs.DurationVar(&b.wait, "wait", 0, "wait up to this long for each target to answer the route with 200 (0: ask once)")
	fs.DurationVar(&b.warmup, "warmup", time.Second, "closed-loop run per target before the rounds, not counted (0: none)")
	fs.StringVar(&b.out, "out", "", "also write the tables to this `FILE`")
	fs.StringVar(&b.route, "route", "check", "the requests: check (POST /v1/check), ping (GET /ping, X-Client-Key), rate-check "+
		"(POST /rate/check, X-User-Id), json (POST /json, Envoy's form; --policy is the domain, the descriptor key \""+envoyDescriptorKey+"\"), "+
		"gubernator (POST /v1/GetRateLimits, gubernator's HTTP API; see --target-route), "+
		"grpc (the same as json over Envoy's gRPC ShouldRateLimit; with --generator grpc and grpc://HOST:PORT targets)")
	fs.Var(&b.targetRoutes, "target-route", "`NAME=ROUTE`: target NAME gets ROUTE's requests instead of --route's, with the same keys "+
		"(e.g. gubernator=gubernator: POST /v1/GetRateLimits, one request of --policy, a limit no run reaches, 1 s); repeat for each")
	fs.StringVar(&b.generator, "generator", "vegeta", "closed-loop load generator: vegeta (in process), wrk (the wrk binary, one thread) "+
		"or grpc (in process: --connections callers over --grpc-conns gRPC connections)")
	fs.IntVar(&b.grpcConns, "grpc-conns", 4, "with --generator grpc: the HTTP/2 connections the callers share, as Envoy multiplexes its calls")
	fs.StringVar(&b.wrk, "wrk", "wrk", "the wrk binary, for --generator wrk")
	fs.Var(&b.goals, "goal", "`NAME=RATIO[/CPU]`: target NAME should reach RATIO of the baseline's rate and at most CPU more "+
		"server CPU per request (e.g. memory=0.90/5us); repeat for each")
	fs.Float64Var(&b.p99Goal, "p99-goal", 0, "at --fixed-rate, each target's p99 should be at most this many times the baseline's (0: none)")
}

func baselineFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8081", "address to listen on")
	fs.BoolVar(&o.fields, "fields", false, "also send, with each allowed decision, the header fields the service sends with one "+
		"(X-Request-Id, RateLimit-Policy, RateLimit, X-RateLimit-*), constant but for the request id: what they cost alone")
}

// section is one scenario's part of the report.
type section interface {
	markdown(w io.Writer)
	summary(w io.Writer)
}

// scenario runs against the target.
type scenario func(ctx context.Context, e *env) (section, error)

func boundaryScenario(ctx context.Context, e *env) (section, error)   { return runBoundary(ctx, e) }
func raceScenario(ctx context.Context, e *env) (section, error)       { return runRace(ctx, e) }
func throughputScenario(ctx context.Context, e *env) (section, error) { return runThroughput(ctx, e) }

// command is a subcommand.
type command struct {
	name, summary, detail string
	flags                 []flagGroup
	scenarios             []scenario
	// plans is true when the scenarios plan with --limit and --window, which
	// the target's policies must then have.
	plans bool
}

var commands = []command{
	{
		name:    "boundary",
		summary: "the fixed window's 2× burst at a window boundary, against the other algorithms",
		detail: "Every policy gets its own key and the same traffic: quiet, then a burst at 8×limit/window from a quarter\n" +
			"window before to a quarter window after every other Unix-aligned window boundary. Plots admitted\n" +
			"requests per 100ms with the boundaries marked, and reports the most admitted in any window-length span\n" +
			"as a multiple of the limit: ≈2× for fixed_window, ≤1× for sliding_log.",
		flags:     []flagGroup{commonFlags, policyFlags, boundaryFlags},
		scenarios: []scenario{boundaryScenario},
		plans:     true,
	},
	{
		name:    "race",
		summary: "N simultaneous requests on a fresh key, R rounds, per algorithm",
		detail: "Fires --n requests at once on one fresh key (vegeta attacker with --n workers parked on its tick\n" +
			"channel, --n warm keep-alive connections), --rounds times per policy, and counts the admitted ones\n" +
			"against the limit. An atomic algorithm admits exactly the limit; sliding_log_unsafe shows the race.",
		flags:     []flagGroup{commonFlags, raceFlags},
		scenarios: []scenario{raceScenario},
		plans:     true,
	},
	{
		name:    "throughput",
		summary: "highest sustained rate and latency percentiles per algorithm",
		detail: "Ramps constant-rate steps (doubling from 250/s, then bisecting) until a step loses answers, falls\n" +
			"behind or exceeds --max-p99, then measures p50/p90/p99/max at --rate for --duration. Label the\n" +
			"target's store with --store-label.",
		flags:     []flagGroup{commonFlags, policyFlags, throughputFlags},
		scenarios: []scenario{throughputScenario},
	},
	{
		name:      "all",
		summary:   "boundary, race and throughput into one report",
		detail:    "Runs boundary, race and throughput in that order and writes one report.md linking the plots.",
		flags:     []flagGroup{commonFlags, policyFlags, boundaryFlags, raceFlags, throughputFlags},
		scenarios: []scenario{boundaryScenario, raceScenario, throughputScenario},
		plans:     true,
	},
	{
		name:    "baseline",
		summary: "serve a limiter-free Gin handler: the HTTP ceiling",
		detail: "Serves POST /v1/check, GET /ping and POST /rate/check (each decodes the body or reads the identity\n" +
			"header, and answers a constant allowed decision) and GET /healthz\n" +
			"until SIGINT or SIGTERM. Point throughput at it to measure the ceiling of HTTP + JSON on this machine.",
		flags: []flagGroup{baselineFlags},
	},
	{
		name:    "bench",
		summary: "the service against the baseline: closed-loop req/s, latency, server CPU per request",
		detail: "Drives every --target's --route (POST /v1/check by default; --policy, --keys keys) with --connections\n" +
			"closed-loop clients (vegeta, or wrk with --generator wrk) for --duration, --rounds times, the order\n" +
			"rotating each round, after a --warmup run each; then each at --fixed-rate for --fixed-duration\n" +
			"(vegeta). Prints Markdown tables: median req/s, the median per-round ratio to --baseline, p50/p99,\n" +
			"the CPU time per request of the target's server and of its backend processes, and the --goal cells.",
		flags: []flagGroup{benchFlags},
	},
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "loadgen drives a running Tollgate service with vegeta's library and writes a Markdown\n"+
		"report with PNG plots into --out.\n\nUsage:\n  loadgen <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'loadgen <command> --help' for a command's flags. Exit status: 0 done, 1 a run failed,\n"+
		"2 bad flags, target down or a policy the target does not have.\n")
}

// run is the whole program: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	if name := args[0]; name == "-h" || name == "--help" || name == "-help" || name == "help" {
		usage(stdout)
		return exitOK
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		fmt.Fprintf(stderr, "loadgen: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	cmd := commands[i]
	o, err := parse(cmd, args[1:], stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return exitUsage
	}
	if cmd.name == "bench" {
		return runBenchCommand(ctx, o.bench, stdout, stderr)
	}
	if cmd.name == "baseline" {
		if err := runBaseline(ctx, o.addr, o.fields, stdout); err != nil {
			fmt.Fprintln(stderr, err)
			return exitFail
		}
		return exitOK
	}
	return report(ctx, cmd, o, args, stdout, stderr)
}

// parse reads and validates a command's flags; problems are printed on
// stderr. It returns flag.ErrHelp when help was asked for.
func parse(cmd command, args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("loadgen "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	for _, g := range cmd.flags {
		g(fs, &o)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: loadgen %s [flags]\n\n%s\n\nFlags:\n", cmd.name, cmd.detail)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("loadgen %s: unexpected arguments %q", cmd.name, fs.Args())
		fmt.Fprintln(stderr, err)
		return o, err
	}
	var err error
	switch cmd.name {
	case "baseline":
	case "bench":
		err = o.bench.validate()
	default:
		err = o.validate(fs)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return o, err
	}
	return o, nil
}

// validate checks the flags a command registered.
func (o *options) validate(fs *flag.FlagSet) error {
	has := func(name string) bool { return fs.Lookup(name) != nil }
	u, err := url.Parse(o.target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("loadgen: --target %q is not an http(s) URL", o.target)
	}
	o.target = strings.TrimRight(o.target, "/")
	checks := []struct {
		flag string
		ok   bool
		want string
	}{
		{"limit", o.limit >= 1 && o.limit <= 10000, "in 1..10000"},
		{"window", o.window >= time.Second && o.window%time.Second == 0, "whole seconds, at least 1s"},
		{"workers", o.workers >= 1, "at least 1"},
		{"timeout", o.timeout > 0, "positive"},
		{"wait", o.wait >= 0, "zero or positive"},
		{"cycles", !has("cycles") || (o.cycles >= 1 && o.cycles <= 50), "in 1..50"},
		{"n", !has("n") || (o.n >= 1 && o.n <= 20000), "in 1..20000"},
		{"rounds", !has("rounds") || (o.rounds >= 1 && o.rounds <= 100), "in 1..100"},
		{"rate", !has("rate") || o.rate >= 1, "at least 1"},
		{"duration", !has("duration") || o.duration > 0, "positive"},
		{"step", !has("step") || o.step > 0, "positive"},
		{"max-rate", !has("max-rate") || o.maxRate >= rampStart, fmt.Sprintf("at least %d", rampStart)},
		{"max-p99", !has("max-p99") || o.maxP99 > 0, "positive"},
		{"keys", !has("keys") || o.keys >= 1, "at least 1"},
		{"max-workers", !has("max-workers") || o.maxWorkers >= o.workers, "at least --workers"},
	}
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("loadgen: --%s must be %s", c.flag, c.want)
		}
	}
	return nil
}

// env is what the scenarios of one run share.
type env struct {
	opts     options
	client   *http.Client
	stderr   io.Writer
	progress progressMode
	prefix   string
}

// newEnv prepares a run: the random seed (from the clock when o.seed is 0), the
// key prefix drawn from it, and one client for every attack.
func newEnv(o options, stderr io.Writer) *env {
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	return &env{
		opts:     o,
		client:   newClient(max(o.n, o.maxWorkers, o.workers), o.timeout),
		stderr:   stderr,
		progress: progressModeOf(stderr, o.quiet),
		prefix:   fmt.Sprintf("lg%08x", rand.New(rand.NewPCG(o.seed, 0)).Uint32()),
	}
}

// key names a key of this run: the random prefix, then parts.
func (e *env) key(parts ...string) string {
	return e.prefix + "-" + strings.Join(parts, "-")
}

// report checks the target, runs the command's scenarios and writes
// report.md.
func report(ctx context.Context, cmd command, o options, args []string, stdout, stderr io.Writer) int {
	e := newEnv(o, stderr)
	o = e.opts
	fmt.Fprintf(stdout, "loadgen %s: target %s, seed %d (key prefix %s)\n", cmd.name, o.target, o.seed, e.prefix)
	if err := waitHealthy(ctx, e.client, o.target, o.wait); err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	limit := o.limit
	if !cmd.plans {
		limit = 0 // throughput works with any limit, also against the baseline
	}
	for _, p := range union(o.policies, o.racePolicies) {
		if err := probePolicy(ctx, e.client, o.target, p, e.key("probe", p), limit, o.window); err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitUsage
	}
	var sections []section
	for _, sc := range cmd.scenarios {
		s, err := sc(ctx, e)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitFail
		}
		sections = append(sections, s)
	}
	path := filepath.Join(o.out, "report.md")
	if err := writeReport(path, e, strings.Join(append([]string{"loadgen"}, args...), " "), sections); err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	for _, s := range sections {
		s.summary(stdout)
	}
	fmt.Fprintf(stdout, "report: %s\n", path)
	return exitOK
}

// union returns the names in a then those of b not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// writeReport writes the Markdown report.
func writeReport(path string, e *env, cmdline string, sections []section) error {
	var f bytes.Buffer
	fmt.Fprintf(&f, "# Tollgate load report\n\n")
	fmt.Fprintf(&f, "- target: %s\n- date: %s\n- seed: %d (key prefix `%s`)\n- policies: limit %d per %s\n- command: `%s`\n\n",
		e.opts.target, time.Now().UTC().Format(time.RFC3339), e.opts.seed, e.prefix, e.opts.limit, e.opts.window, cmdline)
	for _, s := range sections {
		s.markdown(&f)
	}
	if err := os.WriteFile(path, f.Bytes(), 0o644); err != nil {
		return fmt.Errorf("loadgen: report: %w", err)
	}
	return nil
}
