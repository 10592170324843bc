package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Trace kinds.
const (
	kindSteady     = "steady"
	kindBoundary   = "boundary"
	kindPopulation = "population"
	kindFile       = "file"
)

// traceConfig says which trace to replay and with what policy.
type traceConfig struct {
	kind       string
	file       string
	format     string
	seed       uint64
	limit      int64
	window     time.Duration
	maxKeys    int    // distinct sources a replay may hold
	truth      string // truthAdmitted or truthAttempts
	steady     steadyParams
	boundary   boundaryParams
	population populationParams
}

// defaultMaxKeys bounds the distinct sources of a replay by default: a
// replay keeps every source's state to its end, about 1.2 KB each, so a
// million is a little over a gigabyte. The population trace has 250,000.
const defaultMaxKeys = 1_000_000

// defaultTraceConfig is what `lab accuracy` replays without flags, and the
// traces of `lab all`.
func defaultTraceConfig() traceConfig {
	return traceConfig{
		kind:       kindSteady,
		format:     formatAuto,
		seed:       1,
		limit:      100,
		window:     time.Minute,
		maxKeys:    defaultMaxKeys,
		truth:      truthAdmitted,
		steady:     steadyParams{Sources: 1000, Windows: 30, Low: 0.5, High: 1.5},
		boundary:   boundaryParams{Sources: 500, Windows: 30, Every: 3, Burst: 1, Background: 0.1, MaxSpan: 0.1},
		population: populationParams{Sources: 250_000, Requests: 100_000_000, S: 1.1, AtLimit: 250},
	}
}

// open returns the trace's source, and a function that releases it.
func (c traceConfig) open() (source, func() error, error) {
	none := func() error { return nil }
	switch c.kind {
	case kindSteady:
		return newSteadySource(c.seed, c.steady, c.limit, c.window), none, nil
	case kindBoundary:
		return newBoundarySource(c.seed, c.boundary, c.limit, c.window), none, nil
	case kindPopulation:
		return newPopulationSource(c.seed, c.population, c.limit, c.window), none, nil
	case kindFile:
		f, err := os.Open(c.file)
		if err != nil {
			return nil, none, fmt.Errorf("lab: trace: %w", err)
		}
		var size int64
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		src, err := newFileSource(f, size, c.format, c.limit, c.maxKeys)
		if err != nil {
			f.Close()
			return nil, none, err
		}
		return src, f.Close, nil
	}
	return nil, none, fmt.Errorf("lab: trace kind %q: want steady, boundary or population, or --trace FILE", c.kind)
}

// describe returns the trace's description for the report.
func (c traceConfig) describe() string {
	switch c.kind {
	case kindSteady:
		return c.steady.describe()
	case kindBoundary:
		return c.boundary.describe()
	case kindPopulation:
		return c.population.describe(c.limit, c.window)
	}
	return "the file " + filepath.Base(c.file)
}

// name is the trace's short name, for file names and headings.
func (c traceConfig) name() string {
	name := c.kind
	if c.kind == kindFile {
		name = strings.TrimSuffix(filepath.Base(c.file), filepath.Ext(c.file))
	}
	if c.truth == truthAttempts {
		name += "-attempts"
	}
	return name
}

// accuracyReport is the result of `lab accuracy`, as printed with --json.
type accuracyReport struct {
	Command        string     `json:"command"`
	Trace          traceInfo  `json:"trace"`
	Policy         policyInfo `json:"policy"`
	Truth          string     `json:"truth"`
	Engine         string     `json:"engine"`
	Requests       int64      `json:"requests"`
	Sources        int64      `json:"sources"`
	LimitedSources int64      `json:"limited_sources"`
	// LimitedRequests are the requests of the limited sources.
	LimitedRequests int64         `json:"limited_sources_requests"`
	ExactAdmitted   int64         `json:"exact_admitted"`
	WorstSource     string        `json:"worst_source,omitempty"`
	WorstFalses     int64         `json:"worst_source_false_decisions"`
	Algorithms      []algAccuracy `json:"algorithms"`
	Notes           []string      `json:"notes,omitempty"`
	Plots           []string      `json:"plots,omitempty"`
	// Not in the JSON: wall-clock figures differ from run to run, and the
	// figures above must not.
	worst   *series
	elapsed time.Duration
}

