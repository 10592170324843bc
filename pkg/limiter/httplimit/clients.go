package httplimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// DefaultIPv6Prefix is how many leading bits of an IPv6 address name one
// client: a /64 is what one subscriber or one host usually holds, so keying
// by the full address would give its holder 2^64 budgets.
const DefaultIPv6Prefix = 64

// UnixSocketKey is the key of a client connected over a Unix socket (a
// local process) when no forwarded address names another.
const UnixSocketKey = "unix"

// ErrBadForwarded is wrapped by the error of a request whose
// X-Forwarded-For, as written by a trusted proxy, holds an entry that is
// neither an address nor an address with a port. Such a request has no
// client key: keying it by the proxy's address would put every client of
// that proxy on one budget, and keying it by the entry would let whoever
// wrote it choose a budget.
var ErrBadForwarded = errors.New("httplimit: X-Forwarded-For from a trusted proxy holds an entry that is not an address")

// maxForwarded bounds the entries of X-Forwarded-For that are read, so
// that a huge forged list costs nothing.
const maxForwarded = 32

// Clients names the client of a request: the connection's peer, or behind
// trusted proxies the address they forwarded, an IPv6 address grouped by
// its prefix. It is what [ClientAddr] keys by, and what Tollgate's service
// uses, so the library and the service key a request alike. Build it with
// [NewClients]; it is immutable and safe for concurrent use.
//
// The rules, in order:
//
//   - The peer is the connection's remote address; an IPv4-mapped IPv6
//     address (::ffff:192.0.2.1) is the IPv4 address. A peer over a Unix
//     socket is a local process, keyed [UnixSocketKey].
//   - When the peer is not a trusted proxy, it is the client, and every
//     forwarding header is ignored: a client could forge them to get a new
//     budget on every request. Only X-Forwarded-For is ever read (never
//     X-Real-IP, Forwarded, True-Client-IP).
//   - From a trusted proxy, X-Forwarded-For is read from the right: the
//     first entry that is not a trusted proxy is the client (the left-most
//     read when all are, at most 32 entries). Entries may carry a port
//     ("203.0.113.7:5555", "[2001:db8::1]:443") or brackets; empty entries
//     are skipped (RFC 9110 section 5.6.1). Without the header the proxy is
//     the client.
//   - An entry reached in that walk that is not an address is an error
//     wrapping [ErrBadForwarded] (a 400 for the middleware): it was written
//     by a trusted proxy, and no key derived from it is safe.
//   - The key is the address as text; an IPv6 address is its prefix in
//     CIDR notation ("2001:db8:1:2::/64"; the address itself at /128).
type Clients struct {
	trusted   []netip.Prefix
	v6Bits    int
	unixProxy bool
}

// A ClientsOption configures [NewClients].
type ClientsOption func(*Clients)

// TrustProxies makes the peers in ps trusted proxies, whose X-Forwarded-For
// is believed. List only your own proxies: [ParsePrefixes] reads them.
func TrustProxies(ps ...netip.Prefix) ClientsOption {
	return func(c *Clients) {
		for _, p := range ps {
			if p.Addr().Is4In6() { // ::ffff:10.0.0.0/104 is 10.0.0.0/8: peers are unmapped
				p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
			}
			c.trusted = append(c.trusted, p.Masked())
		}
	}
}

// IPv6Prefix sets how many leading bits of an IPv6 address name one client
// (default [DefaultIPv6Prefix]; 128 keys every address apart). NewClients
// refuses bits outside 1..128.
func IPv6Prefix(bits int) ClientsOption { return func(c *Clients) { c.v6Bits = bits } }

// UnixSocketProxy makes a peer connected over a Unix socket a trusted
// proxy, whose X-Forwarded-For is believed: for a server only a local
// reverse proxy reaches that way.
func UnixSocketProxy() ClientsOption { return func(c *Clients) { c.unixProxy = true } }

