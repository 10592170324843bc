package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// labAlgorithms are the algorithms the lab compares, in report order. The
// unsafe sliding log is left out: replayed one decision at a time it is the
// sliding log; its flaw is a race, and a replay has no concurrency.
var labAlgorithms = [nAlgs]limiter.Algorithm{limiter.FixedWindow, limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket}

const nAlgs = 4

// batchSize is how many events travel together from the trace to the
// workers.
const batchSize = 8192

// window holds the units admitted in the last window of one key, oldest
// first, with their sum: the exact sliding log's state, and the lab's
// record of what an algorithm admitted (for the worst overshoot).
type window struct {
	ev   []limiter.Event
	head int
	sum  int64
}

// expire drops the events at or before cutoff.
func (w *window) expire(cutoff int64) {
	for w.head < len(w.ev) && w.ev[w.head].At <= cutoff {
		w.sum -= w.ev[w.head].Cost
		w.head++
	}
	switch {
	case w.head == len(w.ev):
		w.ev, w.head = w.ev[:0], 0
	case w.head >= 32 && 2*w.head >= len(w.ev):
		w.ev, w.head = w.ev[:copy(w.ev, w.ev[w.head:])], 0
	}
}

func (w *window) push(at, cost int64) {
	w.ev = append(w.ev, limiter.Event{At: at, Cost: cost})
	w.sum += cost
}

func (w *window) live() []limiter.Event { return w.ev[w.head:] }

// decider makes one algorithm's decision for one key, and returns the
// count the decision reports (limiter.Decision.Count: the algorithm's own
// estimate of the units in the window). Keys are numbered locally to a
// worker (k) and globally in the trace (key).
type decider interface {
	decide(a int, k int, key uint32, at, cost int64) (bool, int64, error)
}

// Ground truths. admitted: an exact sliding log of the units admitted (a
// request is right to refuse when admitting it would put more than the
// limit in the last window). attempts: every attempt counted in a sliding
// window, as Cloudflare measures (a request is right to refuse when its
// source's attempts in the last window, itself included, exceed the
// limit).
const (
	truthAdmitted = "admitted"
	truthAttempts = "attempts"
)

// Engines.
const (
	engineDirect = "direct"
	engineMemory = "memory"
)

// keyState is what a worker keeps for one key: the exact log, and for each
// algorithm what it admitted.
type keyState struct {
	exact      window
	exactUnits int64
	tried      window // attempts truth: every attempt in the last window
	peak       int64  // attempts truth: most attempted units in a window
	falses     uint32 // false decisions, every algorithm together
	falseAt    int64  // time of the first
	hit        bool   // the truth refused at least once
	requests   int64
	first      int64 // index in the trace of the key's first request
	algs       [nAlgs]keyAlg
}

type keyAlg struct {
	adm     window  // admitted units in the last window
	units   int64   // admitted units in the whole trace
	refused bool    // refused at least once
	diff    float64 // attempts truth: sum of |count − attempts| ÷ attempts
}

// falsify counts a false decision at time at.
func (ks *keyState) falsify(at int64) {
	if ks.falses == 0 {
		ks.falseAt = at
	}
	ks.falses++
}

// algStats are one algorithm's totals.
type algStats struct {
	requests, admitted, falseAllows, falseRefusals int64
	worst                                          int64  // most units admitted in a window-length span
	worstAt                                        int64  // index in the trace of the request that first reached it
	worstKey                                       uint32 // whose request that was
}

// seriesBins is how many bins of a series make one window, and
// worstWindows how many windows a series spans: its size is fixed,
// whatever the span of the trace.
const (
	seriesBins   = 20
	worstWindows = 10
)

// series counts, per bin of time, the units one source attempted, the exact
// log admitted, and each algorithm admitted, over worstWindows windows from
// origin; what falls outside is not counted.
type series struct {
	origin, bin int64
	attempts    []int64
	exact       []int64
	algs        [nAlgs][]int64
}

func newSeries(origin int64, window time.Duration) *series {
	const n = worstWindows * seriesBins
	s := &series{origin: origin, bin: max(1, int64(window)/seriesBins), attempts: make([]int64, n), exact: make([]int64, n)}
	for a := range s.algs {
		s.algs[a] = make([]int64, n)
	}
	return s
}

func (s *series) add(counts []int64, at, cost int64) {
	if at < s.origin {
		return
	}
	if i := (at - s.origin) / s.bin; i < int64(len(counts)) {
		counts[i] += cost
	}
}

// worker replays the keys k of a trace with k % of == idx.
type worker struct {
	idx, of  int
	limit    int64
	window   int64
	attempts bool // the attempts truth
	eng      decider
	keys     []keyState
	stats    [nAlgs]algStats
	watch    *series // when set, the trace holds one key and this records it
	err      error
}