type traceInfo struct {
	Kind        string  `json:"kind"`
	Seed        uint64  `json:"seed,omitempty"`
	File        string  `json:"file,omitempty"`
	Description string  `json:"description"`
	Start       string  `json:"start"`
	End         string  `json:"end"`
	Seconds     float64 `json:"duration_seconds"`
}

type policyInfo struct {
	Limit         int64   `json:"limit"`
	WindowSeconds float64 `json:"window_seconds"`
}

type algAccuracy struct {
	Algorithm         string  `json:"algorithm"`
	Requests          int64   `json:"requests"`
	Admitted          int64   `json:"admitted"`
	FalseAllows       int64   `json:"false_allows"`
	FalseRefusals     int64   `json:"false_refusals"`
	FalseAllowShare   float64 `json:"false_allow_share"`
	FalseRefusalShare float64 `json:"false_refusal_share"`
	ErrorShare        float64 `json:"error_share"`
	WorstOvershoot    float64 `json:"worst_overshoot"`
	WorstOvershootSrc string  `json:"worst_overshoot_source,omitempty"`
	// RateMAD is the mean, over the sources the exact log refused at least
	// once, of |units admitted − units the exact log admitted|, as a rate in
	// units per window.
	RateMAD float64 `json:"rate_mad_per_window"`
	// Attempts holds the figures only the attempts truth has.
	Attempts *attemptsFigures `json:"attempts_truth,omitempty"`
}

// attemptsFigures are Cloudflare's measures: sources over the limit (their
// attempts in some window exceeded it) that the algorithm never refused,
// with the peak of the worst of them ÷ the limit; sources refused that were
// never over; and the mean, over requests, of |the count the algorithm's
// decision reports − the attempts in the last window| ÷ those attempts.
type attemptsFigures struct {
	OverNeverRefused     int64   `json:"over_never_refused_sources"`
	OverNeverRefusedPeak float64 `json:"over_never_refused_peak"`
	RefusedNeverOver     int64   `json:"refused_never_over_sources"`
	RateDifference       float64 `json:"mean_relative_rate_difference"`
}

// accuracy replays c's trace and builds the report. When the trace has a
// source with false decisions, a second pass replays that source alone and
// records its admissions over time for the plot.
func accuracy(ctx context.Context, c traceConfig, engine string, workers int, rep reporter) (accuracyReport, error) {
	src, closeSrc, err := c.open()
	if err != nil {
		return accuracyReport{}, err
	}
	done, total := src.progress()
	prog := rep.start(c.name()+" ("+engine+")", src.unit(), total-done)
	o := replayOptions{limit: c.limit, window: c.window, truth: c.truth, engine: engine, workers: workers, watch: -1, prog: prog}
	res, err := replay(ctx, src, o)
	prog.Finish()
	if err := closeSrc(); err != nil && res.events > 0 {
		return accuracyReport{}, fmt.Errorf("lab: trace: %w", err)
	}
	if err != nil {
		return accuracyReport{}, err
	}
	if res.events == 0 {
		return accuracyReport{}, fmt.Errorf("lab: the trace holds no request")
	}
	r := buildAccuracy(c, engine, src, res)
	if res.worstFalses > 0 {
		src2, close2, err := c.open()
		if err != nil {
			return r, err
		}
		o.watch, o.origin, o.workers, o.prog = int64(res.worstKey), worstOrigin(res.worstFalseAt, c.window), 1, nil
		res2, err := replay(ctx, src2, o)
		if err := close2(); err != nil {
			return r, fmt.Errorf("lab: trace: %w", err)
		}
		if err != nil {
			return r, err
		}
		r.worst = res2.watch
	}
	return r, nil
}

// worstOrigin is where the worst source's series starts: worstLead windows
// before the window of its first false decision, so that the plot shows the
// algorithms disagreeing, with the trailing sums filled before.
func worstOrigin(falseAt int64, window time.Duration) int64 {
	return falseAt - falseAt%int64(window) - worstLead*int64(window)
}

