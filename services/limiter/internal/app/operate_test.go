package app

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// scrape returns the samples of GET /metrics by series ("name{labels}").
func scrape(t testing.TB, h http.Handler) map[string]float64 {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, w.Code)
	return samplesOf(t, w.Body)
}

// samplesOf returns the samples of a /metrics text by series ("name{labels}").
func samplesOf(t testing.TB, r io.Reader) map[string]float64 {
	t.Helper()
	samples := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		samples[line[:i]] = v
	}
	return samples
}

func TestMemoryStoreGauges(t *testing.T) {
	const maxKeys, clients = 64, 1000
	a := newApp(t, load(t, "--store=memory", fmt.Sprintf("--memory-max-keys=%d", maxKeys)), limitertest.NewClock(t0))
	before := scrape(t, a.Handler())
	assert.Equal(t, 0.0, before["tollgate_memory_keys"], "the start-up probe only peeks")
	assert.Equal(t, 0.0, before["tollgate_memory_evictions_total"])

	for i := range clients {
		code, _ := ping(t, a.Handler(), "client-"+strconv.Itoa(i))
		require.Equal(t, http.StatusOK, code)
	}
	m := scrape(t, a.Handler())
	keys, evictions := m["tollgate_memory_keys"], m["tollgate_memory_evictions_total"]
	assert.LessOrEqual(t, keys, float64(maxKeys), "the memory bound holds")
	assert.Positive(t, keys)
	assert.Equal(t, float64(clients), keys+evictions, "every key is held or was evicted")
	assert.NotContains(t, m, "tollgate_sqlite_file_bytes")
}

func TestSQLiteStoreGauges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gauges.db")
	a := newApp(t, load(t, "--sqlite-path", path), limitertest.NewClock(t0))
	for range 5 {
		ping(t, a.Handler(), "g") // one at a time: one batch each
	}
	m := scrape(t, a.Handler())

	var size int64
	for _, f := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			size += fi.Size()
		}
	}
	require.Positive(t, size)
	assert.Equal(t, float64(size), m["tollgate_sqlite_file_bytes"], "database plus WAL")
	assert.Equal(t, 5.0, m["tollgate_sqlite_writer_requests_total"], "the five decisions; the start-up probe only reads")
	assert.Equal(t, 5.0, m["tollgate_sqlite_writer_batches_total"])
	assert.Equal(t, 0.0, m["tollgate_sqlite_writer_replays_total"])
	assert.NotContains(t, m, "tollgate_memory_keys")
	assert.Equal(t, 0.0, m["tollgate_sqlite_disk_full"], "the reserve is in place")
	// What a full disk leaves behind: the reserve given to the database.
	require.NoError(t, os.Remove(path+"-reserve"))
	assert.Equal(t, 1.0, scrape(t, a.Handler())["tollgate_sqlite_disk_full"], "the reserve is gone")
}

// reloadFixture is an app on a YAML file that the test rewrites, reloaded
// through the same function SIGHUP calls.
type reloadFixture struct {
	app  *App
	file string
	logs *lines
}

// lines collects log lines, safe for concurrent writes.
type lines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// matching returns the lines that contain s.
func (l *lines) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.SplitSeq(l.buf.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func newReloadFixture(t *testing.T, yaml string, extra ...string) *reloadFixture {
	t.Helper()
	f := &reloadFixture{file: filepath.Join(t.TempDir(), "limiter.yaml"), logs: &lines{}}
	f.write(t, yaml)
	args := append([]string{"--config", f.file, "--store=memory"}, extra...)
	cfg := load(t, args...)
	loadAgain := func() (config.Config, error) { return config.Load(args, func(string) string { return "" }) }
	a, err := New(context.Background(), cfg, WithClock(limitertest.NewClock(t0)),
		WithLogger(NewLogger(cfg, f.logs)), WithReload(loadAgain, nil))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, a.Close()) })
	f.app = a
	return f
}

func (f *reloadFixture) write(t *testing.T, yaml string) {
	t.Helper()
	require.NoError(t, os.WriteFile(f.file, []byte(yaml), 0o600))
}

