package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// errBatcherClosed answers the calls still queued when the store closes.
var errBatcherClosed = errors.New("store closing")

// errNotSent marks a call that never reached Redis: its caller's time ran
// out while it waited for a flusher. It says nothing about Redis's health
// (the breaker does not count it), only that this instance is overloaded;
// the error wraps limiter.ErrOverloaded, not limiter.ErrUnavailable.
var errNotSent = fmt.Errorf("not sent: the request's time ran out while it waited for its turn: %w", limiter.ErrOverloaded)

// notSent is errNotSent for a call whose ctx ended: it wraps ctx's error
// too (a cancelled context is a client that went away, not an overload).
func notSent(ctx context.Context) error { return fmt.Errorf("%w (%w)", errNotSent, ctx.Err()) }

// Job states: a flusher and the caller race to move a queued job on; the
// winner decides whether the call reaches Redis.
const (
	queued int32 = iota
	sent
	dropped
)

// batcher sends the scripts of decisions to Redis. Flushers take the calls
// queued while earlier batches were in flight, group them by the node that
// owns their key, and write each group as one pipeline (EVALSHA each), read
// back in one go; each caller gets its own script's answer. It is safe for
// concurrent use.
//
// Time. A call's caller waits in the queue for as long as its context lets
// it; a call still queued when that runs out is dropped, never sent. Once a
// flusher takes a call, the call is sent whatever its caller does, and the
// time Redis is allowed starts then: the flusher sets the I/O deadline of
// the round trip (timeout, or probeTimeout when the batch carries a
// half-open probe) just before it hands the batch to go-redis, which takes a
// connection and writes at once (it also bounds each socket read and write
// by probeTimeout from when it starts them). go-redis's hooks would not
// measure better: a ProcessPipelineHook runs before the connection is taken.
// So a saturated instance, whose calls wait long for a flusher or for CPU
// before they are written, does not blame Redis for its own queue.
//
// A batch of one is sent with Script.Run. In a pipeline, go-redis neither
// reloads a missing script nor drops a connection that answered READONLY (a
// demoted primary), so a call that got NOSCRIPT or READONLY there is sent
// again alone with Script.Run, which does both: neither reply ran the script.
// A call whose reply is a cluster redirection (MOVED, ASK: the script did
// not run either) is sent on to the node it names (follow), within the same
// deadline.
type batcher struct {
	router       router
	lag          *lagMonitor
	timeout      time.Duration
	probeTimeout time.Duration
	max          int // calls per batch
	classify     func(error) outcome
	report       func(node *redis.Client, o outcome)
	queue        chan *job
	quit         chan struct{}
	sent         atomic.Uint64 // calls taken to be sent
	wg           sync.WaitGroup
}

// job is one script call. A flusher sets val and err and signals done
// (buffered: the flusher never waits for a caller that left).
type job struct {
	script *redis.Script
	keys   []string
	args   []any
	probe  bool
	val    []int64
	err    error
	o      outcome
	trip   trip
	done   chan struct{}
	state  atomic.Int32
}

// trip is what a call's round trips were, for a limiter.StoreObserver.
type trip struct {
	node              *redis.Client // the node that answered last; nil: none
	batch             int           // calls in its first round trip, itself included
	redirects, resent int
}

// newBatcher starts flushers flushers that send up to maxBatch calls per
// round trip, judge each call's error with classify and report each round
// trip's outcome per node.
func newBatcher(r router, lag *lagMonitor, timeout, probeTimeout time.Duration, flushers, maxBatch int,
	classify func(error) outcome, report func(*redis.Client, outcome)) *batcher {
	b := &batcher{
		router:       r,
		lag:          lag,
		timeout:      timeout,
		probeTimeout: probeTimeout,
		max:          maxBatch,
		classify:     classify,
		report:       report,
		queue:        make(chan *job, flushers*maxBatch),
		quit:         make(chan struct{}),
	}
	for range flushers {
		b.wg.Go(b.loop)
	}
	return b
}

// run queues script on key with args and waits for its answer. It returns
// errNotSent when ctx ends before a flusher took the call. Once the call is
// sent, it waits for the answer even past ctx's deadline (the answer comes
// within the I/O timeout, and Redis has counted the attempt: throwing the
// decision away would spend the budget on nobody), unless ctx is cancelled:
// the caller has gone. It also returns the round trip's outcome, for a
// probe's bookkeeping, and sets *t, when t is not nil, to what the call's
// round trips were.
func (b *batcher) run(ctx context.Context, script *redis.Script, key string, args []any, probe bool, t *trip) ([]int64, outcome, error) {
	if ctx.Err() != nil {
		return nil, abandoned, notSent(ctx)
	}
	j := &job{script: script, keys: []string{key}, args: args, probe: probe, done: make(chan struct{}, 1)}
	select {
	case b.queue <- j:
	case <-ctx.Done():
		return nil, abandoned, notSent(ctx)
	case <-b.quit:
		return nil, abandoned, errBatcherClosed
	}
	select {
	case <-j.done:
		return j.result(t)
	case <-ctx.Done():
	}
	if j.state.CompareAndSwap(queued, dropped) {
		return nil, abandoned, notSent(ctx)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		<-j.done // sent: bounded by the I/O timeout
		return j.result(t)
	}
	return nil, abandoned, ctx.Err()
}

