package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

func prefixes(t *testing.T, list ...string) []netip.Prefix {
	t.Helper()
	ps, err := httplimit.ParsePrefixes(list)
	require.NoError(t, err)
	return ps
}

// TestClientAddrOverTheWire: through a real server, whose peer is 127.0.0.1,
// forged forwarding headers change nothing unless 127.0.0.1 is a trusted
// proxy; then X-Forwarded-For names the client, and each client has its own
// budget.
func TestClientAddrOverTheWire(t *testing.T) {
	forged := map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Real-IP": "203.0.113.10", "Forwarded": "for=203.0.113.11"}
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			one := limiter.Policy{Name: "one", Algorithm: limiter.SlidingLog, Limit: 1, Window: time.Minute}
			store := sk.open(t)

			untrusting, err := httplimit.New(store, []limiter.Policy{one}, httplimit.WithClock(fixedClock(t0)))
			require.NoError(t, err)
			b := serve(t, untrusting)
			a := get(t, b.url, forged)
			require.Equal(t, 200, a.status)
			assert.Equal(t, "ok 127.0.0.1", a.body)
			a = get(t, b.url, map[string]string{"X-Forwarded-For": "198.51.100.1"})
			assert.Equal(t, 429, a.status, "a new forged address is the same client")

			trusting, err := httplimit.New(store, []limiter.Policy{{Name: "two", Algorithm: limiter.SlidingLog, Limit: 1, Window: time.Minute}},
				httplimit.WithClock(fixedClock(t0)), httplimit.WithKey(httplimit.ClientAddr(prefixes(t, "127.0.0.1", "10.0.0.0/8")...)))
			require.NoError(t, err)
			b = serve(t, trusting)
			a = get(t, b.url, map[string]string{"X-Forwarded-For": "203.0.113.9, 10.1.2.3"})
			require.Equal(t, 200, a.status)
			assert.Equal(t, "ok 203.0.113.9", a.body, "the right-most untrusted hop")
			a = get(t, b.url, map[string]string{"X-Forwarded-For": "203.0.113.9"})
			assert.Equal(t, 429, a.status, "the same client through another path")
			a = get(t, b.url, map[string]string{"X-Forwarded-For": "198.51.100.7"})
			require.Equal(t, 200, a.status, "another client")
			assert.Equal(t, "ok 198.51.100.7", a.body)
			a = get(t, b.url, map[string]string{"X-Real-IP": "198.51.100.8"})
			require.Equal(t, 200, a.status)
			assert.Equal(t, "ok 127.0.0.1", a.body, "X-Real-IP is never believed")
		})
	}
}

func TestClientAddr(t *testing.T) {
	trusted := prefixes(t, "10.0.0.0/8", "192.0.2.1", "2001:db8::/32")
	cases := []struct {
		name, remote, xff string
		want              string
	}{
		{"peer", "198.51.100.1:1234", "", "198.51.100.1"},
		{"untrusted peer, forged header", "198.51.100.1:1234", "203.0.113.1", "198.51.100.1"},
		{"trusted peer, no header", "192.0.2.1:1234", "", "192.0.2.1"},
		{"trusted peer", "192.0.2.1:1234", "203.0.113.1", "203.0.113.1"},
		{"client forges the left part", "192.0.2.1:1234", "1.1.1.1, 203.0.113.1, 10.0.0.2", "203.0.113.1"},
		{"all trusted", "192.0.2.1:1234", "10.0.0.3, 10.0.0.2", "10.0.0.3"},
		{"garbage left of the client is never read", "192.0.2.1:1234", "nonsense, 203.0.113.1, 10.0.0.2", "203.0.113.1"},
		{"ipv6 peer", "[2001:db8::5]:1234", "2001:db9::1", "2001:db9::/64"},
		{"ipv6 peer, no header", "[2001:db9:1:2:3::5]:1234", "", "2001:db9:1:2::/64"},
		{"v4-mapped", "[::ffff:198.51.100.1]:1", "", "198.51.100.1"},
		{"bare address", "198.51.100.1", "", "198.51.100.1"},
	}
	key := httplimit.ClientAddr(trusted...)
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		got, err := key(r)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "@"
	_, err := key(r)
	assert.ErrorIs(t, err, httplimit.ErrNoKey)

	_, err = httplimit.ParsePrefixes([]string{"10.0.0.0/33"})
	assert.Error(t, err)
}

type userKey struct{}

func userID(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(userKey{}).(string)
	return id, ok
}

func TestKeyFuncs(t *testing.T) {
	byUser := httplimit.FirstOf(httplimit.Prefixed("user:", httplimit.FromContext(userID)), httplimit.Prefixed("ip:", httplimit.ClientAddr()))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	k, err := byUser(r)
	require.NoError(t, err)
	assert.Equal(t, "ip:192.0.2.1", k, "anonymous: the address")
	k, err = byUser(r.WithContext(context.WithValue(r.Context(), userKey{}, "42")))
	require.NoError(t, err)
	assert.Equal(t, "user:42", k)

	_, err = httplimit.FromContext(userID)(r)
	assert.ErrorIs(t, err, httplimit.ErrNoKey)

	h := httplimit.Header("x-api-key")
	r.Header.Add("X-Api-Key", "a")
	k, err = h(r)
	require.NoError(t, err)
	assert.Equal(t, "a", k)
	r.Header.Add("X-Api-Key", "b")
	_, err = h(r)
	require.Error(t, err, "sent twice")
	assert.NotErrorIs(t, err, httplimit.ErrNoKey)
	_, err = httplimit.FirstOf(h, httplimit.ClientAddr())(r)
	assert.Error(t, err, "a bad header is not a missing one: no fallback")
}