func (w *worker) run(in <-chan *batch, free chan<- *batch) {
	for b := range in {
		if w.err == nil {
			w.err = w.replay(b.ev, b.base)
		}
		if b.refs.Add(-1) == 0 {
			free <- b
		}
	}
}

// replay decides evs, the trace's requests from index base on. Ties between
// sources are broken by the order of the trace, never by the numbering of
// the sources or the split of the work, so that a file and the generated
// trace it holds give the same report.
func (w *worker) replay(evs []event, base int64) error {
	for i, e := range evs {
		if int(e.key)%w.of != w.idx {
			continue
		}
		k := int(e.key) / w.of
		for len(w.keys) <= k {
			w.keys = append(w.keys, keyState{})
		}
		ks := &w.keys[k]
		if ks.requests == 0 {
			ks.first = base + int64(i)
		}
		ks.requests++
		cost := int64(e.cost)
		cut := e.at - w.window
		ks.exact.expire(cut)
		truth := ks.exact.sum+cost <= w.limit
		if truth {
			ks.exact.push(e.at, cost)
			ks.exactUnits += cost
		}
		if w.attempts {
			ks.tried.expire(cut)
			ks.tried.push(e.at, cost)
			ks.peak = max(ks.peak, ks.tried.sum)
			truth = ks.tried.sum <= w.limit
		}
		if !truth {
			ks.hit = true
		}
		if w.watch != nil {
			w.watch.add(w.watch.attempts, e.at, cost)
			if truth {
				w.watch.add(w.watch.exact, e.at, cost)
			}
		}
		for a := range nAlgs {
			ok, count, err := w.eng.decide(a, k, e.key, e.at, cost)
			if err != nil {
				return err
			}
			s, ka := &w.stats[a], &ks.algs[a]
			ka.refused = ka.refused || !ok
			if w.attempts {
				ka.diff += math.Abs(float64(count-ks.tried.sum)) / float64(ks.tried.sum)
			}
			s.requests++
			switch {
			case ok:
				s.admitted++
				ka.units += cost
				ka.adm.expire(cut)
				ka.adm.push(e.at, cost)
				if ka.adm.sum > s.worst {
					s.worst, s.worstAt, s.worstKey = ka.adm.sum, base+int64(i), e.key
				}
				if !truth {
					s.falseAllows++
					ks.falsify(e.at)
				}
				if w.watch != nil {
					w.watch.add(w.watch.algs[a], e.at, cost)
				}
			case truth:
				s.falseRefusals++
				ks.falsify(e.at)
			}
		}
	}
	return nil
}

// batch is a slice of a trace on its way to every worker; the last worker
// done with it hands it back.
type batch struct {
	ev   []event
	base int64 // index in the trace of ev[0]
	refs atomic.Int32
}

// replayOptions say how to replay.
type replayOptions struct {
	limit   int64
	window  time.Duration
	truth   string // truthAdmitted or truthAttempts
	engine  string
	workers int
	watch   int64 // a key to follow alone (its events only), or -1
	origin  int64 // start of the watched series' first bin; it spans worstWindows windows
	prog    *progress
}

// replayResult is what a replay found, before it is turned into a report.
type replayResult struct {
	events, first, last int64
	stats               [nAlgs]algStats
	sources             int64        // keys seen
	limited             int64        // keys the exact log refused at least once
	limitedRequests     int64        // their requests
	exactAdmitted       int64        // units
	madSum              [nAlgs]int64 // sum over limited keys of |units - exact units|
	worstKey            uint32       // the key with the most false decisions
	worstFalses         uint32
	worstFirst          int64 // index in the trace of its first request
	worstFalseAt        int64 // time of its first false decision
	attempts            [nAlgs]attemptsStats
	watch               *series
	elapsed             time.Duration
}

// policies returns one policy per lab algorithm, same limit and window.
func policies(limit int64, window time.Duration) ([nAlgs]limiter.Policy, error) {
	var ps [nAlgs]limiter.Policy
	for i, a := range labAlgorithms {
		ps[i] = limiter.Policy{Name: "lab-" + string(a), Algorithm: a, Limit: limit, Window: window}
		if err := ps[i].Validate(); err != nil {
			return ps, fmt.Errorf("lab: %w", err)
		}
	}
	return ps, nil
}