// worstLead is how many windows of the worst source's plot come before the
// window of its first false decision.
const worstLead = 3

// buildAccuracy turns a replay's findings into the report.
func buildAccuracy(c traceConfig, engine string, src source, res replayResult) accuracyReport {
	span := max(res.last-res.first, int64(c.window))
	r := accuracyReport{
		Command: "accuracy",
		Trace: traceInfo{
			Kind: c.kind, Description: c.describe(),
			Start:   time.Unix(0, res.first).UTC().Format(time.RFC3339Nano),
			End:     time.Unix(0, res.last).UTC().Format(time.RFC3339Nano),
			Seconds: time.Duration(res.last - res.first).Seconds(),
		},
		Policy:          policyInfo{Limit: c.limit, WindowSeconds: c.window.Seconds()},
		Truth:           c.truth,
		Engine:          engine,
		Requests:        res.events,
		Sources:         res.sources,
		LimitedSources:  res.limited,
		LimitedRequests: res.limitedRequests,
		ExactAdmitted:   res.exactAdmitted,
		WorstFalses:     int64(res.worstFalses),
		elapsed:         res.elapsed,
	}
	if c.kind == kindFile {
		r.Trace.File = c.file
		if f, ok := src.(*fileSource); ok {
			r.Notes = f.notes()
		}
	} else {
		r.Trace.Seed = c.seed
	}
	if res.worstFalses > 0 {
		r.WorstSource = src.name(res.worstKey)
	}
	for a, alg := range labAlgorithms {
		s := res.stats[a]
		aa := algAccuracy{
			Algorithm:      string(alg),
			Requests:       s.requests,
			Admitted:       s.admitted,
			FalseAllows:    s.falseAllows,
			FalseRefusals:  s.falseRefusals,
			WorstOvershoot: float64(s.worst) / float64(c.limit),
		}
		if s.worst > 0 {
			aa.WorstOvershootSrc = src.name(s.worstKey)
		}
		if s.requests > 0 {
			aa.FalseAllowShare = float64(s.falseAllows) / float64(s.requests)
			aa.FalseRefusalShare = float64(s.falseRefusals) / float64(s.requests)
			aa.ErrorShare = float64(s.falseAllows+s.falseRefusals) / float64(s.requests)
		}
		if res.limited > 0 {
			aa.RateMAD = float64(res.madSum[a]) / float64(res.limited) * float64(c.window) / float64(span)
		}
		if c.truth == truthAttempts {
			as := res.attempts[a]
			aa.Attempts = &attemptsFigures{
				OverNeverRefused:     as.overNeverRefused,
				OverNeverRefusedPeak: float64(as.worstPeak) / float64(c.limit),
				RefusedNeverOver:     as.refusedNeverOver,
				RateDifference:       as.diff / float64(max(1, s.requests)),
			}
		}
		r.Algorithms = append(r.Algorithms, aa)
	}
	return r
}

// engineText explains an engine in the report.
func engineText(engine string) string {
	if engine == engineMemory {
		return "memory store (memstore through limiter.Store, the trace's time as each request's Now)"
	}
	return "direct (the library's algorithm functions, limiter.FixedWindowDecide and siblings, on compact per-key state)"
}

