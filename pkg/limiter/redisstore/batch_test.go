package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// idleBatcher is a batcher on s's Redis whose flushers are not running, so
// that a test hands it batches itself.
func idleBatcher(s *Store) *batcher {
	return &batcher{router: s.router, timeout: testTimeout, probeTimeout: testTimeout, max: 8,
		classify: s.classify, report: s.report, queue: make(chan *job, 8), quit: make(chan struct{})}
}

// fixedJob is one fixed_window attempt of cost 1 on key (limit 100 per
// minute, server time), as Store.decide queues it.
func fixedJob(key string) *job {
	return &job{script: fixedWindowScript, keys: []string{key}, args: []any{"", "", int64(60), int64(100), int64(1)},
		done: make(chan struct{}, 1)}
}

// counts returns each job's count before its attempt (the script's third
// value), requiring every job to have been answered without error.
func counts(t *testing.T, jobs []*job) []int64 {
	t.Helper()
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		select {
		case <-j.done:
		default:
			require.FailNow(t, "a job was not answered", "job %d", i)
		}
		require.NoError(t, j.err, "job %d", i)
		require.Len(t, j.val, 3, "job %d", i)
		out[i] = j.val[2]
	}
	return out
}

// One pipeline applies its scripts in order and answers each caller with its
// own script's result.
func TestPipelineAnswersEachCall(t *testing.T) {
	srv := redistest.Start(t)
	b := idleBatcher(openStore(t, srv, srv.Prefix()))
	key := srv.Prefix() + ":{batch}:ordered"
	jobs := []*job{fixedJob(key), fixedJob(key), fixedJob(key)}
	b.flush(jobs)
	assert.Equal(t, []int64{0, 1, 2}, counts(t, jobs))
}

// A script missing from the server's cache (SCRIPT FLUSH, a restart) is
// loaded by the calls that got NOSCRIPT in a pipeline: all are answered.
func TestPipelineReloadsFlushedScripts(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("SCRIPT FLUSH would empty the script cache of the server " + redistest.EnvURL + " names")
	}
	b := idleBatcher(openStore(t, srv, srv.Prefix()))
	key := srv.Prefix() + ":{batch}:flushed"
	b.flush([]*job{fixedJob(key)}) // loads the script
	require.NoError(t, srv.Client().ScriptFlush(t.Context()).Err())
	jobs := []*job{fixedJob(key), fixedJob(key), fixedJob(key)}
	b.flush(jobs)
	assert.Equal(t, []int64{1, 2, 3}, counts(t, jobs))
	for i, j := range jobs {
		assert.Equal(t, trip{node: j.trip.node, batch: 3, resent: 1}, j.trip, "job %d: one pipeline of three, then sent again alone", i)
		assert.NotNil(t, j.trip.node, "job %d", i)
	}
}

// A call whose caller left before its batch was sent is dropped: never sent,
// never answered; the others are sent.
func TestPipelineSkipsDroppedCalls(t *testing.T) {
	srv := redistest.Start(t)
	b := idleBatcher(openStore(t, srv, srv.Prefix()))
	key := srv.Prefix() + ":{batch}:dropped"
	jobs := []*job{fixedJob(key), fixedJob(key), fixedJob(key)}
	jobs[1].state.Store(dropped)
	b.flush(jobs)
	assert.Empty(t, jobs[1].done, "a dropped call is not answered")
	assert.Equal(t, []int64{0, 1}, counts(t, []*job{jobs[0], jobs[2]}))
	vals, err := srv.Client().HVals(t.Context(), key).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"2"}, vals, "two attempts counted")
}

