package fallback

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// t0 is the tests' time.
var t0 = time.Date(2026, 1, 1, 0, 0, 45, 0, time.UTC)

// The three policies of the fallback tests, one per on_store_error mode.
var (
	closedPolicy = limiter.Policy{Name: "closed", Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Hour}
	openPolicy   = limiter.Policy{Name: "open", Algorithm: limiter.SlidingLog, Limit: 3, Window: time.Hour}
	localPolicy  = limiter.Policy{Name: "local", Algorithm: limiter.TokenBucket, Limit: 3, Window: time.Hour}
)

// fallbackRig is a fallback over a real Redis store whose breaker runs on a
// fake clock, with its log and metrics at hand.
type fallbackRig struct {
	srv     *redistest.Server
	breaker *limitertest.Clock // times the breaker's cooldown only
	f       *Store
	reg     *prometheus.Registry
	logs    *bytes.Buffer // written under slog's handler lock; read after the calls
}

const rigCooldown = time.Minute

func newFallbackRig(t *testing.T) *fallbackRig {
	t.Helper()
	srv := redistest.Start(t)
	clock := limitertest.NewClock(t0)
	primary, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(srv.Prefix()),
		redisstore.WithTimeout(5*time.Second), // refused dials fail at once; only a stall would wait
		redisstore.WithBreaker(redisstore.BreakerConfig{Ratio: 0.5, MinCalls: 1, Interval: time.Minute, Cooldown: rigCooldown, Probes: 1}), redisstore.WithBreakerClock(clock))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	logs := &bytes.Buffer{}
	f, err := New(primary, 1000, reg, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	f = f.WithPolicies([]limiter.Policy{closedPolicy, openPolicy, localPolicy}, modes(map[string]Mode{"open": FailOpen, "local": Local}))
	t.Cleanup(func() { _ = f.Close() })
	return &fallbackRig{srv: srv, breaker: clock, f: f, reg: reg, logs: logs}
}

// modes gives each policy its mode in m, fail_closed when m has none.
func modes(m map[string]Mode) func(string) Mode {
	return func(policy string) Mode {
		if mode, ok := m[policy]; ok {
			return mode
		}
		return FailClosed
	}
}

// key returns a key no other test shares, also on a shared Redis.
func (r *fallbackRig) key(name string) limiter.Key {
	return limiter.Key{Subject: r.srv.Prefix() + "-" + name}
}

func (r *fallbackRig) allow(p limiter.Policy, k limiter.Key) (limiter.Decision, error) {
	return r.f.Allow(context.Background(), p, limiter.Request{Key: k, Cost: 1, Now: t0})
}

// fallbacks returns policy p's tollgate_store_fallback_total.
func fallbacks(f *Store, p limiter.Policy) float64 {
	return testutil.ToFloat64(f.modes.used[p.Name].(prometheus.Collector))
}

// A reload changes a policy's mode: the next decision during the outage
// follows the new one, and a policy the reload added has its own.
func TestFallbackModesFollowAReload(t *testing.T) {
	r := newFallbackRig(t)
	r.srv.Stop()
	_, err := r.allow(closedPolicy, r.key("reload"))
	require.ErrorIs(t, err, limiter.ErrUnavailable, "fail_closed before the reload")

	added := limiter.Policy{Name: "added", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Hour}
	r.f = r.f.WithPolicies([]limiter.Policy{closedPolicy, added}, modes(map[string]Mode{
		"closed": FailOpen, "added": Local,
	}))

	d, err := r.allow(closedPolicy, r.key("reload"))
	require.NoError(t, err, "fail_open after the reload")
	assert.True(t, d.Allowed)
	for i, want := range []bool{true, false} {
		d, err := r.allow(added, r.key("reload"))
		require.NoError(t, err, "local, attempt %d", i)
		assert.Equal(t, want, d.Allowed, "the added policy limits locally")
	}
	assert.Equal(t, 1.0, fallbacks(r.f, closedPolicy))
	assert.Equal(t, 2.0, fallbacks(r.f, added))
}

// logLines counts the log lines containing s.
func (r *fallbackRig) logLines(s string) int {
	return strings.Count(r.logs.String(), s)
}

