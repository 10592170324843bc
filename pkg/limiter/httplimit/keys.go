package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// A KeyFunc names who a request is counted against: the key's subject. An
// error answers 400 with the error's text as the problem's detail, so it
// must not reveal anything secret.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey is wrapped by the errors of the KeyFuncs of this package when the
// request does not carry what they look for.
var ErrNoKey = errors.New("httplimit: no key in the request")

// maxForwarded bounds the addresses of X-Forwarded-For that ClientAddr reads,
// so that a huge forged list costs nothing.
const maxForwarded = 32

// ClientAddr returns a KeyFunc keyed by the client's IP address, as text
// ("192.0.2.1", "2001:db8::1"). It is the connection's peer address unless
// the peer is one of the trusted proxies: then it is the right-most address
// of X-Forwarded-For that is not a trusted proxy (the left-most when all
// are). Nothing else (X-Real-IP, Forwarded, True-Client-IP) is believed, and
// with no trusted proxies X-Forwarded-For is ignored: a client could forge it
// to get a new budget on every request. A malformed X-Forwarded-For from a
// trusted proxy keys by the last address that could be read.
//
// It is the default key of [New].
func ClientAddr(trusted ...netip.Prefix) KeyFunc {
	trusted = append([]netip.Prefix(nil), trusted...)
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		peer, err := parseAddr(r.RemoteAddr)
		if err != nil {
			return "", fmt.Errorf("httplimit: the client address %q is unknown: %w", r.RemoteAddr, ErrNoKey)
		}
		if len(trusted) == 0 || !isTrusted(peer) {
			return peer.String(), nil
		}
		client := peer
		hops := forwardedFor(r.Header)
		for i := len(hops) - 1; i >= 0 && i >= len(hops)-maxForwarded; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			client = a.Unmap()
			if !isTrusted(client) {
				break
			}
		}
		return client.String(), nil
	}
}

// forwardedFor returns the addresses of every X-Forwarded-For line, in order.
func forwardedFor(hd http.Header) []string {
	var hops []string
	for _, line := range hd.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(line, ",")...)
	}
	return hops
}

// parseAddr reads the IP of a RemoteAddr, "host:port" or a bare address.
func parseAddr(remote string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	return a.Unmap(), err
}

// ParsePrefixes reads trusted proxies for [ClientAddr]: CIDRs ("10.0.0.0/8")
// or single addresses ("192.0.2.7").
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("httplimit: trusted proxy %q is neither an address nor a CIDR", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// Header returns a KeyFunc keyed by the request header name, which must be
// present, non-empty and sent once. Only use it for a header the client
// cannot choose freely (an API key checked before this middleware, a header
// set by your own proxy): a client that can invent the value gets a new
// budget for every value.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		vs := r.Header[name]
		switch {
		case len(vs) == 0 || vs[0] == "":
			return "", fmt.Errorf("httplimit: header %s is required: %w", name, ErrNoKey)
		case len(vs) > 1:
			return "", fmt.Errorf("httplimit: header %s is given %d times", name, len(vs))
		}
		return vs[0], nil
	}
}

// FromContext returns a KeyFunc keyed by what get finds in the request's
// context, typically the user id an authentication middleware put there;
// get's false answers 400 (combine with [FirstOf] to fall back on the
// client's address for anonymous requests).
func FromContext(get func(context.Context) (string, bool)) KeyFunc {
	return func(r *http.Request) (string, error) {
		if k, ok := get(r.Context()); ok && k != "" {
			return k, nil
		}
		return "", fmt.Errorf("httplimit: no identity in the request context: %w", ErrNoKey)
	}
}

// FirstOf returns a KeyFunc that tries fs in order and keys by the first one
// that finds a key; an error other than [ErrNoKey] stops it. Prefix the keys
// (see [Prefixed]) when two KeyFuncs could produce the same text for
// different clients, such as a user id and an address.
func FirstOf(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		err := fmt.Errorf("httplimit: no key function: %w", ErrNoKey)
		for _, f := range fs {
			var k string
			if k, err = f(r); err == nil || !errors.Is(err, ErrNoKey) {
				return k, err
			}
		}
		return "", err
	}
}

// Prefixed returns f with prefix put before each key, so that keys of
// different kinds never share a counter: FirstOf(Prefixed("user:", byUser),
// Prefixed("ip:", ClientAddr())).
func Prefixed(prefix string, f KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := f(r)
		if err != nil {
			return "", err
		}
		return prefix + k, nil
	}
}
