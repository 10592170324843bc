package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// The ramp: constant-rate steps from rampStart requests per second, doubling
// until a rate does not hold or passes --max-rate, then bisections steps
// between the highest rate that held and the lowest that did not. A step
// holds when at least minAnswered of its requests got a decision (200 or
// 429), the attacker kept up with at least minSendRatio of the rate, and the
// p99 latency stayed within --max-p99. A step that does not hold is tried
// once more before its rate is declared too high, so that one pause of a
// shared machine does not end the ramp.
const (
	rampStart    = 250
	bisections   = 2
	minAnswered  = 0.99
	minSendRatio = 0.95
)

// stepResult is one constant-rate step of the ramp.
type stepResult struct {
	Rate int     // requested, per second
	Sent float64 // achieved send rate, per second
	tally
	P99  time.Duration
	Held bool
}

// judgeStep reduces a step's results and decides whether the rate held.
func judgeStep(rate int, rs vegeta.Results, maxP99 time.Duration) stepResult {
	var m vegeta.Metrics
	step := stepResult{Rate: rate}
	lat := make([]time.Duration, len(rs))
	for i := range rs {
		m.Add(&rs[i])
		step.add(&rs[i])
		lat[i] = rs[i].Latency
	}
	m.Close()
	step.Sent = m.Rate
	step.P99 = summarize(lat).P99
	answered := float64(step.Admitted+step.Refused) / float64(max(step.Total(), 1))
	step.Held = step.Total() > 0 && answered >= minAnswered &&
		step.Sent >= minSendRatio*float64(rate) && step.P99 <= maxP99
	return step
}

// rampSteps is the most steps a ramp from start to maxRate can take, each
// rate tried at most twice.
func rampSteps(start, maxRate int) int {
	n := 0
	for r := start; r <= maxRate; r *= 2 {
		n++
	}
	return 2 * (n + bisections)
}

// ramp searches the highest rate that holds, calling try for each step. It
// returns the steps in the order tried, the highest rate that held (0 if
// none did) and whether the search stopped at maxRate with every rate held.
func ramp(start, maxRate int, try func(rate int) (stepResult, error)) (steps []stepResult, best int, capped bool, err error) {
	holds := func(rate int) (bool, error) {
		for range 2 {
			s, err := try(rate)
			if err != nil {
				return false, err
			}
			steps = append(steps, s)
			if s.Held {
				return true, nil
			}
		}
		return false, nil
	}
	worst := 0 // the lowest rate that did not hold; 0 while none has
	for r := start; r <= maxRate; r *= 2 {
		ok, err := holds(r)
		if err != nil {
			return steps, best, false, err
		}
		if !ok {
			worst = r
			break
		}
		best = r
	}
	if worst == 0 {
		return steps, best, true, nil
	}
	for range bisections {
		mid := (best + worst) / 2
		if mid == best || mid == worst {
			break
		}
		ok, err := holds(mid)
		if err != nil {
			return steps, best, false, err
		}
		if ok {
			best = mid
		} else {
			worst = mid
		}
	}
	return steps, best, false, nil
}

// throughputRow is one policy's ramp and fixed-rate measurement.
type throughputRow struct {
	Policy    string
	Steps     []stepResult
	Sustained int
	Capped    bool
	// The fixed-rate phase.
	tally
	Sent   float64
	Lat    Latencies
	sorted []time.Duration
}

// throughputResult is the outcome of the throughput scenario.
type throughputResult struct {
	Store    string
	Rate     int
	Duration time.Duration
	Step     time.Duration
	MaxP99   time.Duration
	MaxRate  int
	Rows     []throughputRow
	Plot     string
}

