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

// idleBatcher is a batcher on srv whose flushers are not running, so that a
// test hands it batches itself.
func idleBatcher(t *testing.T, srv *redistest.Server) *batcher {
	t.Helper()
	s := openStore(t, srv, srv.Prefix(), WithMaxBatch(1))
	return &batcher{client: s.client, timeout: testTimeout, max: 8, queue: make(chan *job, 8), quit: make(chan struct{})}
}

// fixedJob is one fixed_window attempt of cost 1 on key (limit 100 per
// minute, server time), as Store.decide queues it.
func fixedJob(ctx context.Context, key string) *job {
	return &job{ctx: ctx, script: fixedWindowScript, keys: []string{key}, args: []any{"", "", int64(60), int64(100), int64(1)},
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
	b := idleBatcher(t, srv)
	key := srv.Prefix() + ":{batch}:ordered"
	jobs := []*job{fixedJob(t.Context(), key), fixedJob(t.Context(), key), fixedJob(t.Context(), key)}
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
	b := idleBatcher(t, srv)
	key := srv.Prefix() + ":{batch}:flushed"
	b.flush([]*job{fixedJob(t.Context(), key)}) // loads the script
	require.NoError(t, srv.Client().ScriptFlush(t.Context()).Err())
	jobs := []*job{fixedJob(t.Context(), key), fixedJob(t.Context(), key), fixedJob(t.Context(), key)}
	b.flush(jobs)
	assert.Equal(t, []int64{1, 2, 3}, counts(t, jobs))
}

// A call whose caller has gone before its batch leaves is answered with the
// caller's error and never reaches Redis; the others are sent.
func TestPipelineSkipsAbandonedCalls(t *testing.T) {
	srv := redistest.Start(t)
	b := idleBatcher(t, srv)
	key := srv.Prefix() + ":{batch}:abandoned"
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	jobs := []*job{fixedJob(t.Context(), key), fixedJob(gone, key), fixedJob(t.Context(), key)}
	b.flush(jobs)
	<-jobs[1].done
	require.ErrorIs(t, jobs[1].err, context.Canceled)
	assert.Nil(t, jobs[1].val)
	live := []*job{jobs[0], jobs[2]}
	assert.Equal(t, []int64{0, 1}, counts(t, live))
	vals, err := srv.Client().HVals(t.Context(), key).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"2"}, vals, "two attempts counted")
}

// A call whose deadline passes while it waits for a flusher never reached
// Redis: it fails as not sent, and the breaker does not count it as a
// failure of Redis (a saturated instance must not declare a healthy Redis
// dead). The batcher here has no flushers, so the call waits for sure.
func TestQueuedCallThatTimesOutIsNotARedisFailure(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, srv.Prefix(), WithMaxBatch(1), WithBreaker(1, time.Hour))
	s.timeout = 20 * time.Millisecond
	s.batch = &batcher{client: s.client, timeout: testTimeout, max: 8, queue: make(chan *job, 8), quit: make(chan struct{})}
	s.batch.jobs.New = func() any { return &job{keys: make([]string, 1), done: make(chan struct{}, 1)} }

	p := policy("queued", limiter.FixedWindow, 10, time.Minute)
	_, err := s.Allow(context.Background(), p, limiter.Request{Key: limiter.Key{Subject: srv.Prefix() + "q"}, Cost: 1, Now: base})
	require.ErrorIs(t, err, limiter.ErrUnavailable)
	require.ErrorIs(t, err, errNotSent)
	assert.False(t, s.Degraded(), "one failure would open this breaker; a call never sent is none")

	// The flusher's side: a call already expired when its batch leaves.
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	j := fixedJob(gone, srv.Prefix()+":{batch}:expired")
	s.batch.flush([]*job{j})
	<-j.done
	assert.ErrorIs(t, j.err, errNotSent)
	assert.False(t, j.sent.Load())
}

// Calls still queued when the store closes are answered, not left waiting.
func TestCloseAnswersQueuedCalls(t *testing.T) {
	srv := redistest.Start(t)
	b := idleBatcher(t, srv)
	jobs := []*job{fixedJob(t.Context(), "a"), fixedJob(t.Context(), "b")}
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
// and each caller's own error (its deadline) stays its own.
func TestBatchedBurstIsExact(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, srv.Prefix(), WithMaxBatch(16))
	p := policy("burst", limiter.FixedWindow, 50, time.Minute)
	assert.Equal(t, int64(50), burst(t, []*Store{s}, p, limiter.Key{Subject: "u"}, 300, base))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Allow(ctx, p, limiter.Request{Key: limiter.Key{Subject: "u"}, Cost: 1})
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, s.Degraded(), "a caller giving up is no failure of Redis")
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