// replay streams src through every algorithm and the exact log.
func replay(ctx context.Context, src source, o replayOptions) (replayResult, error) {
	ps, err := policies(o.limit, o.window)
	if err != nil {
		return replayResult{}, err
	}
	workers := make([]*worker, max(1, o.workers))
	for i := range workers {
		w := &worker{idx: i, of: len(workers), limit: o.limit, window: int64(o.window), attempts: o.truth == truthAttempts}
		switch o.engine {
		case engineDirect:
			w.eng = &directEngine{ps: ps}
		case engineMemory:
			w.eng = newMemoryEngine(ps)
		default:
			return replayResult{}, fmt.Errorf("lab: engine %q: want %s or %s", o.engine, engineDirect, engineMemory)
		}
		workers[i] = w
	}
	if o.watch >= 0 {
		workers[0].watch = newSeries(o.origin, o.window)
	}
	nb := 4 * len(workers)
	free := make(chan *batch, nb)
	for range nb {
		free <- &batch{ev: make([]event, batchSize)}
	}
	ins := make([]chan *batch, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		ins[i] = make(chan *batch, nb)
		wg.Go(func() { w.run(ins[i], free) })
	}
	res := replayResult{first: -1}
	began := time.Now()
	err = produce(ctx, src, o, ins, free, &res)
	for _, in := range ins {
		close(in)
	}
	wg.Wait()
	res.elapsed = time.Since(began)
	if err != nil {
		return res, err
	}
	for _, w := range workers {
		if m, ok := w.eng.(*memoryEngine); ok && w.err == nil {
			w.err = m.close()
		}
		if w.err != nil {
			return res, w.err
		}
	}
	res.merge(workers)
	return res, nil
}

// produce reads src into batches and hands each to every worker.
func produce(ctx context.Context, src source, o replayOptions, ins []chan *batch, free chan *batch, res *replayResult) error {
	var reported int64
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("lab: replay: %w", err)
		}
		b := <-free
		n, err := src.next(b.ev[:batchSize])
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		evs := b.ev[:n]
		if res.first < 0 {
			res.first = evs[0].at
		}
		res.last = evs[n-1].at
		b.base = res.events
		res.events += int64(n)
		if o.watch >= 0 {
			kept := evs[:0]
			for _, e := range evs {
				if int64(e.key) == o.watch {
					kept = append(kept, e)
				}
			}
			evs = kept
		}
		b.ev = evs
		b.refs.Store(int32(len(ins)))
		for _, in := range ins {
			in <- b
		}
		done, _ := src.progress()
		o.prog.Add(done - reported)
		reported = done
	}
}

// attemptsStats are one algorithm's figures under the attempts truth.
type attemptsStats struct {
	overNeverRefused int64   // sources over the limit the algorithm never refused
	worstPeak        int64   // the most attempted units in a window among them
	refusedNeverOver int64   // sources refused, never over the limit
	diff             float64 // sum over requests of |count − attempts| ÷ attempts
}

// merge adds up the workers' findings, in an order that does not depend on
// how the work was split.
func (r *replayResult) merge(workers []*worker) {
	// Float sums in key order, whatever the split.
	var diffs [nAlgs][]float64
	for _, w := range workers {
		for a := range nAlgs {
			s, ws := &r.stats[a], w.stats[a]
			s.requests += ws.requests
			s.admitted += ws.admitted
			s.falseAllows += ws.falseAllows
			s.falseRefusals += ws.falseRefusals
			if ws.worst > s.worst || ws.worst == s.worst && ws.worst > 0 && ws.worstAt < s.worstAt {
				s.worst, s.worstAt, s.worstKey = ws.worst, ws.worstAt, ws.worstKey
			}
		}
		for k := range w.keys {
			ks := &w.keys[k]
			key := uint32(k*w.of + w.idx)
			if ks.requests > 0 {
				r.sources++
			}
			r.exactAdmitted += ks.exactUnits
			if ks.falses > r.worstFalses || ks.falses == r.worstFalses && ks.falses > 0 && ks.first < r.worstFirst {
				r.worstFalses, r.worstKey, r.worstFirst, r.worstFalseAt = ks.falses, key, ks.first, ks.falseAt
			}
			if workers[0].attempts {
				for a := range nAlgs {
					ka, as := &ks.algs[a], &r.attempts[a]
					switch {
					case ks.hit && !ka.refused:
						as.overNeverRefused++
						as.worstPeak = max(as.worstPeak, ks.peak)
					case !ks.hit && ka.refused:
						as.refusedNeverOver++
					}
					for len(diffs[a]) <= int(key) {
						diffs[a] = append(diffs[a], 0)
					}
					diffs[a][key] = ka.diff
				}
			}
			if !ks.hit {
				continue
			}
			r.limited++
			r.limitedRequests += int64(ks.requests)
			for a := range nAlgs {
				d := ks.algs[a].units - ks.exactUnits
				r.madSum[a] += max(d, -d)
			}
		}
		if w.watch != nil {
			r.watch = w.watch
		}
	}
	for a := range nAlgs {
		for _, d := range diffs[a] {
			r.attempts[a].diff += d
		}
	}
}
