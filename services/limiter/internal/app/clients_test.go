package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

func send(t testing.TB, h http.Handler, method, target, body string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// With --internal-addr the public listener serves the seed routes and
// health only; the decision APIs, /metrics and every admin route are on the
// internal one. DELETE /rate/reset used to stay public, where wrong keys
// were throttled apart from /admin/offenders'.
func TestInternalListenerTakesTheDecisionAPIs(t *testing.T) {
	a := newApp(t, load(t, "--store=memory", "--internal-addr=127.0.0.1:0"), limitertest.NewClock(t0))
	pub, internal := a.Handler(), a.InternalHandler()
	require.NotNil(t, internal)
	v1 := `{"policy":"api","key":"k"}`
	for _, tc := range []struct {
		h            http.Handler
		method, path string
		want         int
	}{
		{pub, http.MethodGet, "/ping", 200},
		{pub, http.MethodGet, "/healthz", 200},
		{pub, http.MethodPost, "/v1/check", 404},
		{pub, http.MethodGet, "/metrics", 404},
		{pub, http.MethodGet, "/admin/offenders", 404},
		{pub, http.MethodDelete, "/rate/reset/1", 404},
		{internal, http.MethodDelete, "/rate/reset/1", 403},
		{internal, http.MethodPost, "/v1/check", 200},
		{internal, http.MethodGet, "/metrics", 200},
		{internal, http.MethodGet, "/admin/offenders", 403},
		{internal, http.MethodGet, "/healthz", 200},
		{internal, http.MethodGet, "/ping", 404},
	} {
		assert.Equal(t, tc.want, send(t, tc.h, tc.method, tc.path, v1, nil).Code, "%s %s", tc.method, tc.path)
	}
	b := newApp(t, load(t, "--store=memory"), limitertest.NewClock(t0))
	assert.Nil(t, b.InternalHandler())
	assert.Equal(t, 200, send(t, b.Handler(), http.MethodPost, "/v1/check", v1, nil).Code, "without --internal-addr: one listener")
}

// With --identity-headers trusted-proxies a rotated X-Client-Key from an
// untrusted peer spends the peer's budget; from the proxy it is believed.
func TestRotatedClientKeysFromUntrustedPeers(t *testing.T) {
	a := newApp(t, load(t, "--store=memory", "--identity-headers=trusted-proxies", "--trusted-proxies=10.0.0.0/8"), limitertest.NewClock(t0))
	codes := []int{}
	for i := range 5 {
		r := httptest.NewRequest(http.MethodGet, "/ping", nil)
		r.RemoteAddr = "192.0.2.1:1000"
		r.Header.Set("X-Client-Key", "rotated-"+strconv.Itoa(i))
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429}, codes, "one budget for the peer")
	r := httptest.NewRequest(http.MethodGet, "/ping", nil)
	r.RemoteAddr = "10.1.1.1:1000"
	r.Header.Set("X-Client-Key", "tenant-a")
	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, r)
	require.Equal(t, 200, w.Code)
	assert.Contains(t, w.Body.String(), `"key":"tenant-a"`)

	r = httptest.NewRequest(http.MethodPost, "/rate/check", strings.NewReader(`{"endpoint":"/a"}`))
	r.RemoteAddr = "192.0.2.1:1000"
	r.Header.Set("X-User-Id", "42")
	w = httptest.NewRecorder()
	a.Handler().ServeHTTP(w, r)
	assert.Equal(t, 400, w.Code, "an untrusted peer cannot assert a user id")
}

