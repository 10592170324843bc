package main

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// event is one request of a trace: when, which source, how many units.
// Sources are numbered from 0 in order of first appearance (files) or of
// rank (generated traces); 16 bytes, so that a batch of them is cheap to
// pass around.
type event struct {
	at   int64 // Unix nanoseconds
	key  uint32
	cost uint32
}

// source streams a trace in time order, a batch at a time. Nothing holds a
// whole trace in memory.
type source interface {
	// next fills buf and returns how many events it wrote; 0 means the end.
	next(buf []event) (int, error)
	// name returns the name of source key, which next has already returned.
	name(key uint32) string
	// progress returns the work done and the work expected, in units of
	// unit(): events for generated traces, bytes for files.
	progress() (done, total int64)
	unit() string
}

// traceOrigin is where generated traces start: a round UTC time, so that
// window boundaries fall on round times for every whole-second window that
// divides a day.
var traceOrigin = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// sourceName is the name of generated source k.
func sourceName(k uint32) string { return "s" + strconv.FormatUint(uint64(k), 10) }

// newRand returns the generator every trace draws from: PCG seeded with
// seed, so the same seed gives the same trace on every platform.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// mixSource is a superposition of independent Poisson sources: it draws
// exactly n arrivals of one Poisson process whose rate is the sum of the
// sources' rates, and gives each arrival to a source with probability
// proportional to its rate (the superposition of Poisson processes is the
// Poisson process of the summed rate, split in that proportion). One
// exponential and one alias-table draw per event, whatever the number of
// sources.
type mixSource struct {
	rng   *rand.Rand
	alias aliasTable
	gap   float64 // mean time between arrivals, ns
	t     float64 // time of the last arrival, ns after traceOrigin
	n, i  int64
}

func newMixSource(seed uint64, weights []float64, n int64, d time.Duration) *mixSource {
	return &mixSource{rng: newRand(seed), alias: newAliasTable(weights), gap: float64(d) / float64(n), n: n}
}

func (m *mixSource) next(buf []event) (int, error) {
	k := 0
	for ; k < len(buf) && m.i < m.n; k++ {
		m.t += m.rng.ExpFloat64() * m.gap
		buf[k] = event{at: traceOrigin + int64(m.t), key: m.alias.draw(m.rng), cost: 1}
		m.i++
	}
	return k, nil
}

func (m *mixSource) name(k uint32) string          { return sourceName(k) }
func (m *mixSource) progress() (done, total int64) { return m.i, m.n }
func (m *mixSource) unit() string                  { return "events" }

// aliasTable draws an index with probability proportional to its weight in
// constant time (Vose's alias method).
type aliasTable struct {
	prob  []float64
	alias []uint32
}

