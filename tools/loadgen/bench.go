package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// errNotReady says a bench target is down or does not know the policy.
var errNotReady = errors.New("loadgen: bench: a target is not ready")

// fixedMaxWorkers bounds the clients of a fixed-rate run: vegeta adds one
// when all are waiting for answers, up to this many.
const fixedMaxWorkers = 1000

// clockTicks is the unit of the CPU times in /proc/PID/stat: USER_HZ, which
// Linux exports as 100 per second on every architecture.
const clockTicks = 100

// benchTarget is one server the bench drives: a name for the table, its base
// URL, and the processes whose CPU time is its cost (the service, plus its
// redis-server when it has one).
type benchTarget struct {
	Name string
	URL  string
	PIDs []int
}

// parseBenchTarget reads NAME=URL or NAME=URL@PID[+PID...].
func parseBenchTarget(s string) (benchTarget, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return benchTarget{}, fmt.Errorf("loadgen: --target %q: want NAME=URL[@PID[+PID...]]", s)
	}
	t := benchTarget{Name: name}
	rawURL, pids, hasPIDs := strings.Cut(rest, "@")
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != grpcScheme) || u.Host == "" {
		return benchTarget{}, fmt.Errorf("loadgen: --target %q: %q is not an http(s) URL, nor grpc://HOST:PORT", s, rawURL)
	}
	t.URL = strings.TrimRight(rawURL, "/")
	if hasPIDs {
		for p := range strings.SplitSeq(pids, "+") {
			pid, err := strconv.Atoi(p)
			if err != nil || pid < 1 {
				return benchTarget{}, fmt.Errorf("loadgen: --target %q: process id %q is not a positive integer", s, p)
			}
			t.PIDs = append(t.PIDs, pid)
		}
	}
	return t, nil
}

// benchTargets is the repeatable --target flag of bench.
type benchTargets []benchTarget

func (l *benchTargets) String() string {
	names := make([]string, len(*l))
	for i, t := range *l {
		names[i] = t.Name
	}
	return strings.Join(names, ",")
}

// Set implements flag.Value: it appends one target.
func (l *benchTargets) Set(s string) error {
	t, err := parseBenchTarget(s)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(*l, func(u benchTarget) bool { return u.Name == t.Name }) {
		return fmt.Errorf("loadgen: --target %q: name %s given twice", s, t.Name)
	}
	*l = append(*l, t)
	return nil
}

// benchGoal is what a target should reach against the baseline.
type benchGoal struct {
	Ratio  float64       // least median rate ratio; 0: none
	CPU    time.Duration // most server CPU per request over the baseline's
	HasCPU bool          // whether CPU is a goal
}

// benchGoals is the repeatable --goal flag of bench, by target name.
type benchGoals map[string]benchGoal

