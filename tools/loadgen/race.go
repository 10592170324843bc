package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// The race: n requests on one fresh key, all in flight at once. vegeta's
// attacker is started with n workers (and at most n), all parked on its tick
// channel before the first tick; the pacer hands out n ticks with no wait,
// so the n requests leave within a goroutine hand-off of each other. The
// shared client holds n warm keep-alive connections, opened beforehand by n
// concurrent GET /healthz, so that no request waits for a TCP handshake.

// raceRound is one burst on one fresh key.
type raceRound struct {
	tally
	// Spread is the time between the first and the last send.
	Spread time.Duration
	// Took is the time from the first send to the last answer.
	Took time.Duration
	// Straddled is true when the burst crossed a Unix-aligned window
	// boundary, where a window algorithm may honestly admit more.
	Straddled bool
}

// raceRow is one policy's rounds.
type raceRow struct {
	Policy string
	Rounds []raceRound
}

// admitted lists the admitted count of every round.
func (r raceRow) admitted() []int {
	out := make([]int, len(r.Rounds))
	for i, rd := range r.Rounds {
		out[i] = rd.Admitted
	}
	return out
}

// analyzeRace reduces one round's results.
func analyzeRace(rs vegeta.Results, window time.Duration) raceRound {
	var rd raceRound
	if len(rs) == 0 {
		return rd
	}
	first, last, end := rs[0].Timestamp, rs[0].Timestamp, rs[0].End()
	for i := range rs {
		r := &rs[i]
		rd.add(r)
		if r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if r.Timestamp.After(last) {
			last = r.Timestamp
		}
		if r.End().After(end) {
			end = r.End()
		}
	}
	rd.Spread = last.Sub(first)
	rd.Took = end.Sub(first)
	rd.Straddled = !unixFloor(first, window).Equal(unixFloor(end, window))
	return rd
}

// waitForRoom sleeps, unless ctx ends, until at least half of the current
// Unix-aligned window is left, so that a burst fits in one window.
func waitForRoom(ctx context.Context, window time.Duration) error {
	now := time.Now()
	next := unixFloor(now, window).Add(window)
	if next.Sub(now) >= window/2 {
		return nil
	}
	t := time.NewTimer(time.Until(next.Add(10 * time.Millisecond)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// warm opens up to n keep-alive connections to target by sending n
// GET /healthz at once.
func warm(ctx context.Context, c *http.Client, target string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { _ = checkHealth(ctx, c, target) })
	}
	wg.Wait()
}

// countPacer is a vegeta pacer that sends its number of hits without
// waiting, then stops.
type countPacer uint64

// Pace implements vegeta.Pacer.
func (n countPacer) Pace(_ time.Duration, hits uint64) (time.Duration, bool) {
	return 0, hits >= uint64(n)
}

// Rate implements vegeta.Pacer: the rate is unbounded, reported as +Inf.
func (countPacer) Rate(time.Duration) float64 { return math.Inf(1) }

// raceResult is the outcome of the race scenario.
type raceResult struct {
	Limit  int64
	Window time.Duration
	N      int // requests per round
	Rounds int // rounds per policy
	Rows   []raceRow
	Plot   string
}

// runRace fires the bursts, one policy after another, and plots them.
func runRace(ctx context.Context, e *env) (raceResult, error) {
	o := e.opts
	res := raceResult{Limit: o.limit, Window: o.window, N: o.n, Rounds: o.rounds, Plot: "race.png"}
	warm(ctx, e.client, o.target, o.n)
	prog := startProgress(e.stderr, e.progress, "race", "requests", int64(o.n*o.rounds*len(o.racePolicies)))
	defer prog.Stop()
	for _, policy := range o.racePolicies {
		row := raceRow{Policy: policy}
		for round := range o.rounds {
			if err := waitForRoom(ctx, o.window); err != nil {
				return res, fmt.Errorf("loadgen: race: %w", err)
			}
			rs := attack(ctx, e.client, attackSpec{
				Name:     "race-" + policy,
				Targeter: vegeta.NewStaticTargeter(checkTarget(o.target, policy, e.key("race", policy, strconv.Itoa(round)))),
				Pacer:    countPacer(o.n),
				Workers:  uint64(o.n),
				Max:      uint64(o.n),
			}, prog)
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("loadgen: race: %w", err)
			}
			row.Rounds = append(row.Rounds, analyzeRace(rs, o.window))
		}
		res.Rows = append(res.Rows, row)
	}
	bars := make([]raceBars, len(res.Rows))
	for i, r := range res.Rows {
		bars[i] = raceBars{Policy: r.Policy, Admitted: r.admitted()}
	}
	return res, plotRace(filepath.Join(o.out, res.Plot), bars, res.Limit, res.N)
}

