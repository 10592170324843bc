package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// An empty file (a tool caught mid-write) or one of several YAML documents
// is refused: the running limits stay instead of falling back to the
// defaults or to the first document.
func TestReloadRefusesEmptyAndMultiDocumentFiles(t *testing.T) {
	f := newReloadFixture(t, "policies:\n  ping: {limit: 100}\n", "--log-level=warn")
	for _, tt := range []struct{ name, yaml, want string }{
		{"empty", "", "is empty"},
		{"two documents", "policies:\n  ping: {limit: 100}\n---\npolicies:\n  ping: {limit: 1}\n", "more than one YAML document"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.write(t, tt.yaml)
			err := f.app.Reload(context.Background())
			require.ErrorIs(t, err, config.ErrInvalid)
			assert.ErrorContains(t, err, tt.want)
			_, body := ping(t, f.app.Handler(), "k-"+tt.name)
			assert.Equal(t, 100.0, body["limit"], "the running limit stays")
		})
	}
	assert.Len(t, f.logs.matching("reload refused"), 2, "logged at --log-level=warn")
}

// A reload may not drop a policy that a running route uses; taking it off
// the route first, then deleting it, works.
func TestReloadRefusesRemovingARoutedPolicy(t *testing.T) {
	f := newReloadFixture(t, `policies:
  burst: {algorithm: fixed_window, limit: 10, window: 1s}
routes:
  ping: [ping, burst]
`)
	f.write(t, "policies:\n  ping: {limit: 5}\n") // the burst policy and the routes lost
	err := f.app.Reload(context.Background())
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.EqualError(t, err, "config: policies.burst: missing, but the running route ping uses it; take it off routes.ping in one reload, then delete it in the next")
	_, body := ping(t, f.app.Handler(), "k")
	assert.Equal(t, 3.0, body["limit"], "the running ping policy stays")

	f.write(t, "policies:\n  ping: {limit: 5}\n  burst: {algorithm: fixed_window, limit: 10, window: 1s}\nroutes:\n  ping: [ping]\n")
	require.NoError(t, f.app.Reload(context.Background()), "off the route first")
	f.write(t, "policies:\n  ping: {limit: 5}\n")
	require.NoError(t, f.app.Reload(context.Background()), "then deleted")
	_, body = ping(t, f.app.Handler(), "k2")
	assert.Equal(t, 5.0, body["limit"])
}

// A reload that leaves the Envoy folder without any domain is refused
// unless the operator asks for it: every descriptor would be answered OK.
func TestReloadRefusesLosingEveryEnvoyDomain(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(map[bool]string{false: "refused", true: "allowed"}[allow], func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "d.yaml")
			require.NoError(t, os.WriteFile(file, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o600))
			extra := []string{"--envoy-config", dir}
			if allow {
				extra = append(extra, "--envoy-allow-empty-reload")
			}
			f := newReloadFixture(t, "policies:\n  ping: {limit: 2}\n", extra...)
			srv := httptest.NewServer(f.app.Handler())
			t.Cleanup(srv.Close)
			call := func() int {
				resp, _ := postJSON(t, srv, `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"x"}]}]}`)
				return resp.StatusCode
			}
			require.Equal(t, http.StatusOK, call())
			require.NoError(t, os.Remove(file))
			err := f.app.Reload(context.Background())
			if !allow {
				require.ErrorIs(t, err, config.ErrInvalid)
				assert.ErrorContains(t, err, "config: --envoy-config: "+dir+" holds no domain any more")
				assert.Equal(t, http.StatusTooManyRequests, call(), "the running rules stay")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, call(), "asked for: no rule any more")
		})
	}
}

// A reload that lowers a limit (or lengthens a window) says so at WARN,
// naming the policies; raising one does not.
func TestReloadWarnsWhenLimitsGoDown(t *testing.T) {
	f := newReloadFixture(t, "policies:\n  ping: {limit: 100}\n  api: {algorithm: token_bucket, limit: 10, window: 1m}\n", "--log-level=warn")
	f.write(t, "policies:\n  ping: {limit: 200}\n  api: {algorithm: token_bucket, limit: 10, window: 1m}\n")
	require.NoError(t, f.app.Reload(context.Background()))
	assert.Empty(t, f.logs.matching("lowers limits"), "raised")

	f.write(t, "policies:\n  ping: {limit: 3}\n  api: {algorithm: token_bucket, limit: 10, window: 1h}\n")
	require.NoError(t, f.app.Reload(context.Background()))
	warned := f.logs.matching("reload lowers limits")
	require.Len(t, warned, 1)
	assert.Contains(t, warned[0], "level=WARN")
	assert.Contains(t, warned[0], `policies="[api: 10 per 1m0s -> 10 per 1h0m0s ping: 200 per 1m0s -> 3 per 1m0s]"`)
}

