package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
	"github.com/tollgate/tollgate/services/limiter/internal/openapitest"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// t0 is 45 s into a minute, as in seed 000's example (docs/seeds.md): the
// current one-minute window started 45 s ago and ends in 15 s.
var t0 = time.Date(2026, 1, 1, 0, 0, 45, 0, time.UTC)

const adminKey = "test-admin-key-7f3a"

// The default policies of the seed routes (docs/seeds.md).
var (
	pingPolicy  = limiter.Policy{Name: "ping", Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Minute}
	checkPolicy = limiter.Policy{Name: "check", Algorithm: limiter.SlidingLog, Limit: 10, Window: time.Minute}
)

// storeKind opens a fresh store of one kind for a test.
type storeKind struct {
	name string
	open func(t testing.TB) limiter.Store
}

// sqliteDB is where a test's SQLite store keeps its file.
func sqliteDB(t testing.TB) string { return filepath.Join(t.TempDir(), "limiter.db") }

func openSQLite(t testing.TB) limiter.Store { return openSQLiteAt(t, sqliteDB(t)) }

func openSQLiteAt(t testing.TB, path string) limiter.Store {
	t.Helper()
	s, err := sqlitestore.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { closeStore(t, s) })
	return s
}

func openMemory(t testing.TB) limiter.Store {
	s := memstore.New()
	t.Cleanup(func() { closeStore(t, s) })
	return s
}

func closeStore(t testing.TB, s limiter.Store) {
	if err := s.Close(); err != nil && !errors.Is(err, limiter.ErrClosed) {
		t.Errorf("close store: %v", err)
	}
}

var stores = []storeKind{{"sqlite", openSQLite}, {"memory", openMemory}}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// options are what a test server is built from: the engine's options and
// the parts of its snapshots.
type options struct {
	httpapi.Options
	Policies              []limiter.Policy
	PingRoute, CheckRoute []string
	StoreName             string
	OffendersWindow       time.Duration
	OffendersRawKeys      bool
	// Envoy, when set, serves POST /json.
	Envoy *envoyrules.Rules
	// Gateway are the rules of /v1/forward-auth.
	Gateway []gateway.Rule
	// Identity, when set, names the clients (default: no trusted proxy).
	Identity *identity.Resolver
}

// server is one engine under test with its fake clock, store and logs.
type server struct {
	t         testing.TB
	engine    *gin.Engine
	clock     *limitertest.Clock
	store     limiter.Store
	logs      *syncBuffer
	opts      options
	current   *atomic.Pointer[snapshot.Snapshot]
	decisions *decide.Metrics
	refusals  *decide.Offenders
}

// newServer builds an engine on store with the default configuration, changed
// by the edit functions.
func newServer(t testing.TB, store limiter.Store, edit ...func(*options)) *server {
	t.Helper()
	s := &server{t: t, clock: limitertest.NewClock(t0), store: store, logs: &syncBuffer{}, current: &atomic.Pointer[snapshot.Snapshot]{}}
	s.opts = options{
		Options: httpapi.Options{
			AdminKey:          adminKey,
			AdminFailureStore: memstore.New(),
			Logger:            slog.New(slog.NewTextHandler(s.logs, nil)),
			Registry:          prometheus.NewRegistry(),
		},
		Policies:   []limiter.Policy{pingPolicy, checkPolicy},
		PingRoute:  []string{"ping"},
		CheckRoute: []string{"check"},
		StoreName:  "test",
	}
	for _, e := range edit {
		e(&s.opts)
	}
	var err error
	s.decisions, err = decide.NewMetrics(s.opts.Registry)
	require.NoError(t, err)
	s.refusals, err = decide.NewOffenders(s.opts.OffendersWindow, s.opts.OffendersRawKeys, nil)
	require.NoError(t, err)
	require.NoError(t, s.Reload(s.opts.Policies, s.opts.PingRoute, s.opts.CheckRoute))
	s.opts.Snapshot = s.current.Load
	s.engine, err = httpapi.New(s.opts.Options)
	require.NoError(t, err)
	return s
}

