package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/services/limiter/client"
)

// callTimeout is the per-call bound of tests that are not about timeouts:
// generous for a loaded machine.
const callTimeout = 10 * time.Second

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{client.WithTimeout(callTimeout)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// TestCheck: allowed up to the limit with the numbers counting down, then a
// refusal that is a decision, not an error; cost counts units.
func TestCheck(t *testing.T) {
	svc := startService(t)
	c := newClient(t, svc.url)
	ctx := context.Background()
	for i := range 3 {
		d, err := c.Check(ctx, "api", "alice", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "check %d", i)
		assert.False(t, d.Unavailable)
		assert.EqualValues(t, 3, d.Limit)
		assert.EqualValues(t, 2-i, d.Remaining)
		assert.EqualValues(t, i+1, d.Count)
		assert.Zero(t, d.RetryAfter)
	}
	d, err := c.Check(ctx, "api", "alice", 1)
	require.NoError(t, err, "a refusal is not an error")
	assert.False(t, d.Allowed)
	assert.False(t, d.Unavailable)
	assert.EqualValues(t, 0, d.Remaining)
	assert.EqualValues(t, 3, d.Count, "a refusal reports the count the service holds (sliding_log records no refused attempt)")
	assert.Positive(t, d.RetryAfter)
	assert.LessOrEqual(t, d.RetryAfter, time.Minute)

	d, err = c.Check(ctx, "api", "bob", 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.EqualValues(t, 0, d.Remaining, "a cost of 3 took the whole limit")
}

// TestProblems: a malformed request is a typed *Problem error and never
// allowed, even failing open.
func TestProblems(t *testing.T) {
	svc := startService(t)
	c := newClient(t, svc.url, client.WithFailureMode(client.FailOpen))
	cases := []struct {
		policy string
		cost   int64
		status int
		slug   string
	}{
		{"nope", 1, 404, "not-found"},
		{"api", 0, 422, "validation-failed"},
		{"api", 4, 422, "validation-failed"},
		{"", 1, 422, "validation-failed"},
	}
	for _, tc := range cases {
		d, err := c.Check(context.Background(), tc.policy, "k", tc.cost)
		var p *client.Problem
		require.ErrorAs(t, err, &p, "policy %q cost %d", tc.policy, tc.cost)
		assert.Equal(t, tc.status, p.Status)
		assert.Equal(t, "urn:tollgate:problem:"+tc.slug, p.Type)
		assert.NotEmpty(t, p.Detail)
		assert.NotErrorIs(t, err, client.ErrUnavailable)
		assert.Equal(t, client.Decision{}, d, "never allowed")
	}
}

// TestServiceStopped: once the service is gone, every call wraps
// ErrUnavailable and decides as the failure mode says, over HTTP and gRPC.
func TestServiceStopped(t *testing.T) {
	svc := startService(t)
	closed := newClient(t, svc.url)
	open := newClient(t, svc.url, client.WithFailureMode(client.FailOpen))
	envoyClosed := newEnvoy(t, svc.grpcAddr)
	envoyOpen := newEnvoy(t, svc.grpcAddr, client.WithFailureMode(client.FailOpen))
	ctx := context.Background()
	user := client.Descriptor{{Key: "user", Value: "u"}}

	d, err := closed.Check(ctx, "api", "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	e, err := envoyClosed.ShouldRateLimit(ctx, "shop", 1, user)
	require.NoError(t, err)
	require.True(t, e.Allowed)

	svc.stop()

	d, err = closed.Check(ctx, "api", "k", 1)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Equal(t, client.Decision{Allowed: false, Unavailable: true}, d)
	d, err = open.Check(ctx, "api", "k", 1)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Equal(t, client.Decision{Allowed: true, Unavailable: true}, d)

	e, err = envoyClosed.ShouldRateLimit(ctx, "shop", 1, user)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Equal(t, client.EnvoyDecision{Allowed: false, Unavailable: true}, e)
	e, err = envoyOpen.ShouldRateLimit(ctx, "shop", 1, user)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Equal(t, client.EnvoyDecision{Allowed: true, Unavailable: true}, e)
}

// TestStoreDownIs503: a service whose Redis is gone answers 503; the client
// reports it as unavailable, with the service's problem inside.
func TestStoreDownIs503(t *testing.T) {
	redis := redistest.Start(t)
	svc := startService(t, "--store=redis", "--redis-url="+redis.URL())
	c := newClient(t, svc.url)
	_, err := c.Check(context.Background(), "api", redis.Prefix(), 1)
	require.NoError(t, err)
	redis.Stop()
	d, err := c.Check(context.Background(), "api", redis.Prefix(), 1)
	require.ErrorIs(t, err, client.ErrUnavailable)
	var p *client.Problem
	require.ErrorAs(t, err, &p)
	assert.Equal(t, http.StatusServiceUnavailable, p.Status)
	assert.Equal(t, "urn:tollgate:problem:unavailable", p.Type)
	assert.Equal(t, client.Decision{Unavailable: true}, d)
}

// TestTimeout: a server that accepts connections and never answers costs a
// call its timeout, then the failure mode.
func TestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn) // held open, never read
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	c, err := client.New("http://"+ln.Addr().String(), client.WithTimeout(100*time.Millisecond), client.WithFailureMode(client.FailOpen))
	require.NoError(t, err)
	d, err := c.Check(context.Background(), "api", "k", 1)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, client.Decision{Allowed: true, Unavailable: true}, d)
}

// TestConnectionReuse: sequential and concurrent checks reuse the client's
// connections rather than dialling for each call.
func TestConnectionReuse(t *testing.T) {
	svc := startService(t)
	c := newClient(t, svc.url)
	var dials, reused atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if info.Reused {
				reused.Add(1)
			} else {
				dials.Add(1)
			}
		},
	})
	for i := range 20 {
		_, err := c.Check(ctx, "api", "reuse-"+string(rune('a'+i)), 1)
		require.NoError(t, err)
	}
	assert.EqualValues(t, 1, dials.Load(), "one connection for sequential calls")
	assert.EqualValues(t, 19, reused.Load())

	var wg sync.WaitGroup
	for range 3 {
		for i := range 16 {
			wg.Go(func() {
				_, err := c.Check(ctx, "api", "burst-"+string(rune('a'+i)), 1)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
	assert.LessOrEqual(t, dials.Load(), int64(1+16), "at most one connection per concurrent caller, kept between rounds")
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://h/", "http://"} {
		_, err := client.New(u)
		assert.Error(t, err, u)
	}
	_, err := client.New("http://127.0.0.1:1", client.WithTimeout(0))
	assert.Error(t, err)
	_, err = client.New("http://127.0.0.1:1", client.WithFailureMode(7))
	assert.Error(t, err)
	assert.False(t, errors.Is(err, client.ErrUnavailable))
}
