package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
)

// A KeyFunc names who a request is counted against: the key's subject. An
// error answers 400 with the error's text as the problem's detail, so it
// must not reveal anything secret.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey is wrapped by the errors of the KeyFuncs of this package when the
// request does not carry what they look for.
var ErrNoKey = errors.New("httplimit: no key in the request")

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
