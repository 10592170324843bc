package httplimit_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

// t0 is 45 s into a minute: the current one-minute window ends in 15 s.
var t0 = time.Date(2026, 1, 1, 0, 0, 45, 0, time.UTC)

// storeTimeout bounds each Redis call; long enough for a loaded machine.
const storeTimeout = 5 * time.Second

// storeKind opens a fresh store of one kind for a test.
type storeKind struct {
	name string
	open func(t *testing.T) limiter.Store
}

var stores = []storeKind{
	{"memory", func(t *testing.T) limiter.Store { return closing(t, memstore.New()) }},
	{"sqlite", func(t *testing.T) limiter.Store {
		s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "limiter.db"))
		require.NoError(t, err)
		return closing(t, s)
	}},
	{"redis", func(t *testing.T) limiter.Store { return openRedis(t, redistest.Start(t)) }},
}

// openRedis opens a store on srv that takes the time from the caller (the
// fake clock) rather than from Redis.
func openRedis(t *testing.T, srv *redistest.Server) limiter.Store {
	t.Helper()
	s, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(srv.Prefix()), redisstore.WithClientTime(), redisstore.WithTimeout(storeTimeout))
	require.NoError(t, err)
	return closing(t, s)
}

func closing(t *testing.T, s limiter.Store) limiter.Store {
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, limiter.ErrClosed) {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

// fixedClock is a clock that never moves.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// backend is a real HTTP server behind the middleware: its handler counts
// the requests that reached it and answers "ok <key>".
type backend struct {
	url     string
	reached atomic.Int64
}

func serve(t *testing.T, m *httplimit.Middleware) *backend {
	t.Helper()
	b := &backend{}
	srv := httptest.NewServer(m.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.reached.Add(1)
		key := "-"
		if res, ok := httplimit.ResultFrom(r.Context()); ok {
			key = res.Key
		}
		_, _ = io.WriteString(w, "ok "+key)
	})))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b
}

// client is shared by the tests: enough idle connections for the bursts.
var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}

// answer is a response with its body read.
type answer struct {
	status int
	header http.Header
	body   string
}

func get(t testing.TB, url string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{resp.StatusCode, resp.Header, string(body)}
}

// problem decodes a problem document answer.
func (a answer) problem(t testing.TB) map[string]any {
	t.Helper()
	require.Equal(t, httplimit.ProblemContentType, a.header.Get("Content-Type"), a.body)
	var m map[string]any
	require.NoError(t, json.NewDecoder(strings.NewReader(a.body)).Decode(&m))
	return m
}
