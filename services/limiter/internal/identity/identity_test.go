package identity_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
)

func digest(k string) string {
	d := sha256.Sum256([]byte(k))
	return hex.EncodeToString(d[:])
}

func req(peer string, kv ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr(peer), 1000).String()
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

func clients(t *testing.T, opts ...httplimit.ClientsOption) *httplimit.Clients {
	t.Helper()
	c, err := httplimit.NewClients(opts...)
	require.NoError(t, err)
	return c
}

func TestEachSourceIsItsOwnNamespace(t *testing.T) {
	rs := &identity.Resolver{}
	ping := []identity.Source{identity.Header, identity.Peer}
	viaHeader, err := rs.Resolve(req("127.0.0.1", "X-Client-Key", "127.0.0.3"), ping)
	require.NoError(t, err)
	viaPeer, err := rs.Resolve(req("127.0.0.3"), ping)
	require.NoError(t, err)
	assert.Equal(t, identity.Identity{Source: identity.Header, Key: "127.0.0.3", Subject: "key:127.0.0.3"}, viaHeader)
	assert.Equal(t, identity.Identity{Source: identity.Peer, Key: "127.0.0.3", Subject: "peer:127.0.0.3"}, viaPeer)
	assert.NotEqual(t, viaHeader.Subject, viaPeer.Subject, "an X-Client-Key equal to an address spends another budget than that address")

	user, err := rs.Resolve(req("127.0.0.1", "X-User-Id", "42"), []identity.Source{identity.User})
	require.NoError(t, err)
	assert.Equal(t, "user:42", user.Subject)
}

func TestHeadersFromTrustedProxiesOnly(t *testing.T) {
	rs := &identity.Resolver{Trust: identity.HeadersFromTrustedProxies, Clients: clients(t, httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))}
	ping := []identity.Source{identity.Header, identity.Peer}
	id, err := rs.Resolve(req("192.0.2.7", "X-Client-Key", "rotated-1"), ping)
	require.NoError(t, err)
	assert.Equal(t, "peer:192.0.2.7", id.Subject, "from an untrusted peer the header is ignored")
	id, err = rs.Resolve(req("10.1.2.3", "X-Client-Key", "tenant-a"), ping)
	require.NoError(t, err)
	assert.Equal(t, "key:tenant-a", id.Subject, "from a trusted proxy it is believed")
	id, err = rs.Resolve(req("::ffff:10.1.2.3", "X-Client-Key", "tenant-a"), ping)
	require.NoError(t, err)
	assert.Equal(t, "key:tenant-a", id.Subject, "IPv4-mapped proxy address")
	_, err = rs.Resolve(req("192.0.2.7", "X-User-Id", "42"), []identity.Source{identity.User})
	assert.ErrorIs(t, err, identity.ErrNoIdentity, "a user id from an untrusted peer is no identity")
}

func TestPeerUsesForwardedClientAndIPv6Prefix(t *testing.T) {
	rs := &identity.Resolver{Clients: clients(t, httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))}
	r := req("10.0.0.1", "X-Forwarded-For", "2001:db8:1:2:3:4:5:6")
	id, err := rs.Resolve(r, []identity.Source{identity.Peer})
	require.NoError(t, err)
	assert.Equal(t, "peer:2001:db8:1:2::/64", id.Subject)
	rs.Clients = clients(t, httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), httplimit.IPv6Prefix(56))
	id, err = rs.Resolve(r, []identity.Source{identity.Peer})
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1::/56", id.Key)
	id, err = rs.Resolve(req("::ffff:1.2.3.4"), []identity.Source{identity.Peer})
	require.NoError(t, err)
	assert.Equal(t, "peer:1.2.3.4", id.Subject)
}

func TestAPIKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(path, []byte("# operator keys\n\n"+digest("k-alpha")+"  alpha's key\n"+digest("k-beta")+"\n"), 0o600))
	keys, err := identity.LoadAPIKeys(path)
	require.NoError(t, err)
	assert.Equal(t, 2, keys.Len())
	rs := &identity.Resolver{APIKeys: keys}
	src := []identity.Source{identity.APIKey, identity.Peer}
	id, err := rs.Resolve(req("192.0.2.1", "X-Api-Key", "k-alpha"), src)
	require.NoError(t, err)
	assert.Equal(t, identity.APIKey, id.Source)
	assert.Equal(t, digest("k-alpha")[:16], id.Key, "the key itself is never shown or stored")
	assert.Equal(t, "api:"+digest("k-alpha")[:16], id.Subject)
	_, err = rs.Resolve(req("192.0.2.1", "X-Api-Key", "k-gamma"), src)
	assert.ErrorIs(t, err, identity.ErrUnknownAPIKey)
	id, err = rs.Resolve(req("192.0.2.1"), src)
	require.NoError(t, err)
	assert.Equal(t, identity.Peer, id.Source, "no API key: the next source")

	_, err = (&identity.Resolver{}).Resolve(req("192.0.2.1", "X-Api-Key", "k-alpha"), src)
	assert.ErrorIs(t, err, identity.ErrUnknownAPIKey, "no key file: every key unknown")

	for _, bad := range []string{"abc\n", digest("x")[:63] + "g\n"} {
		_, err := identity.ParseAPIKeys([]byte(bad), "keys")
		assert.ErrorContains(t, err, "keys line 1")
	}
	_, err = identity.LoadAPIKeys(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)
}

func TestRepeatedHeadersAreRefused(t *testing.T) {
	rs := &identity.Resolver{}
	_, err := rs.Resolve(req("127.0.0.1", "X-Client-Key", "a", "X-Client-Key", "b"), []identity.Source{identity.Header, identity.Peer})
	assert.ErrorIs(t, err, identity.ErrRepeated)
}

func TestParse(t *testing.T) {
	s, err := identity.ParseSources([]string{"header", " peer"})
	require.NoError(t, err)
	assert.Equal(t, []identity.Source{identity.Header, identity.Peer}, s)
	for _, bad := range [][]string{nil, {"ip"}, {"peer", "peer"}} {
		_, err := identity.ParseSources(bad)
		assert.Error(t, err, bad)
	}
	tr, err := identity.ParseTrust("trusted-proxies")
	require.NoError(t, err)
	assert.Equal(t, identity.HeadersFromTrustedProxies, tr)
	assert.Equal(t, "trusted-proxies", tr.String())
	_, err = identity.ParseTrust("everyone")
	assert.Error(t, err)
}