// runThroughput ramps, then measures latency at --rate, one policy after
// another so that they do not share the CPU.
func runThroughput(ctx context.Context, e *env) (throughputResult, error) {
	o := e.opts
	res := throughputResult{Store: o.storeLabel, Rate: o.rate, Duration: o.duration, Step: o.step,
		MaxP99: o.maxP99, MaxRate: o.maxRate, Plot: "latency.png"}
	perPolicy := int64(rampSteps(rampStart, o.maxRate) + 1)
	planned := perPolicy * int64(len(o.policies))
	prog := startProgress(e.stderr, e.progress, "throughput", "steps", planned)
	defer prog.Stop()
	run := func(policy, phase string, rate int, du time.Duration) (vegeta.Results, error) {
		rs := attack(ctx, e.client, attackSpec{
			Name:     "throughput-" + policy,
			Targeter: keyTargeter(o.target, policy, e.key("throughput", policy, phase), o.keys),
			Pacer:    vegeta.ConstantPacer{Freq: rate, Per: time.Second},
			Duration: du,
			Workers:  uint64(o.workers),
			Max:      uint64(o.maxWorkers),
		}, nil)
		prog.Add(1)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("loadgen: throughput: %w", err)
		}
		return rs, nil
	}
	for _, policy := range o.policies {
		row := throughputRow{Policy: policy}
		var err error
		row.Steps, row.Sustained, row.Capped, err = ramp(rampStart, o.maxRate, func(rate int) (stepResult, error) {
			rs, err := run(policy, "ramp"+strconv.Itoa(rate), rate, o.step)
			return judgeStep(rate, rs, o.maxP99), err
		})
		if err != nil {
			return res, err
		}
		rs, err := run(policy, "fixed", o.rate, o.duration)
		if err != nil {
			return res, err
		}
		var m vegeta.Metrics
		row.sorted = make([]time.Duration, len(rs))
		for k := range rs {
			m.Add(&rs[k])
			row.add(&rs[k])
			row.sorted[k] = rs[k].Latency
		}
		m.Close()
		row.Sent = m.Rate
		row.Lat = summarize(row.sorted)
		res.Rows = append(res.Rows, row)
		// Steps the ramp did not need are dropped from the bar.
		planned -= perPolicy - int64(len(row.Steps)+1)
		prog.SetTotal(planned)
	}
	curves := make([]latencyCurve, len(res.Rows))
	for i, r := range res.Rows {
		curves[i] = latencyCurve{Policy: r.Policy, Sorted: r.sorted}
	}
	title := fmt.Sprintf("latency at %d requests/s for %s, store %s", res.Rate, res.Duration, res.Store)
	return res, plotLatency(filepath.Join(o.out, res.Plot), title, curves)
}

// sustained formats a row's highest sustained rate.
func (r throughputRow) sustained() string {
	switch {
	case r.Capped:
		return fmt.Sprintf("≥ %d/s (--max-rate reached)", r.Sustained)
	case r.Sustained == 0:
		return fmt.Sprintf("< %d/s", rampStart)
	default:
		return fmt.Sprintf("%d/s", r.Sustained)
	}
}

func (t throughputResult) markdown(w io.Writer) {
	fmt.Fprintf(w, "## Throughput and latency (store: %s)\n\n", t.Store)
	fmt.Fprintf(w, "Highest sustained rate: constant-rate steps of %s from %d/s, doubling up to %d/s, then %d bisection steps; "+
		"a rate that fails is tried once more before it counts as too high; "+
		"a step holds when ≥ %.0f%% of requests got a decision (200 or 429), the attacker sent ≥ %.0f%% of the rate, and p99 ≤ %s. "+
		"Keys rotate over a pool of fresh keys. Loadgen and the service share the same machine, so the ceiling is the "+
		"pair's, not the service's alone.\n\n",
		t.Step, rampStart, t.MaxRate, bisections, minAnswered*100, minSendRatio*100, t.MaxP99)
	fmt.Fprintf(w, "Latency: exact percentiles of every request over %s at %d/s.\n\n", t.Duration, t.Rate)
	fmt.Fprintf(w, "| policy | sustained | sent/s | admitted | refused | failed | p50 | p90 | p99 | max |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range t.Rows {
		fmt.Fprintf(w, "| %s | %s | %.0f | %d | %d | %d | %s | %s | %s | %s |\n", r.Policy, r.sustained(), r.Sent,
			r.Admitted, r.Refused, r.Failed, ms(r.Lat.P50), ms(r.Lat.P90), ms(r.Lat.P99), ms(r.Lat.Max))
	}
	fmt.Fprintln(w)
	for _, r := range t.Rows {
		fmt.Fprint(w, r.note(r.Policy))
	}
	fmt.Fprintf(w, "\n<details><summary>ramp steps</summary>\n\n| policy | rate | sent/s | requests | answered | p99 | held |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range t.Rows {
		for _, s := range r.Steps {
			answered := 100 * float64(s.Admitted+s.Refused) / float64(max(s.Total(), 1))
			fmt.Fprintf(w, "| %s | %d | %.0f | %d | %.1f%% | %s | %t |\n", r.Policy, s.Rate, s.Sent, s.Total(), answered, ms(s.P99), s.Held)
		}
	}
	fmt.Fprintf(w, "\n</details>\n\n![latency distribution](%s)\n\n", t.Plot)
}

func (t throughputResult) summary(w io.Writer) {
	fmt.Fprintf(w, "throughput  store %s, latency at %d/s for %s\n", t.Store, t.Rate, t.Duration)
	for _, r := range t.Rows {
		fmt.Fprintf(w, "  %-20s sustained %-28s p50 %s  p90 %s  p99 %s  max %s  failed %d\n", r.Policy, r.sustained(),
			ms(r.Lat.P50), ms(r.Lat.P90), ms(r.Lat.P99), ms(r.Lat.Max), r.Failed)
	}
}

// ms formats d in milliseconds with three decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}
