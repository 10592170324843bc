package httpapi_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
)

func TestSpoofedForwardedForIsIgnoredByDefault(t *testing.T) {
	s := newServer(t, openMemory(t))
	for i, xff := range []string{"203.0.113.1", "203.0.113.2", "198.51.100.9, 203.0.113.3"} {
		w := s.do(req{method: http.MethodGet, target: "/ping", remote: "192.0.2.10:5555",
			header: map[string]string{"X-Forwarded-For": xff, "X-Real-IP": xff}})
		require.Equal(t, http.StatusOK, w.Code)
		b := decode(t, w)
		assert.Equal(t, "192.0.2.10", b["key"], "the peer address is the key")
		assert.Equal(t, float64(i+1), b["count"], "every forged address shares the peer's counter")
	}
	w := s.do(req{method: http.MethodGet, target: "/ping", remote: "192.0.2.10:6666", header: map[string]string{"X-Forwarded-For": "203.0.113.4"}})
	assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
}

func TestForwardedForIsHonouredFromTrustedProxiesOnly(t *testing.T) {
	clients, err := httplimit.NewClients(httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))
	require.NoError(t, err)
	s := newServer(t, openMemory(t), func(o *options) { o.Identity = &identity.Resolver{Clients: clients} })
	viaProxy := func(xff string) map[string]any {
		w := s.do(req{method: http.MethodGet, target: "/ping", remote: "10.1.2.3:4000", header: map[string]string{"X-Forwarded-For": xff}})
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		return decode(t, w)
	}
	a := viaProxy("203.0.113.1")
	assert.Equal(t, "203.0.113.1", a["key"])
	assert.Equal(t, 1.0, a["count"])
	b := viaProxy("203.0.113.2")
	assert.Equal(t, "203.0.113.2", b["key"])
	assert.Equal(t, 1.0, b["count"], "each forwarded client has its own counter")
	assert.Equal(t, 2.0, viaProxy("203.0.113.1")["count"])

	// X-Real-IP is not believed, even from a trusted proxy.
	w := s.do(req{method: http.MethodGet, target: "/ping", remote: "10.1.2.3:4000", header: map[string]string{"X-Real-IP": "203.0.113.9"}})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "10.1.2.3", decode(t, w)["key"])

	// The same header from an untrusted peer is ignored.
	w = s.do(req{method: http.MethodGet, target: "/ping", remote: "192.0.2.77:1", header: map[string]string{"X-Forwarded-For": "203.0.113.1"}})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "192.0.2.77", decode(t, w)["key"])
}

func TestClientKey(t *testing.T) {
	s := newServer(t, openMemory(t))
	w := s.do(req{method: http.MethodGet, target: "/ping", header: map[string]string{"X-Client-Key": "key-1"}})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "key-1", decode(t, w)["key"], "X-Client-Key wins over the address")

	w = s.do(req{method: http.MethodGet, target: "/ping", header: map[string]string{"X-Client-Key": ""}, remote: "192.0.2.5:1"})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "192.0.2.5", decode(t, w)["key"], "an empty X-Client-Key falls back to the address")

	w = s.do(req{method: http.MethodGet, target: "/ping", header: map[string]string{"X-Client-Key": "[::1]:80"}, remote: "[2001:db8::1]:443"})
	require.Equal(t, http.StatusOK, w.Code)

	w = s.do(req{method: http.MethodGet, target: "/ping", remote: "[2001:db8::1]:443"})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "2001:db8::/64", decode(t, w)["key"], "an IPv6 client is its /64")
	w = s.do(req{method: http.MethodGet, target: "/ping", remote: "[2001:db8::ffff:2]:443"})
	assert.Equal(t, 2.0, decode(t, w)["count"], "another address of the /64: the same budget")
	w = s.do(req{method: http.MethodGet, target: "/ping", remote: "[::ffff:192.0.2.5]:443"})
	assert.Equal(t, "192.0.2.5", decode(t, w)["key"], "an IPv4-mapped address is the IPv4 client")
	assert.Equal(t, 2.0, decode(t, w)["count"])

	for name, key := range map[string]string{
		"too long":      strings.Repeat("k", 1021),
		"invalid UTF-8": "a\xffb",
	} {
		w := s.do(req{method: http.MethodGet, target: "/ping", header: map[string]string{"X-Client-Key": key}})
		assertProblem(t, w, http.StatusBadRequest, "bad-request")
		assert.NotContains(t, w.Body.String(), key, name)
	}
	w = s.do(req{method: http.MethodGet, target: "/ping", header: map[string]string{"X-Client-Key": strings.Repeat("k", 1020)}})
	assert.Equal(t, http.StatusOK, w.Code, "MaxKeyLen bytes with the namespace is allowed")
	w = s.do(req{method: http.MethodGet, target: "/ping", header: map[string]string{"X-Client-Key": strings.Repeat("k", 1021)}})
	assert.Equal(t, "X-Client-Key is longer than 1020 bytes", assertProblem(t, w, http.StatusBadRequest, "bad-request")["detail"],
		"the bound named is the one on what the client sent")
}
