package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/fallback"
	"github.com/tollgate/tollgate/services/limiter/internal/openapitest"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

// TestMain checks every request the tests send with http.Get, http.Post or
// http.DefaultClient, and every answer, against the OpenAPI document.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	checked, err := openapitest.NewCollector()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.DefaultTransport = checked.Wrap(http.DefaultTransport)
	code := m.Run()
	if err := checked.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: answers the OpenAPI document does not describe:\n%v\n", err)
		code = 1
	}
	os.Exit(code)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 45, 0, time.UTC)

// load returns the configuration for args with an empty environment.
func load(t testing.TB, args ...string) config.Config {
	t.Helper()
	cfg, err := config.Load(args, func(string) string { return "" })
	require.NoError(t, err)
	return cfg
}

// newApp builds an app and closes it at the end of the test.
func newApp(t testing.TB, cfg config.Config, clock limiter.Clock) *App {
	t.Helper()
	a, err := New(context.Background(), cfg, WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := a.Close(); err != nil && !errors.Is(err, limiter.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return a
}

// ping sends GET /ping for key through h and returns the status and body.
func ping(t testing.TB, h http.Handler, key string) (int, map[string]any) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/ping", nil)
	r.Header.Set("X-Client-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	return w.Code, body
}

func TestRestartOnTheSameSQLiteFileKeepsTheWindow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "dir", "limiter.db")
	cfg := load(t, "--sqlite-path", path)
	clock := limitertest.NewClock(t0)

	first, err := New(context.Background(), cfg, WithClock(clock))
	require.NoError(t, err, "the parent directory is created")
	for i := 1; i <= 2; i++ {
		code, body := ping(t, first.Handler(), "restart")
		require.Equal(t, http.StatusOK, code)
		assert.Equal(t, float64(i), body["count"])
	}
	require.NoError(t, first.Close())

	clock.Advance(10 * time.Second)
	second := newApp(t, cfg, clock)
	code, body := ping(t, second.Handler(), "restart")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, 3.0, body["count"], "the second instance continues the window")
	code, _ = ping(t, second.Handler(), "restart")
	assert.Equal(t, http.StatusTooManyRequests, code)
}

func TestStores(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		a := newApp(t, load(t, "--store=memory"), limitertest.NewClock(t0))
		code, body := ping(t, a.Handler(), "m")
		require.Equal(t, http.StatusOK, code)
		assert.Equal(t, 1.0, body["count"])
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		a := newApp(t, load(t, "--store=redis", "--redis-url="+srv.URL(), "--redis-timeout=5s"), limitertest.NewClock(t0))
		key := "app-test-" + srv.Prefix() // keys of a shared server stay apart and expire by themselves
		for i := 1; i <= 3; i++ {
			code, body := ping(t, a.Handler(), key)
			require.Equal(t, http.StatusOK, code)
			assert.Equal(t, float64(i), body["count"])
			assert.Equal(t, 15.0, body["reset_after"], "the app's clock decides")
		}
		code, _ := ping(t, a.Handler(), key)
		assert.Equal(t, http.StatusTooManyRequests, code)
	})
	t.Run("redis down at start serves degraded", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close()) // nothing listens there now
		a := newApp(t, load(t, "--store=redis", "--redis-url=redis://"+addr+"/0"), limitertest.NewClock(t0))
		code, body := ping(t, a.Handler(), "k")
		assert.Equal(t, http.StatusServiceUnavailable, code, "fail_closed, the default")
		assert.Equal(t, "urn:tollgate:problem:unavailable", body["type"])
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	})
	t.Run("sqlite path that cannot be created", func(t *testing.T) {
		blocker := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(blocker, nil, 0o600))
		_, err := New(context.Background(), load(t, "--sqlite-path", filepath.Join(blocker, "sub", "x.db")))
		require.Error(t, err)
		assert.NotErrorIs(t, err, config.ErrInvalid)
	})
}

func TestPrune(t *testing.T) {
	clock := limitertest.NewClock(t0)
	a := newApp(t, load(t, "--sqlite-path", filepath.Join(t.TempDir(), "p.db")), clock)
	h := a.Handler()
	ping(t, h, "old")
	ping(t, h, "old") // one window row
	r := httptest.NewRequest(http.MethodPost, "/rate/check", strings.NewReader(`{"endpoint":"/a"}`))
	r.Header.Set("X-User-Id", "1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r) // one event
	require.Equal(t, http.StatusOK, w.Code)

	n, err := a.Prune(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(0), n, "nothing has expired yet")

	clock.Advance(3 * time.Minute)
	n, err = a.Prune(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "the window row and the event")
	assert.Equal(t, 2.0, testutil.ToFloat64(a.pruned))
}

// TestPruneLoop runs the ticker in a synctest bubble: time is fake, the
// loop prunes once per interval and stops with its context.
func TestPruneLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := limitertest.NewClock(t0)
		a := newApp(t, load(t, "--store=memory"), clock)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			a.pruneLoop(ctx, time.Minute)
			close(done)
		}()
		ping(t, a.Handler(), "loop")
		clock.Advance(3 * time.Minute)

		time.Sleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, 0.0, testutil.ToFloat64(a.pruned), "not before the first tick")

		time.Sleep(time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, 1.0, testutil.ToFloat64(a.pruned), "the first tick pruned the expired window")

		cancel()
		<-done
	})
}