// result returns j's answer once done, and its trip in *t when t is not
// nil.
func (j *job) result(t *trip) ([]int64, outcome, error) {
	if t != nil {
		*t = j.trip
	}
	return j.val, j.o, j.err
}

// loop is one flusher: it takes the first queued call, whatever else is
// queued up to the batch bound, and sends them, until quit.
func (b *batcher) loop() {
	batch := make([]*job, 0, b.max)
	for {
		select {
		case j := <-b.queue:
			batch = append(batch[:0], j)
			// Let the callers that are about to queue do so: larger
			// batches, fewer round trips.
			runtime.Gosched()
		fill:
			for len(batch) < b.max {
				select {
				case j := <-b.queue:
					batch = append(batch, j)
				default:
					break fill
				}
			}
			b.flush(batch)
			clear(batch)
		case <-b.quit:
			return
		}
	}
}

// flush sends the calls of batch that their callers still wait for, one
// round trip per node, concurrently, and answers each.
func (b *batcher) flush(batch []*job) {
	groups := map[*redis.Client][]*job{}
	for _, j := range batch {
		if !j.state.CompareAndSwap(queued, sent) {
			continue // its caller left before it was sent
		}
		b.sent.Add(1)
		node, err := b.router.nodeFor(context.Background(), j.keys[0])
		if err != nil { // no slot map: nothing was sent
			b.router.failed()
			answer(j, nil, failed, err)
			continue
		}
		groups[node] = append(groups[node], j)
	}
	if len(groups) == 1 {
		for node, jobs := range groups {
			b.send(node, jobs)
		}
		return
	}
	var wg sync.WaitGroup
	for node, jobs := range groups {
		wg.Go(func() { b.send(node, jobs) })
	}
	wg.Wait()
}

// send makes one round trip to node with jobs and answers them. The I/O
// deadline starts here, right before go-redis takes a connection and writes:
// the I/O timeout, plus twice how late this process has been running lately
// (a starved process reads a prompt reply late; the reply must not be lost
// to it), at most the probe timeout; the probe timeout for a probe.
func (b *batcher) send(node *redis.Client, jobs []*job) {
	timeout := b.timeout
	if b.lag != nil {
		timeout = min(b.timeout+2*b.lag.recent(), b.probeTimeout)
	}
	for _, j := range jobs {
		if j.probe {
			timeout = b.probeTimeout
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(jobs))
	for _, j := range jobs {
		j.trip = trip{node: node, batch: len(jobs)}
	}
	if len(jobs) == 1 {
		cmds[0] = runScript(ctx, node, false, jobs[0].script, jobs[0].keys, jobs[0].args...)
	} else {
		// Exec's error is the first command's error; each command has its own.
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, j := range jobs {
				cmds[i] = j.script.EvalSha(ctx, p, j.keys, j.args...)
			}
			return nil
		})
		for i, j := range jobs {
			if err := cmds[i].Err(); redis.HasErrorPrefix(err, "NOSCRIPT") || redis.IsReadOnlyError(err) {
				cmds[i] = runScript(ctx, node, false, j.script, j.keys, j.args...)
				j.trip.resent++
			}
		}
	}
	// One outcome per round trip: the worst of its calls.
	o := b.worst(cmds)
	if o == failed {
		b.router.failed()
	}
	b.report(node, o)
	redirected := false
	for i, j := range jobs {
		if addr, _ := redirection(cmds[i].Err(), node); addr == "" {
			continue
		}
		redirected = true
		_ = follow(ctx, b.router, b.report, b.classify, node, cmds[i].Err(), func(ctx context.Context, to *redis.Client, asking bool) error {
			cmds[i] = runScript(ctx, to, asking, j.script, j.keys, j.args...)
			j.trip.node = to
			j.trip.redirects++
			return cmds[i].Err()
		})
	}
	if redirected { // the answers' outcome: that of their last round trip
		o = b.worst(cmds)
	}
	for i, j := range jobs {
		answer(j, cmds[i], o, nil)
	}
}

// worst returns the worst outcome of cmds' replies.
func (b *batcher) worst(cmds []*redis.Cmd) outcome {
	o := succeeded
	for _, cmd := range cmds {
		if c := b.classify(cmd.Err()); c == failed || c == abandoned && o == succeeded {
			o = c
		}
	}
	return o
}

// answer sets j's result, from cmd when err is nil, and signals its caller.
func answer(j *job, cmd *redis.Cmd, o outcome, err error) {
	if err == nil {
		j.val, err = cmd.Int64Slice()
	}
	j.err, j.o = err, o
	j.done <- struct{}{}
}

// close stops the flushers, once their batches in flight are answered, and
// answers the calls still queued with an error.
func (b *batcher) close() {
	close(b.quit)
	b.wg.Wait()
	for {
		select {
		case j := <-b.queue:
			answer(j, nil, abandoned, errBatcherClosed)
		default:
			return
		}
	}
}