func TestReloadAppliesTheFilesPolicies(t *testing.T) {
	f := newReloadFixture(t, "policies:\n  ping: {limit: 3}\n")
	h := f.app.Handler()
	for range 3 {
		code, _ := ping(t, h, "r")
		require.Equal(t, http.StatusOK, code)
	}
	code, _ := ping(t, h, "r")
	require.Equal(t, http.StatusTooManyRequests, code)

	f.write(t, "policies:\n  ping: {limit: 5}\n")
	require.NoError(t, f.app.Reload(context.Background()))
	code, body := ping(t, h, "r")
	require.Equal(t, http.StatusOK, code, "the raised limit takes effect")
	assert.Equal(t, 5.0, body["limit"])
	require.Len(t, f.logs.matching("msg=reloaded"), 1)
	assert.Contains(t, f.logs.matching("msg=reloaded")[0], `policies.ping="fixed_window 5 per 1m0s"`)
	assert.Empty(t, f.logs.matching("restart"), "only policies changed")
	assert.Equal(t, 1.0, scrape(t, h)[`tollgate_config_reloads_total{result="success"}`])
}

func TestReloadRefusesABadFileAndKeepsThePolicies(t *testing.T) {
	f := newReloadFixture(t, "policies:\n  ping: {limit: 2}\n")
	h := f.app.Handler()
	for _, tt := range []struct{ name, yaml, field string }{
		{"bad limit", "policies:\n  ping: {limit: -1}\n", "policies.ping.limit"},
		{"unknown key", "policies:\n  ping: {limit: 9, burst: 3}\n", "policies.ping.burst"},
		{"unknown policy in a route", "routes:\n  ping: [nope]\n", "routes.ping[0]"},
		{"not YAML", "policies: [\n", f.file},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.logs.matching("reload refused"))
			f.write(t, tt.yaml)
			err := f.app.Reload(context.Background())
			require.ErrorIs(t, err, config.ErrInvalid)
			assert.Contains(t, err.Error(), tt.field)
			refused := f.logs.matching("reload refused")
			require.Len(t, refused, before+1, "one line per refused reload")
			assert.Contains(t, refused[before], tt.field)
		})
	}
	for i := 1; i <= 2; i++ {
		code, body := ping(t, h, "kept")
		require.Equal(t, http.StatusOK, code)
		assert.Equal(t, 2.0, body["limit"], "the running policies stay")
		assert.Equal(t, float64(i), body["count"])
	}
	code, _ := ping(t, h, "kept")
	assert.Equal(t, http.StatusTooManyRequests, code)
	m := scrape(t, h)
	assert.Equal(t, 4.0, m[`tollgate_config_reloads_total{result="failure"}`])
	assert.Equal(t, 0.0, m[`tollgate_config_reloads_total{result="success"}`])
}

// A reload may not bring a policy named like one derived from an Envoy
// descriptor: the two would share counters (the start refuses it too).
func TestReloadRefusesAPolicyNamedLikeAnEnvoyOne(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o600))
	f := newReloadFixture(t, "policies:\n  ping: {limit: 2}\n", "--envoy-config", dir)
	f.write(t, "policies:\n  ping: {limit: 9}\n  d.k: {algorithm: fixed_window, limit: 1000, window: 1s}\n")
	err := f.app.Reload(context.Background())
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Contains(t, err.Error(), "policies.d.k: an Envoy descriptor in "+dir+" derives the same policy name")
	_, body := ping(t, f.app.Handler(), "e")
	assert.Equal(t, 2.0, body["limit"], "the running policies stay")
}