// At start on Redis, a maxmemory-policy that can evict Tollgate's counters
// is a WARN; noeviction is not.
func TestRedisEvictionPolicyWarnsAtStart(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("sets maxmemory-policy: needs a private redis-server")
	}
	for policy, warns := range map[string]bool{"allkeys-lru": true, "volatile-ttl": true, "noeviction": false} {
		require.NoError(t, srv.Client().ConfigSet(context.Background(), "maxmemory-policy", policy).Err())
		logs := &lines{}
		cfg := load(t, "--store=redis", "--redis-url="+srv.URL(), "--redis-timeout=5s")
		a, err := New(context.Background(), cfg, WithLogger(NewLogger(cfg, logs)))
		require.NoError(t, err)
		require.NoError(t, a.Close())
		warned := logs.matching("redis may evict rate-limit counters")
		if !warns {
			assert.Empty(t, warned, policy)
			continue
		}
		require.Len(t, warned, 1, policy)
		assert.Contains(t, warned[0], "level=WARN")
		assert.Contains(t, warned[0], "maxmemory_policy="+policy)
	}
}

// serveFrom sends a request through h from the peer address remote.
func serveFrom(h http.Handler, method, target, body, remote string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.RemoteAddr = remote
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A reload that added a trusted_proxies range half-applied: X-User-Id from
// that range went from 400 to 200 while X-Forwarded-For was still judged
// by the old list, and the log said the setting applies only after a
// restart. It now applies to neither until a restart, as the warning
// says; and a setting a reload does apply (ipv6_prefix) is not in that
// warning.
func TestReloadAppliesASettingWhollyOrNotAtAll(t *testing.T) {
	// 192.0.2.1 (TEST-NET-1) sends nothing: under trusted-proxies a user
	// key needs some trusted proxy to start (see checkKeySources).
	f := newReloadFixture(t, "policies:\n  ping: {limit: 3}\ntrusted_proxies: [192.0.2.1]\n", "--identity-headers=trusted-proxies", "--ping-key=peer")
	h := f.app.Handler()
	check := func() int {
		return serveFrom(h, http.MethodPost, "/rate/check", `{"endpoint":"/e"}`, "10.1.1.1:1000", map[string]string{"X-User-Id": "42"}).Code
	}
	pingKey := func() string {
		w := serveFrom(h, http.MethodGet, "/ping", "", "10.1.1.1:1000", map[string]string{"X-Forwarded-For": "203.0.113.9"})
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		return decodeBody(t, w)["key"].(string)
	}
	require.Equal(t, http.StatusBadRequest, check(), "10.1.1.1 is no trusted proxy yet")
	require.Equal(t, "10.1.1.1", pingKey())

	f.write(t, "policies:\n  ping: {limit: 3}\ntrusted_proxies: [192.0.2.1, 10.0.0.0/8]\n")
	require.NoError(t, f.app.Reload(context.Background()))
	assert.Equal(t, http.StatusBadRequest, check(), "X-User-Id judged by the running list, as X-Forwarded-For is")
	assert.Equal(t, "10.1.1.1", pingKey())
	warned := f.logs.matching("apply only after a restart")
	require.Len(t, warned, 1)
	assert.Contains(t, warned[0], "TrustedProxies")

	f.write(t, "policies:\n  ping: {limit: 3}\ntrusted_proxies: [192.0.2.1, 10.0.0.0/8]\nipv6_prefix: 48\n")
	require.NoError(t, f.app.Reload(context.Background()))
	warned = f.logs.matching("apply only after a restart")
	require.Len(t, warned, 2)
	assert.NotContains(t, warned[1], "IPv6Prefix", "a reload applies ipv6_prefix")
	w := serveFrom(h, http.MethodGet, "/ping", "", "[2001:db8:1:2::1]:1000", nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, "2001:db8:1::/48", decodeBody(t, w)["key"])
}

// decodeBody parses a JSON answer's object.
func decodeBody(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), w.Body.String())
	return body
}