func TestUnknownStoreIsAConfigError(t *testing.T) {
	cfg := load(t, "--store=memory")
	cfg.Store = "etcd"
	_, err := New(context.Background(), cfg)
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Equal(t, `config: store: "etcd" is not one of sqlite, memory, redis`, err.Error())
}

// TestGracefulShutdownFinishesInFlightRequests holds a request inside its
// handler (the body is still arriving), starts the shutdown, and checks that
// the request completes and that Serve returns cleanly.
func TestGracefulShutdownFinishesInFlightRequests(t *testing.T) {
	a := newApp(t, load(t, "--sqlite-path", filepath.Join(t.TempDir(), "g.db")), limitertest.NewClock(t0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()

	// With Expect: 100-continue the client sends the body only once the
	// handler reads it, so the first Write below returns once the request
	// is inside the handler.
	body, bodyW := io.Pipe()
	r, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/rate/check", body)
	require.NoError(t, err)
	r.Header.Set("X-User-Id", "5")
	r.Header.Set("Expect", "100-continue")
	r.ContentLength = int64(len(`{"endpoint":"/slow"}`))
	client := &http.Client{Transport: openapitest.Service(t).Transport(func(err error) { t.Error(err) }, &http.Transport{ExpectContinueTimeout: time.Minute})}
	t.Cleanup(client.CloseIdleConnections)
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := client.Do(r)
		assert.NoError(t, err)
		answered <- resp
	}()
	_, err = bodyW.Write([]byte(`{"endpoint":`))
	require.NoError(t, err)

	stop()
	<-a.Stopping() // the listener is closed, the request is still in flight
	_, err = net.Dial("tcp", ln.Addr().String())
	require.Error(t, err, "no new connection is accepted during the shutdown")

	_, err = bodyW.Write([]byte(`"/slow"}`))
	require.NoError(t, err)
	require.NoError(t, bodyW.Close())
	resp := <-answered
	require.NotNil(t, resp)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the in-flight request completed")
	require.NoError(t, <-served)
}

// listening is the start-up log line Run writes, as JSON.
type listening struct {
	Msg      string
	Addr     string
	GRPCAddr string `json:"grpc_addr"`
	Config   map[string]any
}

// runLogged starts Run(cfg, opts) with a JSON logger and returns its
// listening line (decoded, and as text), and a stop function that cancels the run and
// returns Run's error. The rest of the log is drained so it never blocks.
func runLogged(t *testing.T, cfg config.Config, opts ...Option) (listening, string, func() error) {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, append([]Option{WithLogger(NewLogger(cfg, pw))}, opts...)...)
		_ = pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	var l listening
	for l.Msg != "listening" { // after the warnings of New, if any
		require.True(t, lines.Scan(), "Run logged no listening line")
		require.NoError(t, json.Unmarshal(lines.Bytes(), &l), lines.Text())
	}
	text := lines.Text()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	return l, text, func() error { stop(); return <-done }
}

func TestRunLogsAndStops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "limiter.db")
	cfg := load(t, "--addr=127.0.0.1:0", "--sqlite-path", path, "--log-format=json")
	cfg.AdminKey = "run-admin-secret"
	l, line, stop := runLogged(t, cfg)
	assert.Equal(t, "set", l.Config["admin_key"])
	assert.NotContains(t, line, "run-admin-secret")

	resp, err := http.Get("http://" + l.Addr + "/healthz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, stop())
	_, err = os.Stat(path)
	assert.NoError(t, err, "the database file was created")
}

func TestRunFailsWhenTheAddressIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = Run(context.Background(), load(t, "--store=memory", "--addr="+ln.Addr().String()))
	require.Error(t, err)
	assert.NotErrorIs(t, err, config.ErrInvalid)
	assert.Contains(t, err.Error(), "address already in use")
}

// TestFallbackModeOfEveryStoreErrorMode: each on_store_error the
// configuration accepts becomes the fallback's mode of the same meaning.
func TestFallbackModeOfEveryStoreErrorMode(t *testing.T) {
	for in, want := range map[config.StoreErrorMode]fallback.Mode{
		config.FailClosed: fallback.FailClosed,
		config.FailOpen:   fallback.FailOpen,
		config.Local:      fallback.Local,
	} {
		assert.Equal(t, want, fallbackMode(in), "on_store_error %s", in)
	}
}

// TestRootIsWarned: running as root (euid 0) is one WARN; another user
// none.
func TestRootIsWarned(t *testing.T) {
	log, logs := tlstest.NewLog()
	warnRoot(log, 65532)
	assert.Zero(t, logs.Count(`"level":"WARN"`), logs.String())
	warnRoot(log, 0)
	assert.Equal(t, 1, logs.Count(`"level":"WARN"`, "running as root (UID 0)"), logs.String())
}
