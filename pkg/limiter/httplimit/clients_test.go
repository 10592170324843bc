package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// TestIPv6GroupedByPrefix: 100 requests from 100 addresses of one /64 at
// limit 3 are one client: 3 allowed, the rest refused; another /64 is
// another client.
func TestIPv6GroupedByPrefix(t *testing.T) {
	m, err := httplimit.New(closing(t, memstore.New()), []limiter.Policy{{Name: "api", Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Minute}},
		httplimit.WithClock(fixedClock(t0)))
	require.NoError(t, err)
	h := m.Handle(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	allowed := 0
	for i := range 100 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = fmt.Sprintf("[2001:db8:1:2:%x::%x]:443", i, i+1)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			allowed++
		}
	}
	assert.Equal(t, 3, allowed, "one /64 is one client")
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "[2001:db8:1:3::1]:443"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusOK, w.Code, "another /64 is another client")
}

// TestForwardedForWithPorts: a trusted proxy that writes the client's port
// into X-Forwarded-For keys each client by its own address, not by the
// proxy's.
func TestForwardedForWithPorts(t *testing.T) {
	key := httplimit.ClientAddr(prefixes(t, "192.0.2.1")...)
	for _, c := range []struct{ xff, want string }{
		{"203.0.113.7:5555", "203.0.113.7"},
		{"198.51.100.1, 203.0.113.8:5555", "203.0.113.8"},
		{"[2001:db8:5:6::1]:443", "2001:db8:5:6::/64"},
		{"[2001:db8:5:7::1]", "2001:db8:5:7::/64"},
		{"[::ffff:203.0.113.9]:80", "203.0.113.9"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("X-Forwarded-For", c.xff)
		got, err := key(r)
		require.NoError(t, err, c.xff)
		assert.Equal(t, c.want, got, c.xff)
	}
}

// TestBadForwardedEntry: an entry a trusted proxy wrote that is not an
// address is a 400 problem naming it, and spends nobody's budget: not the
// proxy's, which every client behind it would share.
func TestBadForwardedEntry(t *testing.T) {
	m, err := httplimit.New(closing(t, memstore.New()), []limiter.Policy{{Name: "api", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Minute}},
		httplimit.WithClock(fixedClock(t0)), httplimit.WithKey(httplimit.ClientAddr(prefixes(t, "127.0.0.1", "10.0.0.0/8")...)))
	require.NoError(t, err)
	b := serve(t, m)
	for _, xff := range []string{"unknown", "203.0.113.7, 10.0.0.9:x", "203.0.113.7:99999", "[203.0.113.7]", "_hidden, 10.0.0.2"} {
		a := get(t, b.url, map[string]string{"X-Forwarded-For": xff})
		require.Equal(t, http.StatusBadRequest, a.status, xff)
		assert.Contains(t, a.problem(t)["detail"], "X-Forwarded-For from a trusted proxy holds an entry that is not an address", xff)
	}
	a := get(t, b.url, nil)
	require.Equal(t, http.StatusOK, a.status, "the proxy's own budget is untouched")
	assert.Equal(t, "ok 127.0.0.1", a.body)
	a = get(t, b.url, map[string]string{"X-Forwarded-For": "203.0.113.7"})
	assert.Equal(t, "ok 203.0.113.7", a.body, "nor the client's whose entry comes before a bad one")

	key := httplimit.ClientAddr(prefixes(t, "10.0.0.0/8")...)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	r.Header["X-Forwarded-For"] = []string{"bad, 203.0.113.7", "10.0.0.2"}
	got, err := key(r)
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", got, "lines are one list, read from the right; the walk stops at the client")
	r.Header["X-Forwarded-For"] = []string{"203.0.113.7,,  ,10.0.0.2, "}
	got, err = key(r)
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", got, "empty entries are skipped")
	_, err = key(withXFF(r, "x"))
	require.ErrorIs(t, err, httplimit.ErrBadForwarded)
	assert.NotErrorIs(t, err, httplimit.ErrNoKey, "no fallback to another KeyFunc")
}

func withXFF(r *http.Request, v string) *http.Request {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", v)
	return r
}

// TestForwardedForIsBounded: only the 32 right-most entries are read: behind
// 40 trusted hops the client is the left-most of those read.
func TestForwardedForIsBounded(t *testing.T) {
	key := httplimit.ClientAddr(prefixes(t, "10.0.0.0/8")...)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	var hops []string
	for i := range 40 {
		hops = append(hops, fmt.Sprintf("10.0.0.%d", 100+i))
	}
	got, err := key(withXFF(r, "bad-never-read, "+strings.Join(hops, ",")))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.108", got)
}

func TestClientsOptions(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "[2001:db8:1:2:3:4:5:6]:443"
	for _, c := range []struct {
		bits int
		want string
	}{{56, "2001:db8:1::/56"}, {64, "2001:db8:1:2::/64"}, {128, "2001:db8:1:2:3:4:5:6"}, {1, "::/1"}} {
		cl, err := httplimit.NewClients(httplimit.IPv6Prefix(c.bits))
		require.NoError(t, err)
		got, err := cl.Key(r)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "/%d", c.bits)
	}
	for _, bits := range []int{0, -1, 129} {
		_, err := httplimit.NewClients(httplimit.IPv6Prefix(bits))
		assert.ErrorContains(t, err, "want 1..128", "/%d", bits)
	}

	mapped, err := httplimit.NewClients(httplimit.TrustProxies(netip.MustParsePrefix("::ffff:10.0.0.0/104")))
	require.NoError(t, err)
	r.RemoteAddr = "10.9.8.7:1"
	assert.True(t, mapped.PeerTrusted(r), "an IPv4-mapped range holds the IPv4 peers")
	got, err := mapped.Key(withXFF(r, "::ffff:203.0.113.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.1", got)
	r.RemoteAddr = "11.0.0.1:1"
	assert.False(t, mapped.PeerTrusted(r))
	assert.Equal(t, "198.51.100.2", mapped.AddrKey(netip.MustParseAddr("::ffff:198.51.100.2")))
	assert.Equal(t, "fe80::/64", mapped.AddrKey(netip.MustParseAddr("fe80::1%eth0")), "zones dropped")
}

// TestUnixSocketPeer: over a real Unix socket every request is answered,
// none with 400.
func TestUnixSocketPeer(t *testing.T) {
	m, err := httplimit.New(closing(t, memstore.New()), []limiter.Policy{{Name: "api", Algorithm: limiter.FixedWindow, Limit: 2, Window: time.Minute}},
		httplimit.WithClock(fixedClock(t0)))
	require.NoError(t, err)
	url := serveUnix(t, m.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.ResultFrom(r.Context())
		_, _ = io.WriteString(w, "ok "+res.Key)
	})))
	var codes []int
	for range 3 {
		a := unixGet(t, url, nil)
		codes = append(codes, a.status)
	}
	assert.Equal(t, []int{200, 200, 429}, codes, "the local peer is one client")
	a := unixGet(t, url, map[string]string{"X-Forwarded-For": "203.0.113.7"})
	assert.Equal(t, http.StatusTooManyRequests, a.status, "by default a Unix-socket peer is no proxy: its X-Forwarded-For is ignored")

	clients, err := httplimit.NewClients(httplimit.UnixSocketProxy())
	require.NoError(t, err)
	m, err = httplimit.New(closing(t, memstore.New()), []limiter.Policy{{Name: "api", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Minute}},
		httplimit.WithClock(fixedClock(t0)), httplimit.WithKey(clients.Key))
	require.NoError(t, err)
	url = serveUnix(t, m.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.ResultFrom(r.Context())
		_, _ = io.WriteString(w, "ok "+res.Key)
	})))
	for _, c := range []struct {
		xff    string
		status int
		body   string
	}{
		{"203.0.113.7", 200, "ok 203.0.113.7"},
		{"203.0.113.8:5555", 200, "ok 203.0.113.8"},
		{"203.0.113.7", 429, ""},
		{"", 200, "ok unix"},
		{"unknown", 400, ""},
	} {
		a := unixGet(t, url, map[string]string{"X-Forwarded-For": c.xff})
		assert.Equal(t, c.status, a.status, c.xff)
		if c.body != "" {
			assert.Equal(t, c.body, a.body, c.xff)
		}
	}
}

// serveUnix serves h on a Unix socket in a temporary folder and returns
// the socket's path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return path
}

// unixGet sends GET / over the Unix socket at path.
func unixGet(t *testing.T, path string, header map[string]string) answer {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	req, err := http.NewRequest(http.MethodGet, "http://local/", nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{resp.StatusCode, resp.Header, string(body)}
}

func TestAddrKey(t *testing.T) {
	for _, c := range []struct {
		in   string
		bits int
		want string
	}{
		{"1.2.3.4", 64, "1.2.3.4"},
		{"::ffff:1.2.3.4", 64, "1.2.3.4"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:fffe", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2::1", 128, "2001:db8:1:2::1"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"::1", 64, "::/64"},
	} {
		cl, err := httplimit.NewClients(httplimit.IPv6Prefix(c.bits))
		require.NoError(t, err)
		assert.Equal(t, c.want, cl.AddrKey(netip.MustParseAddr(c.in)), "%s /%d", c.in, c.bits)
	}
}