func newAliasTable(weights []float64) aliasTable {
	n := len(weights)
	var sum float64
	for _, w := range weights {
		sum += w
	}
	t := aliasTable{prob: make([]float64, n), alias: make([]uint32, n)}
	scaled := make([]float64, n)
	var small, large []uint32
	for i, w := range weights {
		scaled[i] = w * float64(n) / sum
		if scaled[i] < 1 {
			small = append(small, uint32(i))
		} else {
			large = append(large, uint32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small, large = small[:len(small)-1], large[:len(large)-1]
		t.prob[s], t.alias[s] = scaled[s], l
		scaled[l] -= 1 - scaled[s]
		if scaled[l] < 1 {
			small = append(small, l)
		} else {
			large = append(large, l)
		}
	}
	for _, i := range append(small, large...) { // left over by rounding: probability 1
		t.prob[i], t.alias[i] = 1, i
	}
	return t
}

func (t aliasTable) draw(r *rand.Rand) uint32 {
	i := uint32(r.IntN(len(t.prob)))
	if r.Float64() < t.prob[i] {
		return i
	}
	return t.alias[i]
}

// steadyParams shape the steady trace: every source Poisson, at a rate
// drawn uniformly between Low and High times the limit, so about half of
// them run over it.
type steadyParams struct {
	Sources   int
	Windows   int     // trace duration, in windows
	Low, High float64 // rate bounds, in limits per window
}

func newSteadySource(seed uint64, sp steadyParams, limit int64, window time.Duration) *mixSource {
	rng := newRand(seed ^ 0x5354454144590000) // "STEADY": rates, apart from arrivals
	w := make([]float64, sp.Sources)
	var sum float64
	for i := range w {
		w[i] = sp.Low + (sp.High-sp.Low)*rng.Float64()
		sum += w[i]
	}
	n := int64(math.Round(sum * float64(limit) * float64(sp.Windows)))
	return newMixSource(seed, w, max(n, 1), time.Duration(sp.Windows)*window)
}

// populationParams shape the population trace: source rates follow a Zipf
// law of exponent S over Sources ranks, scaled so that the source of rank
// AtLimit sends exactly the limit: the AtLimit-1 sources above it are the
// abusers (the first one AtLimit^S times over the limit), the others stay
// under it. The duration follows from Requests.
type populationParams struct {
	Sources  int
	Requests int64
	S        float64
	AtLimit  int
}

// zipfWeights returns the sources' rates in limits per window, and their sum.
func (pp populationParams) zipfWeights() ([]float64, float64) {
	w := make([]float64, pp.Sources)
	var sum float64
	for i := range w {
		w[i] = math.Pow(float64(pp.AtLimit)/float64(i+1), pp.S)
		sum += w[i]
	}
	return w, sum
}

// duration returns how long the trace lasts for Requests requests at the
// Zipf rates under limit per window.
func (pp populationParams) duration(limit int64, window time.Duration) time.Duration {
	_, sum := pp.zipfWeights()
	windows := float64(pp.Requests) / (sum * float64(limit))
	return time.Duration(windows * float64(window)).Round(time.Second)
}

func newPopulationSource(seed uint64, pp populationParams, limit int64, window time.Duration) *mixSource {
	w, _ := pp.zipfWeights()
	return newMixSource(seed, w, pp.Requests, pp.duration(limit, window))
}

// boundaryParams shape the boundary trace: every source sends a background
// of Poisson requests at Background limits per window and, at one window
// boundary in Every, a burst of Burst×limit requests spread evenly over a
// short span before the boundary and the same after it (the span is drawn
// per burst, up to MaxSpan of the window): the traffic that lets a fixed
// window admit twice its limit.
type boundaryParams struct {
	Sources    int
	Windows    int
	Every      int
	Burst      float64
	Background float64
	MaxSpan    float64
}

// boundarySource generates the boundary trace one window at a time: it
// gathers every source's events of the window, sorts them by time, and
// hands them out.
type boundarySource struct {
	bp     boundaryParams
	seed   uint64
	rng    *rand.Rand
	limit  int64
	window int64
	w      int // next window to generate
	buf    []event
	pos    int
	done   int64
}

func newBoundarySource(seed uint64, bp boundaryParams, limit int64, window time.Duration) *boundarySource {
	return &boundarySource{bp: bp, seed: seed, rng: newRand(seed), limit: limit, window: int64(window)}
}

func (b *boundarySource) next(buf []event) (int, error) {
	for b.pos == len(b.buf) {
		if b.w >= b.bp.Windows {
			return 0, nil
		}
		b.fill(b.w)
		b.w++
	}
	n := copy(buf, b.buf[b.pos:])
	b.pos += n
	b.done += int64(n)
	return n, nil
}

// fill generates window w's events.
func (b *boundarySource) fill(w int) {
	b.buf, b.pos = b.buf[:0], 0
	start := traceOrigin + int64(w)*b.window
	end := start + b.window
	gap := float64(b.window) / (b.bp.Background * float64(b.limit))
	burst := int64(math.Round(b.bp.Burst * float64(b.limit)))
	for s := range uint32(b.bp.Sources) {
		for t := float64(start) + b.rng.ExpFloat64()*gap; t < float64(end); t += b.rng.ExpFloat64() * gap {
			b.buf = append(b.buf, event{at: int64(t), key: s, cost: 1})
		}
		// The burst after this window's start boundary, and the one before
		// its end boundary; both halves of a burst share one span.
		if b.bursts(s, w) {
			span := b.span(s, w)
			for i := range burst {
				b.buf = append(b.buf, event{at: start + i*span/burst, key: s, cost: 1})
			}
		}
		if w+1 < b.bp.Windows && b.bursts(s, w+1) {
			span := b.span(s, w+1)
			for i := range burst {
				b.buf = append(b.buf, event{at: end - span + i*span/burst, key: s, cost: 1})
			}
		}
	}
	slices.SortFunc(b.buf, func(x, y event) int {
		return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.key, y.key))
	})
}

// bursts reports whether source s bursts at the boundary that starts window
// w (never at the trace's start: the first window has no "before").
func (b *boundarySource) bursts(s uint32, w int) bool {
	return w > 0 && (w+int(s))%b.bp.Every == 0
}

// span returns the length of each half of source s's burst at the boundary
// starting window w, drawn from a hash of (seed, s, w) so that the windows
// on both sides agree without sharing the sequential generator.
func (b *boundarySource) span(s uint32, w int) int64 {
	h := splitmix(b.seed ^ splitmix(uint64(s)<<32|uint64(w)))
	frac := (0.05 + 0.95*float64(h>>11)/(1<<53)) * b.bp.MaxSpan
	return max(1, int64(frac*float64(b.window)))
}

func (b *boundarySource) name(k uint32) string { return sourceName(k) }
func (b *boundarySource) progress() (done, total int64) {
	perWindow := float64(b.bp.Sources) * (b.bp.Background*float64(b.limit) + 2*b.bp.Burst*float64(b.limit)/float64(b.bp.Every))
	return b.done, int64(perWindow * float64(b.bp.Windows))
}
func (b *boundarySource) unit() string { return "events" }

// splitmix is SplitMix64's finalizer: a well-mixed hash of x.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// describe returns a one-line description of a trace's shape.
func (sp steadyParams) describe() string {
	return fmt.Sprintf("%d Poisson sources, each at a rate drawn uniformly in [%g, %g]× the limit, for %d windows",
		sp.Sources, sp.Low, sp.High, sp.Windows)
}

func (bp boundaryParams) describe() string {
	return fmt.Sprintf("%d sources, Poisson background at %g× the limit, and at one boundary in %d a burst of %g× the limit on each side of the boundary within up to %g%% of a window, for %d windows",
		bp.Sources, bp.Background, bp.Every, bp.Burst, bp.MaxSpan*100, bp.Windows)
}

func (pp populationParams) describe(limit int64, window time.Duration) string {
	w, _ := pp.zipfWeights()
	return fmt.Sprintf("%d sources with Zipf(s=%g) Poisson rates, %d requests over %s; the source of rank %d sends exactly the limit, the %d above it are abusers (the first %.0f× over the limit), the rest are under it",
		pp.Sources, pp.S, pp.Requests, pp.duration(limit, window), pp.AtLimit, pp.AtLimit-1, w[0])
}