// api_key: a known key has its own budget, an unknown one is 401, and the
// digest file is read again on reload.
func TestAPIKeysAndTheirReload(t *testing.T) {
	digest := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte(digest("key-one")+"\n"), 0o600))
	args := []string{"--store=memory", "--ping-key=api_key,peer", "--api-keys-file=" + keys}
	cfg := load(t, args...)
	a, err := New(context.Background(), cfg, WithClock(limitertest.NewClock(t0)), WithReload(func() (config.Config, error) {
		return config.Load(args, func(string) string { return "" })
	}, nil))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	withKey := func(k string) *httptest.ResponseRecorder {
		return send(t, a.Handler(), http.MethodGet, "/ping", "", map[string]string{"X-Api-Key": k})
	}
	w := withKey("key-one")
	require.Equal(t, 200, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"key":"`+digest("key-one")[:16]+`"`, "the key's short name, never the key")
	assert.NotContains(t, w.Body.String(), "key-one")
	assert.Equal(t, 401, withKey("key-two").Code)
	assert.Equal(t, 200, send(t, a.Handler(), http.MethodGet, "/ping", "", nil).Code, "no key: the peer's budget")

	require.NoError(t, os.WriteFile(keys, []byte(digest("key-one")+"\n"+digest("key-two")+"\n"), 0o600))
	require.NoError(t, a.Reload(context.Background()))
	assert.Equal(t, 200, withKey("key-two").Code, "a key added to the file is accepted after a reload")
}

// An empty API-keys file, or one of comments only, was accepted at start
// and on reload without a word: every API-key client then got 401. It is
// refused unless --api-keys-allow-empty says it is meant; a refused reload
// keeps the running keys and logs why.
func TestEmptyAPIKeysFileIsRefused(t *testing.T) {
	digest := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	for _, empty := range []string{"", "# the keys go here\n\n"} {
		keys := filepath.Join(t.TempDir(), "keys")
		require.NoError(t, os.WriteFile(keys, []byte(empty), 0o600))
		args := []string{"--store=memory", "--ping-key=api_key,peer", "--api-keys-file=" + keys}
		_, err := New(context.Background(), load(t, args...))
		require.ErrorIs(t, err, config.ErrInvalid, "start with %q", empty)
		assert.EqualError(t, err, "config: api_keys_file: "+keys+" holds no key: every X-Api-Key would be refused (401); add digests, or set --api-keys-allow-empty to mean it")

		a := newApp(t, load(t, append(args, "--api-keys-allow-empty")...), limitertest.NewClock(t0))
		assert.Equal(t, http.StatusUnauthorized, send(t, a.Handler(), http.MethodGet, "/ping", "", map[string]string{"X-Api-Key": "key-one"}).Code, "allowed: no key accepted")
	}

	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte(digest("key-one")+"\n"), 0o600))
	f := newReloadFixture(t, "policies:\n  ping: {limit: 3}\n", "--ping-key=api_key,peer", "--api-keys-file="+keys)
	withKey := func() int {
		return send(t, f.app.Handler(), http.MethodGet, "/ping", "", map[string]string{"X-Api-Key": "key-one"}).Code
	}
	require.Equal(t, http.StatusOK, withKey())
	require.NoError(t, os.WriteFile(keys, []byte("# emptied by mistake\n"), 0o600))
	err := f.app.Reload(context.Background())
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Equal(t, http.StatusOK, withKey(), "the running keys stay")
	refused := f.logs.matching("reload refused")
	require.Len(t, refused, 1)
	assert.Contains(t, refused[0], "holds no key")
}

// A policy with its own memory bound keeps its keys through another
// policy's flood: unauthenticated /ping keys cannot push /rate/check state
// out.
func TestPolicyMemoryBoundKeepsCheckState(t *testing.T) {
	file := filepath.Join(t.TempDir(), "limiter.yaml")
	require.NoError(t, os.WriteFile(file, []byte("policies:\n  check: {memory_max_keys: 100}\n"), 0o600))
	a := newApp(t, load(t, "--store=memory", "--memory-max-keys=64", "--config="+file), limitertest.NewClock(t0))
	check := func() *httptest.ResponseRecorder {
		return send(t, a.Handler(), http.MethodPost, "/rate/check", `{"endpoint":"/orders"}`, map[string]string{"X-User-Id": "42"})
	}
	require.Equal(t, 200, check().Code)
	for i := range 2000 {
		ping(t, a.Handler(), "flood-"+strconv.Itoa(i))
	}
	w := check()
	require.Equal(t, 200, w.Code)
	assert.Contains(t, w.Body.String(), `"count":2`, "user 42's state survived 2,000 /ping keys")
}

// A catch-all trusted-proxy range is accepted but warned about.
func TestCatchAllTrustedProxyIsWarned(t *testing.T) {
	var logs bytes.Buffer
	cfg := load(t, "--store=memory", "--trusted-proxies=0.0.0.0/0,::/0,10.0.0.0/8")
	_, err := New(context.Background(), cfg, WithClock(limitertest.NewClock(t0)), WithLogger(NewLogger(cfg, &logs)))
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(logs.String(), "a trusted proxy range covers every address"), logs.String())
}

// A memory store full of exhausted keys evicts one anyway, counted and
// warned about; with --memory-refuse-when-full it refuses the new key.
func TestMemoryStoreFullOfExhaustedKeys(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		var logs bytes.Buffer
		args := []string{"--store=memory", "--memory-max-keys=64"}
		if refuse {
			args = append(args, "--memory-refuse-when-full")
		}
		cfg := load(t, args...)
		a, err := New(context.Background(), cfg, WithClock(limitertest.NewClock(t0)), WithLogger(NewLogger(cfg, &logs)))
		require.NoError(t, err)
		t.Cleanup(func() { a.Close() })
		for i := range 64 {
			for range 4 { // the fourth is refused: every key exhausted
				ping(t, a.Handler(), "k"+strconv.Itoa(i))
			}
		}
		// One key a shard (64 shards): new keys landing on a full shard meet
		// exhausted keys only.
		codes := map[int]int{}
		for i := range 64 {
			code, _ := ping(t, a.Handler(), "newcomer-"+strconv.Itoa(i))
			codes[code]++
		}
		m := scrape(t, a.Handler())
		if refuse {
			assert.Positive(t, codes[http.StatusTooManyRequests], "new keys refused")
			assert.Positive(t, m["tollgate_memory_refused_new_keys_total"])
			assert.Equal(t, 0.0, m["tollgate_memory_evictions_total"], "nothing live evicted")
			continue
		}
		assert.Equal(t, 64, codes[http.StatusOK], "every new key admitted")
		assert.Positive(t, m["tollgate_memory_refused_evictions_total"])
		assert.Contains(t, logs.String(), "the memory store evicted exhausted keys")
	}
}

// --rate-key api_key,user: /rate/check and /rate/status count a known API
// key's budget, answer 401 for an unknown one, fall back to X-User-Id
// without a key, and keep the two namespaces apart.
func TestRateRoutesKeyedByAPIKey(t *testing.T) {
	digest := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte(digest("key-one")+"\n"), 0o600))
	a := newApp(t, load(t, "--store=memory", "--rate-key=api_key,user", "--api-keys-file="+keys), limitertest.NewClock(t0))
	check := func(header map[string]string) *httptest.ResponseRecorder {
		return send(t, a.Handler(), http.MethodPost, "/rate/check", `{"endpoint":"/orders"}`, header)
	}
	short := digest("key-one")[:16]
	for i := 1; i <= 3; i++ {
		w := check(map[string]string{"X-Api-Key": "key-one", "X-User-Id": "42"})
		require.Equal(t, 200, w.Code, w.Body.String())
		assert.Contains(t, w.Body.String(), `"key":"`+short+`"`)
		assert.Contains(t, w.Body.String(), `"count":`+strconv.Itoa(i))
		assert.NotContains(t, w.Body.String(), "user_id", "the API key is the client, not X-User-Id")
	}
	w := send(t, a.Handler(), http.MethodGet, "/rate/status?endpoint=/orders", "", map[string]string{"X-Api-Key": "key-one"})
	require.Equal(t, 200, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"count":3`)

	w = check(map[string]string{"X-Api-Key": "key-two"})
	assert.Equal(t, 401, w.Code)
	assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	assert.Equal(t, 401, send(t, a.Handler(), http.MethodGet, "/rate/status?endpoint=/orders", "", map[string]string{"X-Api-Key": "key-two"}).Code)

	w = check(map[string]string{"X-User-Id": "42"})
	require.Equal(t, 200, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"user_id":42`)
	assert.Contains(t, w.Body.String(), `"count":1`, "user 42 did not pay for the API key's checks")
	assert.Equal(t, 400, check(nil).Code, "neither source applies")
}

// The default is seed 001's: X-User-Id only; an API key does not replace it.
func TestRateRoutesKeyedByUserByDefault(t *testing.T) {
	a := newApp(t, load(t, "--store=memory"), limitertest.NewClock(t0))
	w := send(t, a.Handler(), http.MethodPost, "/rate/check", `{"endpoint":"/orders"}`, map[string]string{"X-Api-Key": "whatever"})
	assert.Equal(t, 400, w.Code)
	assert.Contains(t, w.Body.String(), "X-User-Id")
	w = send(t, a.Handler(), http.MethodPost, "/rate/check", `{"endpoint":"/orders"}`, map[string]string{"X-User-Id": "42"})
	require.Equal(t, 200, w.Code)
	assert.Contains(t, w.Body.String(), `{"result":"ok","user_id":42,"endpoint":"/orders"`)
}

// pingFrom sends GET /ping from remote with X-Forwarded-For xff (none when
// empty) and returns the answer.
func pingFrom(t *testing.T, h http.Handler, remote, xff string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/ping", nil)
	r.RemoteAddr = remote
	if xff != "" {
		r.Header.Set("X-Forwarded-For", xff)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Behind a trusted proxy that writes ports into X-Forwarded-For, each
// client is keyed by its own address (IPv6 by its prefix); an entry that is
// not an address is a 400, and charges neither the proxy nor anyone.
func TestForwardedEntriesWithPortsAndBadOnes(t *testing.T) {
	a := newApp(t, load(t, "--store=memory", "--trusted-proxies=10.0.0.0/8", "--ipv6-prefix=48"), limitertest.NewClock(t0))
	h := a.Handler()
	for _, c := range []struct{ xff, key string }{
		{"203.0.113.7:5555", "203.0.113.7"},
		{"198.51.100.1, 203.0.113.8:443", "203.0.113.8"},
		{"[2001:db8:5:6::1]:443", "2001:db8:5::/48"},
		{"2001:db8:5:7::1", "2001:db8:5::/48"},
	} {
		w := pingFrom(t, h, "10.0.0.1:1000", c.xff)
		require.Equal(t, 200, w.Code, c.xff)
		assert.Contains(t, w.Body.String(), `"key":"`+c.key+`"`, c.xff)
	}
	for _, xff := range []string{"unknown", "203.0.113.9, _obf", "203.0.113.9:99999"} {
		w := pingFrom(t, h, "10.0.0.1:1000", xff)
		assert.Equal(t, 400, w.Code, xff)
		assert.Contains(t, w.Body.String(), "X-Forwarded-For from a trusted proxy holds an entry that is not an address", xff)
	}
	w := pingFrom(t, h, "10.0.0.1:1000", "")
	require.Equal(t, 200, w.Code)
	assert.Contains(t, w.Body.String(), `"count":1,`, "the proxy's own budget was not spent")
}

// /status?key=<address> reads the counter /ping spends for that address:
// the same --ipv6-prefix grouping.
func TestStatusKeyHonoursIPv6Prefix(t *testing.T) {
	a := newApp(t, load(t, "--store=memory", "--ipv6-prefix=48"), limitertest.NewClock(t0))
	h := a.Handler()
	w := pingFrom(t, h, "[2001:db8:1:2::1]:443", "")
	require.Equal(t, 200, w.Code)
	require.Contains(t, w.Body.String(), `"key":"2001:db8:1::/48"`)
	for _, key := range []string{"2001:db8:1:2::1", "2001:db8:1:ffff::9", "2001:db8:1::/48"} {
		w = send(t, h, http.MethodGet, "/status?key="+key, "", nil)
		require.Equal(t, 200, w.Code, key)
		assert.Contains(t, w.Body.String(), `"count":1,`, key)
	}
}

// A reload that drops api_keys_file while --ping-key still names api_key
// was applied: from then on every X-Api-Key was judged against no key
// (issue 35). It is refused naming the setting; the running keys stay.
func TestReloadWithoutTheKeysFileOfAnAPIKeySourceIsRefused(t *testing.T) {
	digest := sha256.Sum256([]byte("key-one"))
	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte(hex.EncodeToString(digest[:])+"\n"), 0o600))
	f := newReloadFixture(t, "policies:\n  ping: {limit: 3}\napi_keys_file: "+keys+"\n", "--ping-key=api_key,peer")
	withKey := func() int {
		return send(t, f.app.Handler(), http.MethodGet, "/ping", "", map[string]string{"X-Api-Key": "key-one"}).Code
	}
	require.Equal(t, http.StatusOK, withKey())
	f.write(t, "policies:\n  ping: {limit: 3}\n")
	err := f.app.Reload(context.Background())
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.EqualError(t, err, "config: --ping-key: api_key needs --api-keys-file (the digests of the accepted X-Api-Key values): without it every X-Api-Key would be refused (401)")
	assert.Equal(t, http.StatusOK, withKey(), "the running keys stay")
	require.Len(t, f.logs.matching("reload refused"), 1)
}