// allowance is how many admissions over the limit a correct policy may
// grant during a round that took d: the token bucket (by the demo's policy
// name) refills one unit every window/limit; the others none.
func (r raceResult) allowance(policy string, d time.Duration) int64 {
	if policy != "token_bucket" || r.Limit <= 0 || r.Window < time.Duration(r.Limit) {
		return 0
	}
	return int64(d / (r.Window / time.Duration(r.Limit)))
}

// verdict compares a row's rounds with the limit.
func (r raceResult) verdict(row raceRow) string {
	worst, over := 0, false
	for _, rd := range row.Rounds {
		worst = max(worst, rd.Admitted)
		if int64(rd.Admitted) > r.Limit+r.allowance(row.Policy, rd.Took) && !rd.Straddled {
			over = true
		}
	}
	switch {
	case int64(worst) <= r.Limit:
		return "never over the limit"
	case over:
		return fmt.Sprintf("**over the limit** (up to %d)", worst)
	case row.Policy == "token_bucket":
		return "over only by the refill while a round lasted"
	default:
		return "over only when a burst straddled a window boundary"
	}
}

func (r raceResult) markdown(w io.Writer) {
	fmt.Fprintf(w, "## Race: check-then-act under concurrency\n\n")
	fmt.Fprintf(w, "%d requests on one fresh key, all in flight at once, %d times per policy (limit %d per %s). "+
		"vegeta's attacker runs %d workers parked on its tick channel and a client with %d warm keep-alive connections, "+
		"so that no request waits for a dial or for another worker; the send spread below is how close together the machine could send them. A round starts only when at least half "+
		"of the current window is left.\n\n",
		r.N, r.Rounds, r.Limit, r.Window, r.N, r.N)
	fmt.Fprintf(w, "| policy | admitted per round | limit | failed | median send spread | longest round | verdict |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---|\n")
	var notes strings.Builder
	for _, row := range r.Rows {
		var all tally
		var longest time.Duration
		spreads := make([]time.Duration, len(row.Rounds))
		for i, rd := range row.Rounds {
			all.merge(rd.tally)
			spreads[i] = rd.Spread
			longest = max(longest, rd.Took)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %s | %s |\n", row.Policy, joinInts(row.admitted()), r.Limit, all.Failed,
			Percentile(sorted(spreads), 0.5).Round(time.Microsecond), longest.Round(time.Millisecond), r.verdict(row))
		notes.WriteString(all.note(row.Policy))
	}
	if notes.Len() > 0 {
		notes.WriteString("\n")
	}
	fmt.Fprintf(w, "\n%sA token bucket honestly admits a little over the limit: it refills one unit every %s while a round lasts "+
		"(first send to last answer); the verdict allows for it.\n\n", notes.String(), r.Window/time.Duration(r.Limit))
	fmt.Fprintf(w, "![admitted per round](%s)\n\n", r.Plot)
}

func (r raceResult) summary(w io.Writer) {
	fmt.Fprintf(w, "race      %d simultaneous requests on a fresh key, limit %d\n", r.N, r.Limit)
	for _, row := range r.Rows {
		fmt.Fprintf(w, "  %-20s admitted %-24s %s\n", row.Policy, joinInts(row.admitted()), strings.ReplaceAll(r.verdict(row), "**", ""))
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

func sorted(d []time.Duration) []time.Duration {
	slices.Sort(d)
	return d
}