// Reload builds a snapshot of policies and routes on the server's store and
// publishes it, as the service's reload does; on error the one in force
// stays.
func (s *server) Reload(policies []limiter.Policy, pingRoute, checkRoute []string) error {
	snap, err := snapshot.New(snapshot.Parts{
		Policies: policies, PingRoute: pingRoute, CheckRoute: checkRoute,
		Store: s.store, StoreName: s.opts.StoreName, Clock: s.clock,
		Metrics: s.decisions, Offenders: s.refusals, Envoy: s.opts.Envoy, Gateway: s.opts.Gateway,
		Identity: s.opts.Identity,
	})
	if err != nil {
		return err
	}
	s.current.Store(snap)
	return nil
}

// req describes one request; RemoteAddr defaults to httptest's 192.0.2.1.
type req struct {
	method, target string
	body           string
	header         map[string]string
	remote         string
}

func (s *server) do(r req) *httptest.ResponseRecorder {
	s.t.Helper()
	hr := httptestRequest(r.method, r.target, r.body)
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	if r.remote != "" {
		hr.RemoteAddr = r.remote
	}
	return serve(s, hr)
}

// httptestRequest is httptest.NewRequest with an optional body.
func httptestRequest(method, target, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	return httptest.NewRequest(method, target, rd)
}

// serve runs r through the engine and checks the request and the answer
// against the OpenAPI document.
func serve(s *server, r *http.Request) *httptest.ResponseRecorder {
	s.t.Helper()
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(r.Body)
		require.NoError(s.t, err)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	w := httptest.NewRecorder()
	s.engine.ServeHTTP(w, r)
	err := openapitest.Service(s.t).Check(openapitest.Exchange{Request: r, RequestBody: body, Status: w.Code, Header: w.Header(), Body: w.Body.Bytes()})
	assert.NoError(s.t, err)
	return w
}

func (s *server) ping(key string) *httptest.ResponseRecorder {
	s.t.Helper()
	h := map[string]string{}
	if key != "" {
		h["X-Client-Key"] = key
	}
	return s.do(req{method: http.MethodGet, target: "/ping", header: h})
}

func (s *server) check(userID, endpoint string) *httptest.ResponseRecorder {
	s.t.Helper()
	body, err := json.Marshal(map[string]string{"endpoint": endpoint})
	require.NoError(s.t, err)
	return s.do(req{method: http.MethodPost, target: "/rate/check", body: string(body), header: map[string]string{"X-User-Id": userID}})
}

func (s *server) rateStatus(userID, endpoint string) *httptest.ResponseRecorder {
	s.t.Helper()
	return s.do(req{method: http.MethodGet, target: "/rate/status?endpoint=" + url.QueryEscape(endpoint), header: map[string]string{"X-User-Id": userID}})
}

// decode parses a JSON answer body into a map.
func decode(t testing.TB, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m), w.Body.String())
	return m
}

// assertProblem checks that w is an RFC 9457 problem of status and slug.
func assertProblem(t testing.TB, w *httptest.ResponseRecorder, status int, slug string) map[string]any {
	t.Helper()
	require.Equal(t, status, w.Code, w.Body.String())
	assert.Equal(t, httplimit.ProblemContentType, w.Header().Get("Content-Type"))
	m := decode(t, w)
	assert.Equal(t, httplimit.ProblemTypePrefix+slug, m["type"])
	assert.Equal(t, float64(status), m["status"])
	assert.Equal(t, http.StatusText(status), m["title"])
	assert.NotEmpty(t, m["detail"])
	return m
}

// countOf reads "count" from a 200 answer.
func countOf(t testing.TB, w *httptest.ResponseRecorder) float64 {
	t.Helper()
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	return decode(t, w)["count"].(float64)
}

// metrics returns the Prometheus text of GET /metrics.
func (s *server) metrics() string {
	s.t.Helper()
	w := s.do(req{method: http.MethodGet, target: "/metrics"})
	require.Equal(s.t, http.StatusOK, w.Code)
	return w.Body.String()
}

// with returns s reporting to t: fuzz targets build one server on the F and
// use it from each input's T.
func (s *server) with(t testing.TB) *server {
	c := *s
	c.t = t
	return &c
}

// burst sends n requests made by newRequest at once, each from its own
// goroutine released together, and counts the answers by status.
func burst(t *testing.T, client *http.Client, n int, newRequest func() (*http.Request, error)) map[int]int {
	t.Helper()
	codes := make(chan int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			r, err := newRequest()
			if !assert.NoError(t, err) {
				return
			}
			resp, err := client.Do(r)
			if !assert.NoError(t, err) {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	return got
}