// A reload reads the Envoy folder again: a raised limit applies to the next
// call (counts carry over: the policy keeps its name), and a broken file is
// refused with the YAML's policies, the running rules staying in force.
func TestReloadRereadsTheEnvoyFolder(t *testing.T) {
	dir := t.TempDir()
	rules := func(limit int) {
		body := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", limit)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(body), 0o600))
	}
	rules(1)
	f := newReloadFixture(t, "policies:\n  ping: {limit: 2}\n", "--envoy-config", dir)
	srv := httptest.NewServer(f.app.Handler())
	t.Cleanup(srv.Close)
	call := func() int {
		resp, _ := postJSON(t, srv, `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"x"}]}]}`)
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, call())
	assert.Equal(t, http.StatusTooManyRequests, call(), "limit 1")

	rules(3)
	require.NoError(t, f.app.Reload(context.Background()))
	assert.Equal(t, http.StatusOK, call(), "limit 3 now; the fixed window counted 2 already")
	assert.Equal(t, http.StatusTooManyRequests, call())

	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: d\ndescriptors: [\n"), 0o600))
	f.write(t, "policies:\n  ping: {limit: 9}\n")
	require.ErrorIs(t, f.app.Reload(context.Background()), config.ErrInvalid)
	_, body := ping(t, f.app.Handler(), "envoy-reload")
	assert.Equal(t, 2.0, body["limit"], "nothing of a refused reload applies")
}

func TestReloadWarnsAboutSettingsThatNeedARestart(t *testing.T) {
	f := newReloadFixture(t, "prune_interval: 1m\n")
	f.write(t, "prune_interval: 5m\nlog_format: json\npolicies:\n  ping: {limit: 4}\n")
	require.NoError(t, f.app.Reload(context.Background()))
	warned := f.logs.matching("apply only after a restart")
	require.Len(t, warned, 1)
	assert.Contains(t, warned[0], `settings="[PruneInterval LogFormat]"`)
	_, body := ping(t, f.app.Handler(), "w")
	assert.Equal(t, 4.0, body["limit"], "the policies were applied all the same")
}

func TestReloadWithoutASource(t *testing.T) {
	a := newApp(t, load(t, "--store=memory"), limitertest.NewClock(t0))
	require.ErrorIs(t, a.Reload(context.Background()), errNoReloadSource)
}

// TestReloadWhileServing reloads the file in a loop, alternating two
// limits, while goroutines send requests: none fails, and every key's count
// goes up by exactly one per request across the reloads.
func TestReloadWhileServing(t *testing.T) {
	const goroutines, each = 6, 100
	yaml := func(limit int) string {
		return fmt.Sprintf("policies:\n  api: {algorithm: fixed_window, limit: %d, window: 1h}\n", limit)
	}
	f := newReloadFixture(t, yaml(1_000_000))
	h := f.app.Handler()
	done := make(chan struct{})
	var reloader sync.WaitGroup
	reloader.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			f.write(t, yaml(1_000_000*(1+i%2)))
			if !assert.NoError(t, f.app.Reload(context.Background())) {
				return
			}
		}
	})
	var clients sync.WaitGroup
	for g := range goroutines {
		clients.Go(func() {
			for i := 1; i <= each; i++ {
				r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(fmt.Sprintf(`{"policy":"api","key":"k%d"}`, g)))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if !assert.Equal(t, http.StatusOK, w.Code, w.Body.String()) {
					return
				}
				assert.Contains(t, w.Body.String(), fmt.Sprintf(`"count":%d,`, i))
			}
		})
	}
	clients.Wait()
	close(done)
	reloader.Wait()
	assert.Positive(t, scrape(t, h)[`tollgate_config_reloads_total{result="success"}`])
	assert.Empty(t, f.logs.matching("reload refused"))
}

// The gateway rules are reloaded with the policies: a rule added, changed
// or removed takes effect without a restart, and logs no restart warning.
func TestReloadAppliesTheGatewayRules(t *testing.T) {
	const policies = "policies:\n  gw: {algorithm: fixed_window, limit: 1, window: 60s}\n"
	f := newReloadFixture(t, policies)
	h := f.app.Handler()
	ask := func(uri string) int {
		r := httptest.NewRequest(http.MethodGet, "/v1/forward-auth", nil)
		r.Header.Set("X-Forwarded-Uri", uri)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	assert.Equal(t, http.StatusOK, ask("/api/x"))
	assert.Equal(t, http.StatusOK, ask("/api/x"), "no rule yet: unlimited")

	f.write(t, policies+"gateway:\n  - {match: {path_prefix: /api/}, policies: [gw], key: global}\n")
	require.NoError(t, f.app.Reload(context.Background()))
	assert.Equal(t, http.StatusOK, ask("/api/x"))
	assert.Equal(t, http.StatusTooManyRequests, ask("/api/x"), "the new rule limits")
	assert.Equal(t, http.StatusOK, ask("/other/x"))

	f.write(t, policies+"gateway:\n  - {match: {path_prefix: /other/}, policies: [gw], key: global}\n")
	require.NoError(t, f.app.Reload(context.Background()))
	assert.Equal(t, http.StatusOK, ask("/api/x"), "the rule moved away")
	assert.Equal(t, http.StatusTooManyRequests, ask("/other/x"), "the same policy's budget, already spent")

	f.write(t, policies+"gateway:\n  - {match: {path_prefix: /api/}, policies: [nope], key: global}\n")
	require.Error(t, f.app.Reload(context.Background()))
	assert.Equal(t, http.StatusOK, ask("/api/x"), "a refused reload keeps the rules in force")
	assert.Empty(t, f.logs.matching("restart"), "gateway rules need no restart")
}