func TestFallbackFollowsEachPolicysModeDuringAnOutage(t *testing.T) {
	r := newFallbackRig(t)
	ctx := context.Background()
	k := r.key("outage")

	for _, p := range []limiter.Policy{closedPolicy, openPolicy, localPolicy} {
		d, err := r.allow(p, k)
		require.NoError(t, err, p.Name)
		assert.Equal(t, int64(2), d.Remaining, "%s: Redis counted the attempt", p.Name)
	}
	require.Equal(t, 0, r.logLines("store degraded"))

	r.srv.Stop()

	_, err := r.allow(closedPolicy, k)
	require.ErrorIs(t, err, limiter.ErrUnavailable, "fail_closed: the error goes back")
	_, err = r.f.Peek(ctx, closedPolicy, k, t0)
	require.ErrorIs(t, err, limiter.ErrUnavailable)

	for range 5 {
		d, err := r.allow(openPolicy, k)
		require.NoError(t, err, "fail_open")
		assert.Equal(t, limiter.Decision{Allowed: true, Limit: 3, Remaining: 3, WindowStart: t0}, d, "allowed, nothing counted")
	}
	_, err = r.f.Peek(ctx, openPolicy, k, t0)
	require.ErrorIs(t, err, limiter.ErrUnavailable, "fail_open has no state to show")

	var verdicts []bool
	for range 5 {
		d, err := r.allow(localPolicy, k)
		require.NoError(t, err, "local")
		verdicts = append(verdicts, d.Allowed)
	}
	assert.Equal(t, []bool{true, true, true, false, false}, verdicts,
		"local: the whole limit again, this instance alone (what Redis counted is not known here)")
	d, err := r.f.Peek(ctx, localPolicy, k, t0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), d.Remaining, "local Peek reads the local store")

	assert.Equal(t, 5.0, fallbacks(r.f, openPolicy))
	assert.Equal(t, 5.0, fallbacks(r.f, localPolicy), "refusals are fallback decisions too")
	assert.NotContains(t, r.f.modes.used, closedPolicy.Name, "fail_closed has no fallback counter")
	assert.Equal(t, 1, r.logLines("store degraded"), "one line, not one per call")
	assert.Equal(t, 0, r.logLines("store recovered"))
	require.Error(t, r.f.Ping(ctx), "ping fails while degraded")

	r.srv.Restart() // an empty Redis on the same port
	require.ErrorIs(t, r.f.Ping(ctx), limiter.ErrUnavailable, "the breaker fails fast until its cooldown is over")
	r.breaker.Advance(rigCooldown)
	require.NoError(t, r.f.Ping(ctx), "the probe closes the breaker")
	assert.Equal(t, 1, r.logLines("store recovered"))

	d, err = r.allow(localPolicy, k)
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Remaining, "Redis decides again, from its own (empty) state")
	keys, err := r.srv.Client().Keys(ctx, r.srv.Prefix()+":*").Result()
	require.NoError(t, err)
	assert.Len(t, keys, 1, "the attempt was written to Redis")
	assert.Equal(t, 5.0, fallbacks(r.f, localPolicy), "no fallback once Redis answers")
	assert.Equal(t, 1, r.logLines("store degraded"))
	assert.Equal(t, 1, r.logLines("store recovered"))
}

func TestFallbackNeverCoversBadInput(t *testing.T) {
	r := newFallbackRig(t)
	r.srv.Stop()
	for _, p := range []limiter.Policy{openPolicy, localPolicy} {
		_, err := r.f.Allow(context.Background(), p, limiter.Request{Key: r.key("bad"), Cost: 0, Now: t0})
		require.ErrorIs(t, err, limiter.ErrInvalidCost, p.Name)
		_, err = r.f.Allow(context.Background(), p, limiter.Request{Key: limiter.Key{}, Cost: 1, Now: t0})
		require.ErrorIs(t, err, limiter.ErrInvalidKey, p.Name)
		_, err = r.f.Peek(context.Background(), p, limiter.Key{}, t0)
		require.ErrorIs(t, err, limiter.ErrInvalidKey, p.Name)
		assert.Equal(t, 0.0, fallbacks(r.f, p), p.Name)
	}
	assert.Equal(t, 0, r.logLines("store degraded"), "bad input says nothing about the store")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.f.Allow(ctx, localPolicy, limiter.Request{Key: r.key("gone"), Cost: 1, Now: t0})
	require.Error(t, err, "a caller that gave up gets no fallback decision")
	assert.Equal(t, 0.0, fallbacks(r.f, localPolicy))
}