// A call whose caller's time runs out while it waits for a flusher never
// reached Redis: it fails as overloaded, not unavailable, and the breaker
// does not count it (a saturated instance must not declare a healthy Redis
// dead). The batcher here has no flushers, so the call waits for sure.
func TestQueuedCallThatTimesOutIsOverloaded(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, srv.Prefix(), WithBreaker(BreakerConfig{Ratio: 0.01, MinCalls: 1, Interval: time.Minute, Cooldown: time.Hour, Probes: 1}))
	s.batch = idleBatcher(s)
	p := policy("queued", limiter.FixedWindow, 10, time.Minute)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := s.Allow(ctx, p, limiter.Request{Key: limiter.Key{Subject: "q"}, Cost: 1, Now: base})
	require.ErrorIs(t, err, limiter.ErrOverloaded)
	assert.NotErrorIs(t, err, limiter.ErrUnavailable)
	assert.False(t, s.Degraded(), "one failure would open this breaker; a call never sent is none")
	require.Len(t, s.batch.queue, 1)
	j := <-s.batch.queue
	assert.Equal(t, dropped, j.state.Load(), "the flusher would not send it")
}

// A decision Redis made is not thrown away because the caller's deadline
// passed while Redis worked: the call was sent, the answer is used. Redis is
// frozen (SIGSTOP) while the call is in flight, past the caller's deadline.
func TestLateDecisionIsKept(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("freezes Redis: needs a private redis-server")
	}
	s := openStore(t, srv, srv.Prefix())
	p := policy("late", limiter.FixedWindow, 10, time.Minute)
	k := limiter.Key{Subject: "u"}
	allow(t, s, p, k, 1, base) // a connection and the script cache are warm
	srv.Freeze()
	ctx := &deadlineCtx{Context: t.Context(), done: make(chan struct{})}
	type result struct {
		d   limiter.Decision
		err error
	}
	done := make(chan result, 1)
	sent := s.Stats().Calls
	go func() {
		d, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: base})
		done <- result{d, err}
	}()
	require.Eventually(t, func() bool { return s.Stats().Calls == sent+1 }, 10*time.Second, time.Millisecond)
	close(ctx.done) // the caller's deadline passes while Redis works
	srv.Thaw()
	r := <-done
	require.NoError(t, r.err, "the late answer is used")
	assert.True(t, r.d.Allowed)
	assert.Equal(t, int64(2), r.d.Count)
}

// Calls still queued when the store closes are answered, not left waiting.
func TestCloseAnswersQueuedCalls(t *testing.T) {
	srv := redistest.Start(t)
	b := idleBatcher(openStore(t, srv, srv.Prefix()))
	jobs := []*job{fixedJob("a"), fixedJob("b")}
	for _, j := range jobs {
		b.queue <- j
	}
	b.close()
	for _, j := range jobs {
		<-j.done
		assert.ErrorIs(t, j.err, errBatcherClosed)
	}
}

// Concurrent callers through the batching store are still counted exactly,
// and a caller that gave up gets its own error, which is no failure of Redis.
func TestBatchedBurstIsExact(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, srv.Prefix(), WithMaxBatch(16))
	p := policy("burst", limiter.FixedWindow, 50, time.Minute)
	assert.Equal(t, int64(50), burst(t, []*Store{s}, p, limiter.Key{Subject: "u"}, 300, base))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Allow(ctx, p, limiter.Request{Key: limiter.Key{Subject: "u"}, Cost: 1})
	require.ErrorIs(t, err, limiter.ErrOverloaded, "never sent")
	assert.False(t, s.Degraded())
}

// After Close, calls fail with ErrClosed at once.
func TestBatchingStoreClosed(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, srv.Prefix())
	require.NoError(t, s.Close())
	_, err := s.Allow(t.Context(), policy("c", limiter.TokenBucket, 5, time.Minute), limiter.Request{Key: limiter.Key{Subject: "u"}, Cost: 1})
	assert.ErrorIs(t, err, limiter.ErrClosed)
}

func TestMaxBatchMustBePositive(t *testing.T) {
	_, err := Open("redis://127.0.0.1:1/0", WithMaxBatch(0))
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

// deadlineCtx is a context whose deadline passes when the test closes done.
type deadlineCtx struct {
	context.Context
	done chan struct{}
}

func (c *deadlineCtx) Done() <-chan struct{} { return c.done }

func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