func (g benchGoals) String() string {
	var parts []string
	for name, x := range g {
		s := fmt.Sprintf("%s=%g", name, x.Ratio)
		if x.HasCPU {
			s += "/" + x.CPU.String()
		}
		parts = append(parts, s)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// Set implements flag.Value: NAME=RATIO[/CPU], e.g. memory=0.90/5us.
func (g *benchGoals) Set(s string) error {
	name, rest, ok := strings.Cut(s, "=")
	ratio, cpu, hasCPU := strings.Cut(rest, "/")
	var x benchGoal
	var err error
	if ok && name != "" {
		x.Ratio, err = strconv.ParseFloat(ratio, 64)
	}
	if !ok || name == "" || err != nil || x.Ratio < 0 {
		return fmt.Errorf("loadgen: --goal %q: want NAME=RATIO[/CPU], e.g. memory=0.90/5us", s)
	}
	if hasCPU {
		if x.CPU, err = time.ParseDuration(cpu); err != nil {
			return fmt.Errorf("loadgen: --goal %q: %q is not a duration", s, cpu)
		}
		x.HasCPU = true
	}
	if *g == nil {
		*g = benchGoals{}
	}
	(*g)[name] = x
	return nil
}

// benchTargetRoutes is the repeatable --target-route flag of bench: the
// route a target gets instead of --route's, by target name, for a peer
// whose API has another shape (gubernator's GetRateLimits against
// Tollgate's /v1/check), driven with the same keys and connections.
type benchTargetRoutes map[string]string

func (m benchTargetRoutes) String() string {
	var parts []string
	for name, route := range m {
		parts = append(parts, name+"="+route)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// Set implements flag.Value: NAME=ROUTE, ROUTE an HTTP route.
func (m *benchTargetRoutes) Set(s string) error {
	name, route, ok := strings.Cut(s, "=")
	if _, known := lookupRoute(route); !ok || name == "" || !known || route == grpcRoute.Name {
		return fmt.Errorf("loadgen: --target-route %q: want NAME=ROUTE, ROUTE one of %s but grpc", s, routeNames())
	}
	if *m == nil {
		*m = benchTargetRoutes{}
	}
	(*m)[name] = route
	return nil
}

// validRoute says whether name is one of benchRoutes.
func validRoute(name string) bool {
	_, ok := lookupRoute(name)
	return ok
}

// benchOptions are the flags of bench.
type benchOptions struct {
	targets     benchTargets
	baseline    string
	policy      string
	rounds      int
	duration    time.Duration
	connections int
	fixedRate   int
	fixedFor    time.Duration
	keys        int
	timeout     time.Duration
	wait        time.Duration
	warmup      time.Duration
	out         string
	// route is the request shape (benchRoutes); generator drives the
	// closed loop: "vegeta" (in process) or "wrk" (the wrk binary).
	route     string
	generator string
	wrk       string
	// grpcConns are the connections the --connections callers of
	// --generator grpc share.
	grpcConns int
	goals     benchGoals
	p99Goal   float64
	// targetRoutes override route for the targets they name.
	targetRoutes benchTargetRoutes
}

// routeOf returns the route target name is driven with.
func (o *benchOptions) routeOf(name string) benchRoute {
	r, ok := o.targetRoutes[name]
	if !ok {
		r = o.route
	}
	route, _ := lookupRoute(r)
	return route
}

// validate checks the bench flags.
func (o *benchOptions) validate() error {
	checks := []struct {
		flag string
		ok   bool
		want string
	}{
		{"target", len(o.targets) >= 1, "given at least once"},
		{"baseline", o.baseline == "" || slices.ContainsFunc(o.targets, func(t benchTarget) bool { return t.Name == o.baseline }), "the name of a --target"},
		{"policy", o.policy != "", "not empty"},
		{"rounds", o.rounds >= 1 && o.rounds <= 100, "in 1..100"},
		{"duration", o.duration > 0, "positive"},
		{"connections", o.connections >= 1 && o.connections <= 10000, "in 1..10000"},
		{"fixed-rate", o.fixedRate >= 0, "zero (no fixed-rate run) or positive"},
		{"fixed-duration", o.fixedFor > 0, "positive"},
		{"keys", o.keys >= 1, "at least 1"},
		{"timeout", o.timeout > 0, "positive"},
		{"wait", o.wait >= 0, "zero or positive"},
		{"warmup", o.warmup >= 0, "zero or positive"},
		{"route", validRoute(o.route), "one of " + routeNames()},
		{"generator", o.generator == "vegeta" || o.generator == "wrk" || o.generator == "grpc", "vegeta, wrk or grpc"},
		{"route", (o.generator == "grpc") == (o.route == "grpc"), "grpc exactly when --generator is grpc"},
		{"target", o.generator != "grpc" || !slices.ContainsFunc(o.targets, func(t benchTarget) bool { return !strings.HasPrefix(t.URL, grpcScheme+"://") }),
			"grpc://HOST:PORT with --generator grpc"},
		{"fixed-rate", o.generator != "grpc" || o.fixedRate == 0, "0 with --generator grpc (the fixed-rate run is vegeta's, over HTTP)"},
		{"grpc-conns", o.generator != "grpc" || o.grpcConns >= 1 && o.grpcConns <= o.connections, "in 1..--connections"},
		{"p99-goal", o.p99Goal >= 0, "zero (none) or positive"},
		{"target-route", o.generator != "grpc" || len(o.targetRoutes) == 0, "not given with --generator grpc"},
	}
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("loadgen: --%s must be %s", c.flag, c.want)
		}
	}
	for name := range o.targetRoutes {
		if !slices.ContainsFunc(o.targets, func(t benchTarget) bool { return t.Name == name }) {
			return fmt.Errorf("loadgen: --target-route %s: no --target is called %s", name, name)
		}
	}
	return nil
}

// benchRun is one closed-loop measurement of one target.
type benchRun struct {
	OK, Failed   int
	FirstFailure string
	Elapsed      time.Duration
	Lat          Latencies
	// CPU is the CPU time the target's first process (the server) used
	// during the run; -1 when the target names no process or it could not
	// be read. Backend is the same for its other processes (say, its
	// redis-server); -1 when it names none.
	CPU, Backend time.Duration
}

// Rate is the answered requests per second.
func (r benchRun) Rate() float64 { return float64(r.OK) / max(r.Elapsed.Seconds(), 1e-9) }

// CPUPerRequest is the server's CPU time per request, or -1 when unknown.
func (r benchRun) CPUPerRequest() time.Duration { return r.perRequest(r.CPU) }

// BackendPerRequest is the backend's CPU time per request, or -1 when
// unknown.
func (r benchRun) BackendPerRequest() time.Duration { return r.perRequest(r.Backend) }

func (r benchRun) perRequest(d time.Duration) time.Duration {
	if d < 0 || r.OK+r.Failed == 0 {
		return -1
	}
	return d / time.Duration(r.OK+r.Failed)
}

// benchRow gathers one target's runs.
type benchRow struct {
	Target benchTarget
	Runs   []benchRun // one per round, in round order
	// Ratios are the target's rate over the baseline's, round by round.
	Ratios []float64
	Fixed  *benchRun // the fixed-rate run, when there was one
	Sent   float64   // the fixed-rate run's achieved send rate, per second
}

// benchResult is the whole comparison.
type benchResult struct {
	opts benchOptions
	rows []benchRow
}

// runBench measures every target: a warm-up (--warmup each), then --rounds rounds in which
// each target in turn gets --connections closed-loop clients for
// --duration (the order rotates by one every round, so that no target
// always follows the same one), then one fixed-rate run per target.
func runBench(ctx context.Context, o benchOptions, stderr io.Writer) (benchResult, error) {
	res := benchResult{opts: o, rows: make([]benchRow, len(o.targets))}
	routes := make([]benchRoute, len(o.targets))
	clients := make([]*http.Client, len(o.targets))
	prefix := fmt.Sprintf("bench%08x", rand.Uint32())
	for i, t := range o.targets {
		res.rows[i].Target = t
		routes[i] = o.routeOf(t.Name)
		clients[i] = newClient(max(o.connections, fixedMaxWorkers), o.timeout)
		// Ready means answering the route with 200 (the peer has no /healthz).
		if err := poll(ctx, t.URL, o.wait, func() error {
			if o.generator == "grpc" {
				_, closeAll, err := grpcConns(ctx, grpcAddr(t), o.policy, prefix+"-probe", 1, o.timeout)
				if err == nil {
					closeAll()
				}
				return err
			}
			return routes[i].probe(ctx, clients[i], t.URL, o.policy, prefix+"-probe")
		}); err != nil {
			return res, fmt.Errorf("%w: target %s: %w", errNotReady, t.Name, err)
		}
	}
	closed := func(i int, phase string, du time.Duration) (benchRun, error) {
		t, route := o.targets[i], routes[i]
		run := prefix + "-" + t.Name + "-" + phase
		if o.generator == "grpc" {
			return measure(t, func() (benchRun, error) {
				return runGRPC(ctx, grpcAddr(t), o.policy, run, o.keys, o.connections, o.grpcConns, du, o.timeout)
			})
		}
		if o.generator == "wrk" {
			return measure(t, func() (benchRun, error) {
				return runWrk(ctx, o.wrk, t.URL, route.wrkScript(o.policy, run, o.keys), o.connections, du, o.timeout)
			})
		}
		return measureAttack(ctx, t, clients[i], attackSpec{
			Name:     "bench-" + t.Name,
			Targeter: route.targeter(t.URL, o.policy, run, o.keys),
			Pacer:    vegeta.ConstantPacer{}, // no pacing: each client sends as soon as answered
			Duration: du,
			Workers:  uint64(o.connections),
			Max:      uint64(o.connections),
		})
	}
	if o.warmup > 0 {
		fmt.Fprintf(stderr, "bench: warm-up, %s per target\n", o.warmup)
		for i := range o.targets {
			if _, err := closed(i, "warmup", o.warmup); err != nil {
				return res, err
			}
		}
	}
	for round := range o.rounds {
		for k := range o.targets {
			i := (k + round) % len(o.targets)
			r, err := closed(i, "r"+strconv.Itoa(round), o.duration)
			if err != nil {
				return res, err
			}
			res.rows[i].Runs = append(res.rows[i].Runs, r)
			fmt.Fprintf(stderr, "bench: %s %s round %d/%d %-10s %8.0f req/s  p99 %s  cpu/req %s\n", o.generator, routes[i].Path,
				round+1, o.rounds, o.targets[i].Name, r.Rate(), ms(r.Lat.P99), micros(r.CPUPerRequest()))
		}
	}
	if b := res.baselineIndex(); b >= 0 {
		for i := range res.rows {
			for round, r := range res.rows[i].Runs {
				res.rows[i].Ratios = append(res.rows[i].Ratios, r.Rate()/max(res.rows[b].Runs[round].Rate(), 1e-9))
			}
		}
	}
	if o.fixedRate > 0 {
		for i, t := range o.targets {
			r, err := measureAttack(ctx, t, clients[i], attackSpec{
				Name:     "bench-fixed-" + t.Name,
				Targeter: routes[i].targeter(t.URL, o.policy, prefix+"-"+t.Name+"-fixed", o.keys),
				Pacer:    vegeta.ConstantPacer{Freq: o.fixedRate, Per: time.Second},
				Duration: o.fixedFor,
				Workers:  uint64(o.connections),
				Max:      uint64(max(o.connections, fixedMaxWorkers)),
			})
			if err != nil {
				return res, err
			}
			res.rows[i].Fixed = &r
			res.rows[i].Sent = float64(r.OK+r.Failed) / max(o.fixedFor.Seconds(), 1e-9)
			fmt.Fprintf(stderr, "bench: %d/s %-10s p50 %s  p99 %s  max %s\n", o.fixedRate, t.Name, ms(r.Lat.P50), ms(r.Lat.P99), ms(r.Lat.Max))
		}
	}
	return res, nil
}

// grpcAddr is the host:port of a grpc:// target.
func grpcAddr(t benchTarget) string { return strings.TrimPrefix(t.URL, grpcScheme+"://") }

// measure runs one measurement of t and reads the CPU time t's processes
// used meanwhile: the first (the server) into CPU, the others into Backend.
func measure(t benchTarget, run func() (benchRun, error)) (benchRun, error) {
	server, backend := t.PIDs[:min(len(t.PIDs), 1)], t.PIDs[min(len(t.PIDs), 1):]
	s0, sErr := cpuTime(server)
	b0, bErr := cpuTime(backend)
	r, err := run()
	if err != nil {
		return r, err
	}
	s1, err := cpuTime(server)
	r.CPU = -1
	if sErr == nil && err == nil && len(server) > 0 {
		r.CPU = s1 - s0
	}
	b1, err := cpuTime(backend)
	r.Backend = -1
	if bErr == nil && err == nil && len(backend) > 0 {
		r.Backend = b1 - b0
	}
	return r, nil
}

// measureAttack runs one vegeta attack on t. Every answer but 200 counts as
// failed.
func measureAttack(ctx context.Context, t benchTarget, client *http.Client, spec attackSpec) (benchRun, error) {
	return measure(t, func() (benchRun, error) {
		began := time.Now()
		rs := attack(ctx, client, spec, nil)
		run := benchRun{Elapsed: time.Since(began)}
		if err := ctx.Err(); err != nil {
			return run, fmt.Errorf("loadgen: bench: %w", err)
		}
		lat := make([]time.Duration, 0, len(rs))
		for i := range rs {
			r := &rs[i]
			if r.Code == http.StatusOK {
				run.OK++
				lat = append(lat, r.Latency)
				continue
			}
			run.Failed++
			if run.FirstFailure == "" {
				run.FirstFailure = r.Error
				if run.FirstFailure == "" {
					run.FirstFailure = fmt.Sprintf("status %d", r.Code)
				}
			}
		}
		run.Lat = summarize(lat)
		return run, nil
	})
}

// cpuTime returns the user plus system CPU time the processes have used,
// from /proc/PID/stat.
func cpuTime(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, fmt.Errorf("loadgen: cpu time: %w", err)
		}
		d, err := parseStatCPU(string(b))
		if err != nil {
			return 0, fmt.Errorf("loadgen: cpu time of %d: %w", pid, err)
		}
		total += d
	}
	return total, nil
}

