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
)

// flushers is how many batches may be in flight at once, each on its own
// connection. A flusher that is free takes whatever is queued, so a lone
// call waits for no one; under load calls queue while the flushers' batches
// are in flight and leave together in the next ones.
const flushers = 2

// errBatcherClosed answers the calls still queued when the store closes.
var errBatcherClosed = errors.New("store closing")

// errNotSent answers a call whose deadline passed while it waited for a
// flusher: it never reached Redis, so it says nothing about Redis's health
// (the breaker does not count it), only that this instance is saturated.
var errNotSent = errors.New("not sent: the deadline passed while the call waited for a batch")

// batcher sends the scripts of concurrent decisions to Redis together: the
// calls queued while earlier batches were in flight are written as one
// pipeline (EVALSHA each) and read back in one go, each caller getting its
// own script's answer. It is safe for concurrent use.
//
// A batch of one is sent with Script.Run, as an unbatched store would. In a
// pipeline, go-redis neither reloads a missing script nor drops a connection
// that answered READONLY (a demoted primary), so a call that got NOSCRIPT or
// READONLY there is sent again alone with Script.Run, which does both.
type batcher struct {
	client  *redis.Client
	timeout time.Duration // of one pipeline
	max     int           // calls per batch
	queue   chan *job
	quit    chan struct{}
	wg      sync.WaitGroup
	jobs    sync.Pool
}

// job is one script call. The caller owns it until it is queued; then a
// flusher sets val and err and signals done (buffered: the flusher never
// waits for a caller that gave up).
type job struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	val    []int64
	err    error
	done   chan struct{}
	sent   atomic.Bool // set by the flusher before it writes the call
}

func newBatcher(client *redis.Client, timeout time.Duration, maxBatch int) *batcher {
	b := &batcher{
		client:  client,
		timeout: timeout,
		max:     maxBatch,
		queue:   make(chan *job, flushers*maxBatch),
		quit:    make(chan struct{}),
	}
	b.jobs.New = func() any { return &job{keys: make([]string, 1), done: make(chan struct{}, 1)} }
	for range flushers {
		b.wg.Go(b.loop)
	}
	return b
}

// run queues script on key with args and waits for its answer, or for ctx.
func (b *batcher) run(ctx context.Context, script *redis.Script, key string, args []any) ([]int64, error) {
	j := b.jobs.Get().(*job)
	j.ctx, j.script, j.keys[0], j.args = ctx, script, key, args
	select {
	case b.queue <- j:
	case <-ctx.Done():
		b.release(j)
		return nil, fmt.Errorf("%w: %w", errNotSent, ctx.Err())
	case <-b.quit:
		b.release(j)
		return nil, errBatcherClosed
	}
	select {
	case <-j.done:
		val, err := j.val, j.err
		b.release(j)
		return val, err
	case <-ctx.Done():
		// A flusher still holds j and will answer on its buffered channel,
		// which nobody reads any more: j is not reused.
		if !j.sent.Load() {
			return nil, fmt.Errorf("%w: %w", errNotSent, ctx.Err())
		}
		return nil, ctx.Err()
	}
}

// release drops j's references and pools it.
func (b *batcher) release(j *job) {
	j.ctx, j.script, j.keys[0], j.args, j.val, j.err = nil, nil, "", nil, nil, nil
	j.sent.Store(false)
	b.jobs.Put(j)
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

// flush sends batch and answers each call. Calls whose callers have gone
// are answered without being sent.
func (b *batcher) flush(batch []*job) {
	live := make([]*job, 0, len(batch))
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil {
			b.answer(j, nil, fmt.Errorf("%w: %w", errNotSent, err))
			continue
		}
		j.sent.Store(true)
		live = append(live, j)
	}
	if len(live) == 1 {
		j := live[0]
		b.answer(j, j.script.Run(j.ctx, b.client, j.keys, j.args...), nil)
		return
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(live))
	// Exec's error is the first command's error; each command has its own.
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, j := range live {
			cmds[i] = j.script.EvalSha(ctx, p, j.keys, j.args...)
		}
		return nil
	})
	for i, j := range live {
		cmd := cmds[i]
		if err := cmd.Err(); redis.HasErrorPrefix(err, "NOSCRIPT") || redis.IsReadOnlyError(err) {
			cmd = j.script.Run(j.ctx, b.client, j.keys, j.args...)
		}
		b.answer(j, cmd, nil)
	}
}

// answer sets j's result, from cmd when err is nil, and signals its caller.
func (b *batcher) answer(j *job, cmd *redis.Cmd, err error) {
	if err == nil {
		j.val, err = cmd.Int64Slice()
	}
	j.err = err
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
			b.answer(j, nil, errBatcherClosed)
		default:
			return
		}
	}
}