// TestFallbackLocalIsExactUnderConcurrency: during an outage, many
// goroutines on one key of a local policy get exactly the limit, and the
// degradation is logged once.
func TestFallbackLocalIsExactUnderConcurrency(t *testing.T) {
	r := newFallbackRig(t)
	r.srv.Stop()
	p := limiter.Policy{Name: "local", Algorithm: limiter.SlidingWindow, Limit: 37, Window: time.Hour}
	k := r.key("race")
	const attempts = 200
	var (
		allowed, refused atomic.Int64
		wg               sync.WaitGroup
	)
	errs := make(chan error, attempts)
	start := make(chan struct{})
	for range attempts {
		wg.Go(func() {
			<-start
			d, err := r.allow(p, k)
			switch {
			case err != nil:
				errs <- err
			case d.Allowed:
				allowed.Add(1)
			default:
				refused.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Equal(t, int64(37), allowed.Load())
	assert.Equal(t, int64(attempts-37), refused.Load())
	assert.Equal(t, float64(attempts), fallbacks(r.f, p))
	assert.Equal(t, 1, r.logLines("store degraded"))
}

func TestFallbackResetClearsTheLocalCopy(t *testing.T) {
	r := newFallbackRig(t)
	k := r.key("reset")
	r.srv.Stop()
	for range 3 {
		_, err := r.allow(localPolicy, k)
		require.NoError(t, err)
	}
	n, err := r.f.Reset(context.Background(), localPolicy, k)
	require.ErrorIs(t, err, limiter.ErrUnavailable, "the primary's error is reported")
	assert.Equal(t, int64(3), n, "the local bucket's 3 units are gone")
	d, err := r.allow(localPolicy, k)
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Remaining, "the local bucket starts full again")
}

func TestStoreFailed(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"no error", live, nil, false},
		{"unavailable", live, fmt.Errorf("redisstore: allow: %w: dial refused", limiter.ErrUnavailable), true},
		{"store deadline", live, fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"bad cost", live, fmt.Errorf("x: %w", limiter.ErrInvalidCost), false},
		{"bad key", live, limiter.ErrInvalidKey, false},
		{"bad policy", live, limiter.ErrInvalidPolicy, false},
		{"closed", live, limiter.ErrClosed, false},
		{"unsupported", live, limiter.ErrUnsupported, false},
		{"caller gone", done, fmt.Errorf("%w: %w", limiter.ErrUnavailable, context.Canceled), false},
		{"caller deadline", done, context.DeadlineExceeded, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, storeFailed(tt.ctx, tt.err))
		})
	}
}

// TestFallbackIgnoresOldNews: the outcome of a call that started before the
// call which changed the state does not change it back, so calls straddling
// an outage's start or end do not make the log flap.
func TestFallbackIgnoresOldNews(t *testing.T) {
	logs := &bytes.Buffer{}
	f, err := New(memstore.New(), 0, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	ctx := context.Background()
	down := fmt.Errorf("x: %w", limiter.ErrUnavailable)
	steps := []struct {
		ticket uint64
		err    error
		want   bool // down afterwards
	}{
		{1, nil, false},
		{3, down, true},
		{2, nil, true},  // started before ticket 3: old news
		{4, down, true}, // no change, no line
		{6, nil, false},
		{5, down, false}, // old news
		{7, fmt.Errorf("x: %w", limiter.ErrInvalidKey), false}, // says nothing
	}
	for _, s := range steps {
		f.observe(ctx, s.ticket, s.err)
		assert.Equal(t, s.want, f.down.Load(), "after ticket %d", s.ticket)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "store degraded"))
	assert.Equal(t, 1, strings.Count(logs.String(), "store recovered"))
}