// parseStatCPU reads utime and stime (fields 14 and 15, in clock ticks) of
// a /proc/PID/stat line. The command name (field 2) is skipped up to its
// last ')', since it may hold spaces and parentheses.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("cpu field %q is not a tick count", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// baselineIndex returns the row of the baseline target, or -1.
func (b benchResult) baselineIndex() int {
	return slices.IndexFunc(b.rows, func(r benchRow) bool { return r.Target.Name == b.opts.baseline })
}

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none; xs is not modified.
func median[T int64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// column returns f of every run of r.
func column[T int64 | float64 | time.Duration](r benchRow, f func(benchRun) T) []T {
	out := make([]T, len(r.Runs))
	for i, run := range r.Runs {
		out[i] = f(run)
	}
	return out
}

// micros formats a CPU time per request in microseconds, "n/a" when unknown.
func micros(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}

// markdown writes the tables.
func (b benchResult) markdown(w io.Writer) {
	o := b.opts
	route, _ := lookupRoute(o.route)
	base := b.baselineIndex()
	fmt.Fprintf(w, "### Closed loop (%s): %s %s, %d connections, %d rounds × %s per target, policy %q over %d keys\n\n",
		o.generator, route.Method, route.Path, o.connections, o.rounds, o.duration, o.policy, o.keys)
	for _, t := range o.targets {
		if tr := o.routeOf(t.Name); tr.Name != route.Name {
			fmt.Fprintf(w, "Target %s is sent %s %s instead, with the same keys.\n\n", t.Name, tr.Method, tr.Path)
		}
	}
	fmt.Fprintf(w, "Medians over the rounds. The ratio is the median of the per-round ratios of the target's rate to the "+
		"baseline's (%q) rate in the same round. Server CPU is the user+system time of the target's first process "+
		"(/proc/PID/stat) per request, then over the baseline's; backend CPU is its other processes' (say, redis-server).\n\n", o.baseline)
	fmt.Fprintf(w, "| target | req/s | ratio | goal | p50 | p99 | server CPU/req | over baseline | goal | backend CPU/req | failed |\n"+
		"|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|\n")
	var baseCPU time.Duration = -1
	if base >= 0 {
		baseCPU = median(column(b.rows[base], benchRun.CPUPerRequest))
	}
	for _, r := range b.rows {
		goal := o.goals[r.Target.Name]
		ratio, ratioGoal := "n/a", ""
		if len(r.Ratios) > 0 {
			m := median(r.Ratios)
			ratio = fmt.Sprintf("%.2f", m)
			if goal.Ratio > 0 {
				ratioGoal = goalCell(fmt.Sprintf("≥ %.2f", goal.Ratio), m >= goal.Ratio, fmt.Sprintf("short by %.2f", goal.Ratio-m))
			}
		}
		cpu := median(column(r, benchRun.CPUPerRequest))
		over, cpuGoal := "n/a", ""
		if cpu >= 0 && baseCPU >= 0 {
			d := cpu - baseCPU
			over = fmt.Sprintf("%+.1fµs", float64(d)/float64(time.Microsecond))
			if goal.HasCPU {
				cpuGoal = goalCell(fmt.Sprintf("≤ %+.0fµs", float64(goal.CPU)/float64(time.Microsecond)), d <= goal.CPU,
					fmt.Sprintf("over by %.1fµs", float64(d-goal.CPU)/float64(time.Microsecond)))
			}
		}
		failed := 0
		for _, run := range r.Runs {
			failed += run.Failed
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", r.Target.Name, median(column(r, benchRun.Rate)),
			ratio, ratioGoal,
			ms(median(column(r, func(x benchRun) time.Duration { return x.Lat.P50 }))),
			ms(median(column(r, func(x benchRun) time.Duration { return x.Lat.P99 }))), micros(cpu), over, cpuGoal,
			micros(median(column(r, benchRun.BackendPerRequest))), failed)
	}
	fmt.Fprintln(w)
	b.failures(w, func(r benchRow) []benchRun { return r.Runs })
	if o.fixedRate == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Fixed rate (vegeta): %s %s at %d req/s for %s per target\n\n", route.Method, route.Path, o.fixedRate, o.fixedFor)
	fmt.Fprintf(w, "| target | sent/s | p50 | p90 | p99 | p99 / baseline's | goal | max | server CPU/req | backend CPU/req | failed |\n"+
		"|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	var baseP99 time.Duration
	if base >= 0 && b.rows[base].Fixed != nil {
		baseP99 = b.rows[base].Fixed.Lat.P99
	}
	for _, r := range b.rows {
		f := r.Fixed
		if f == nil {
			continue
		}
		ratio, goal := "n/a", ""
		if baseP99 > 0 {
			x := float64(f.Lat.P99) / float64(baseP99)
			ratio = fmt.Sprintf("%.2f", x)
			if o.p99Goal > 0 && r.Target.Name != o.baseline {
				goal = goalCell(fmt.Sprintf("≤ %.2f", o.p99Goal), x <= o.p99Goal, fmt.Sprintf("over by %.2f", x-o.p99Goal))
			}
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", r.Target.Name, r.Sent,
			ms(f.Lat.P50), ms(f.Lat.P90), ms(f.Lat.P99), ratio, goal, ms(f.Lat.Max),
			micros(f.CPUPerRequest()), micros(f.BackendPerRequest()), f.Failed)
	}
	fmt.Fprintln(w)
	b.failures(w, func(r benchRow) []benchRun {
		if r.Fixed == nil {
			return nil
		}
		return []benchRun{*r.Fixed}
	})
}

// goalCell says whether a goal is met: "GOAL: met" or "GOAL: **GAP**".
func goalCell(goal string, met bool, gap string) string {
	if met {
		return goal + ": met"
	}
	return goal + ": **" + gap + "**"
}

// failures lists, per target, the first failure among the runs of each row
// that runs picks.
func (b benchResult) failures(w io.Writer, runs func(benchRow) []benchRun) {
	for _, r := range b.rows {
		for _, run := range runs(r) {
			if run.FirstFailure != "" {
				fmt.Fprintf(w, "- %s: the first failure: `%s`\n", r.Target.Name, run.FirstFailure)
				break
			}
		}
	}
}

// runBenchCommand runs bench and prints the tables on stdout (and into
// --out when set). It returns the exit code.
func runBenchCommand(ctx context.Context, o benchOptions, stdout, stderr io.Writer) int {
	res, err := runBench(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		if errors.Is(err, errNotReady) {
			return exitUsage
		}
		return exitFail
	}
	var sb strings.Builder
	res.markdown(&sb)
	fmt.Fprint(stdout, sb.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(sb.String()), 0o644); err != nil {
			fmt.Fprintf(stderr, "loadgen: bench: %v\n", err)
			return exitFail
		}
	}
	return exitOK
}