// writeMarkdown prints the report as a Markdown section.
func (r accuracyReport) writeMarkdown(w io.Writer) error {
	ew := &errWriter{w: w}
	attempts := r.Truth == truthAttempts
	if attempts {
		ew.printf("## Accuracy: %s trace, every attempt counted\n\n", r.Trace.Kind)
	} else {
		ew.printf("## Accuracy: %s trace\n\n", r.Trace.Kind)
	}
	if r.Trace.File != "" {
		ew.printf("Trace: `%s`. ", r.Trace.File)
	} else {
		ew.printf("Trace (seed %d): %s. ", r.Trace.Seed, r.Trace.Description)
	}
	ew.printf("Policy: %d per %s for every algorithm, each source its own key. Engine: %s.\n\n",
		r.Policy.Limit, time.Duration(r.Policy.WindowSeconds*float64(time.Second)), engineText(r.Engine))
	if attempts {
		ew.printf("Truth: every attempt counted in a sliding window (Cloudflare's measure); a request should be refused when its source's attempts in the last window, itself included, exceed the limit. ")
		ew.printf("%d requests from %d sources, %s to %s; %d sources went over the limit and sent %s of the requests.\n\n",
			r.Requests, r.Sources, r.Trace.Start, r.Trace.End, r.LimitedSources, percent(float64(r.LimitedRequests)/float64(r.Requests)))
	} else {
		ew.printf("%d requests from %d sources, %s to %s; %d sources hit the limit (the exact sliding log refused them at least once) and sent %s of the requests; the exact log admitted %d units.\n\n",
			r.Requests, r.Sources, r.Trace.Start, r.Trace.End, r.LimitedSources, percent(float64(r.LimitedRequests)/float64(r.Requests)), r.ExactAdmitted)
	}
	for _, n := range r.Notes {
		ew.printf("Note: %s.\n\n", n)
	}
	if attempts {
		return r.writeAttempts(ew)
	}
	ew.printf("| algorithm | requests | admitted | false allows | false refusals | false allow share | false refusal share | error share | worst overshoot | rate MAD (units/window) |\n")
	ew.printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range r.Algorithms {
		ew.printf("| %s | %d | %d | %d | %d | %s | %s | %s | %.2f× | %.3f |\n",
			a.Algorithm, a.Requests, a.Admitted, a.FalseAllows, a.FalseRefusals,
			percent(a.FalseAllowShare), percent(a.FalseRefusalShare), percent(a.ErrorShare), a.WorstOvershoot, a.RateMAD)
	}
	ew.printf("\nFalse allow: admitted where the exact sliding log refuses; false refusal: refused where it admits. Worst overshoot: the most units an algorithm admitted to one source in any window-length span, ÷ the limit. Rate MAD: the mean absolute difference between the units admitted and the exact log's, over the sources that hit the limit, per window.\n")
	if r.WorstSource != "" {
		ew.printf("\nWorst source: %s, %d false decisions (all algorithms together).\n", r.WorstSource, r.WorstFalses)
	}
	for _, p := range r.Plots {
		ew.printf("\n![%s](%s)\n", strings.TrimSuffix(p, ".png"), p)
	}
	return ew.err
}

// writeAttempts prints the table of the attempts truth.
func (r accuracyReport) writeAttempts(ew *errWriter) error {
	ew.printf("| algorithm | requests | admitted | wrongly allowed | wrongly limited | error share | sources over, never refused | worst of them (peak ÷ limit) | sources refused, never over | mean rate difference |\n")
	ew.printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range r.Algorithms {
		ew.printf("| %s | %d | %d | %d | %d | %s | %d | %.2f× | %d | %s |\n",
			a.Algorithm, a.Requests, a.Admitted, a.FalseAllows, a.FalseRefusals, percent(a.ErrorShare),
			a.Attempts.OverNeverRefused, a.Attempts.OverNeverRefusedPeak, a.Attempts.RefusedNeverOver, percent(a.Attempts.RateDifference))
	}
	ew.printf("\nWrongly allowed: admitted while the source's attempts in the last window exceed the limit; wrongly limited: refused while they do not. Mean rate difference: the mean over requests of |the count the algorithm's decision reports − the attempts in the last window| ÷ those attempts (Tollgate's sliding_window, sliding_log and token_bucket count admitted units only, so a source far over its limit shows a large difference). Cloudflare's published figures for its sliding window (about 400M requests, 270k sources): 0.003%% of requests wrongly allowed or limited, a mean rate difference of about 6%%, a few sources allowed less than 15%% above the threshold, none under it mitigated.\n")
	for _, p := range r.Plots {
		ew.printf("\n![%s](%s)\n", strings.TrimSuffix(p, ".png"), p)
	}
	return ew.err
}

// percent prints a share as a percentage with enough digits for shares
// near Cloudflare's 0.003%.
func percent(share float64) string {
	return fmt.Sprintf("%.4f%%", 100*share)
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// defaultWorkers is how many goroutines replay by default: one per core.
func defaultWorkers() int { return runtime.GOMAXPROCS(0) }