// NewClients returns the client rules of opts; the default trusts no
// proxy and groups IPv6 by /64.
func NewClients(opts ...ClientsOption) (*Clients, error) {
	c := &Clients{v6Bits: DefaultIPv6Prefix}
	for _, o := range opts {
		o(c)
	}
	if c.v6Bits < 1 || c.v6Bits > 128 {
		return nil, fmt.Errorf("httplimit: IPv6 prefix /%d: want 1..128", c.v6Bits)
	}
	return c, nil
}

// ClientAddr returns a KeyFunc keyed by the client's address under the
// rules of [Clients], with the proxies in trusted and IPv6 grouped by /64:
// "192.0.2.1", "2001:db8:1:2::/64". Use [NewClients] for other options.
//
// It is the default key of [New].
func ClientAddr(trusted ...netip.Prefix) KeyFunc {
	c, _ := NewClients(TrustProxies(trusted...)) // the default IPv6 prefix is valid
	return c.Key
}

// Key returns the key of r's client; it is a [KeyFunc]. An unreadable peer
// address is an error wrapping [ErrNoKey], a bad forwarded entry one
// wrapping [ErrBadForwarded].
func (c *Clients) Key(r *http.Request) (string, error) {
	peer, unix, err := peerOf(r)
	if err != nil {
		return "", err
	}
	if c.trusts(peer, unix) {
		client, found, err := c.forwarded(r.Header)
		if err != nil {
			return "", err
		}
		if found {
			return c.AddrKey(client), nil
		}
	}
	if unix {
		return UnixSocketKey, nil
	}
	return c.AddrKey(peer), nil
}

// PeerTrusted reports whether r's connection comes from a trusted proxy.
func (c *Clients) PeerTrusted(r *http.Request) bool {
	peer, unix, err := peerOf(r)
	return err == nil && c.trusts(peer, unix)
}

// AddrKey returns the key of address a: an IPv4 address (IPv4-mapped
// folded) as itself, an IPv6 address as its prefix in CIDR notation. Zones
// are dropped. The zero Addr is "invalid IP".
func (c *Clients) AddrKey(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if !a.Is6() || c.v6Bits == 128 {
		return a.String()
	}
	p, _ := a.Prefix(c.v6Bits) // an IPv6 address takes any prefix of 1..128 bits
	return p.String()
}

func (c *Clients) trusts(peer netip.Addr, unix bool) bool {
	if unix {
		return c.unixProxy
	}
	for _, p := range c.trusted {
		if p.Contains(peer) {
			return true
		}
	}
	return false
}

// forwarded walks X-Forwarded-For from the right and returns the first
// entry that is not a trusted proxy (the left-most read when all are);
// found is false when there is no entry.
func (c *Clients) forwarded(h http.Header) (client netip.Addr, found bool, err error) {
	lines := h.Values("X-Forwarded-For")
	read := 0
	for i := len(lines) - 1; i >= 0; i-- {
		rest := lines[i]
		for rest != "" && read < maxForwarded {
			var entry string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				rest, entry = rest[:j], rest[j+1:]
			} else {
				rest, entry = "", rest
			}
			if entry = strings.TrimSpace(entry); entry == "" {
				continue
			}
			read++
			a, ok := parseHop(entry)
			if !ok {
				return netip.Addr{}, false, fmt.Errorf("%w: %q", ErrBadForwarded, shorten(entry))
			}
			client, found = a, true
			if !c.trusts(a, false) {
				return client, true, nil
			}
		}
	}
	return client, found, nil
}

// parseHop reads one X-Forwarded-For entry: an address, bracketed or not,
// with or without a port.
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// shorten cuts s to 64 bytes for an error message.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// peerOf returns the address of r's connection, or unix true for a Unix
// socket peer.
func peerOf(r *http.Request) (peer netip.Addr, unix bool, err error) {
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la.Network() == "unix" {
		return netip.Addr{}, true, nil
	}
	host, _, serr := net.SplitHostPort(r.RemoteAddr)
	if serr != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("httplimit: the client address %q is unknown: %w", r.RemoteAddr, ErrNoKey)
	}
	return a.Unmap(), false, nil
}
