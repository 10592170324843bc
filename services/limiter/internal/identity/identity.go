// Package identity decides whose budget a request spends. A route names its
// key sources in order; the first that applies gives the key:
//
//   - peer: the client address under httplimit.Clients' rules (the same as
//     the library's middleware): after trusted proxies' X-Forwarded-For, an
//     IPv6 address grouped by its /64 (configurable), IPv4-mapped folded.
//     Safe anywhere: a client cannot choose it.
//   - header: X-Client-Key, as seed 000 does (docs/seeds.md). Client-asserted:
//     believed only from a trusted proxy, unless the operator allows any
//     client (HeadersFromAny, the demo default).
//   - api_key: X-Api-Key, which must be one of the operator's keys (a file
//     of SHA-256 digests); an unknown key is refused. Safe anywhere.
//   - user: X-User-Id, as seed 001 does. Client-asserted like
//     header.
//
// Each source is its own namespace in the store (peer:, key:, api:,
// user:), so a key asserted through one source never spends a budget
// counted through another.
package identity

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

// Source is where a key comes from.
type Source string

// The key sources.
const (
	Peer   Source = "peer"
	Header Source = "header"
	APIKey Source = "api_key"
	User   Source = "user"
)

// Namespace returns the prefix of s's keys in the store.
func (s Source) Namespace() string {
	switch s {
	case Peer:
		return "peer:"
	case Header:
		return "key:"
	case APIKey:
		return "api:"
	}
	return "user:"
}

// Input names what the client sends for s, for error messages: the
// header's name, or what the key is made of.
func (s Source) Input() string {
	switch s {
	case Peer:
		return "client address"
	case Header:
		return ClientKeyHeader
	case APIKey:
		return "API key name"
	}
	return UserIDHeader
}

// The headers the client-asserted sources read.
const (
	ClientKeyHeader = "X-Client-Key"
	APIKeyHeader    = "X-Api-Key"
	UserIDHeader    = "X-User-Id"
)

// ParseSources reads a list of source names ("peer", "header", "api_key",
// "user"), in order, each at most once.
func ParseSources(names []string) ([]Source, error) {
	var out []Source
	for _, n := range names {
		s := Source(strings.TrimSpace(n))
		switch s {
		case Peer, Header, APIKey, User:
		default:
			return nil, fmt.Errorf("identity: unknown key source %q (want peer, header, api_key or user)", n)
		}
		for _, o := range out {
			if o == s {
				return nil, fmt.Errorf("identity: key source %q listed twice", n)
			}
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("identity: no key source")
	}
	return out, nil
}

// Trust says who may assert an identity through a header (header, user).
type Trust uint8

const (
	// HeadersFromAny believes identity headers from every client: the
	// behaviour of seeds 000 and 001 (docs/seeds.md), for demos and for a
	// service only a gateway reaches.
	HeadersFromAny Trust = iota
	// HeadersFromTrustedProxies believes them only when the connection
	// comes from a trusted proxy; from anyone else they are ignored.
	HeadersFromTrustedProxies
)

// ParseTrust reads "any" or "trusted-proxies".
func ParseTrust(s string) (Trust, error) {
	switch s {
	case "any", "":
		return HeadersFromAny, nil
	case "trusted-proxies", "trusted_proxies":
		return HeadersFromTrustedProxies, nil
	}
	return 0, fmt.Errorf("identity: identity headers from %q: want any or trusted-proxies", s)
}

func (t Trust) String() string {
	if t == HeadersFromTrustedProxies {
		return "trusted-proxies"
	}
	return "any"
}

// Identity is whose budget a request spends.
type Identity struct {
	Source Source
	// Key is what answers show: the address (or IPv6 prefix), the header's
	// value, the API key's short name, the user id.
	Key string
	// Subject is the store's key: Key in its source's namespace.
	Subject string
}

func newIdentity(s Source, key string) Identity {
	return Identity{Source: s, Key: key, Subject: s.Namespace() + key}
}

// Errors of Resolve. A caller answers ErrUnknownAPIKey with 401 and the
// others with 400.
var (
	ErrUnknownAPIKey = errors.New("identity: unknown API key")
	ErrRepeated      = errors.New("identity: header given more than once")
	ErrNoIdentity    = errors.New("identity: no key source applies")
)

// Resolver resolves identities. It is immutable and safe for concurrent use.
type Resolver struct {
	Trust Trust
	// Clients names the client of a request: the peer, or behind trusted
	// proxies the address they forward, IPv6 grouped by prefix; they are
	// also the peers whose identity headers HeadersFromTrustedProxies
	// believes. nil means no trusted proxy and IPv6 by /64.
	Clients *httplimit.Clients
	// APIKeys are the operator's keys; nil refuses every API key.
	APIKeys *APIKeys
	// ValidateKey checks a header's value (length, UTF-8); nil accepts all.
	ValidateKey func(what, v string) error
}

// defaultClients trusts no proxy and groups IPv6 by /64.
var defaultClients, _ = httplimit.NewClients() // the default options are valid

// ClientRules returns rs's client rules.
func (rs *Resolver) ClientRules() *httplimit.Clients {
	if rs.Clients == nil {
		return defaultClients
	}
	return rs.Clients
}

// HeadersBelieved reports whether r may assert an identity by header.
func (rs *Resolver) HeadersBelieved(r *http.Request) bool {
	return rs.Trust == HeadersFromAny || rs.ClientRules().PeerTrusted(r)
}

// Resolve returns the identity of r from the first of sources that applies:
// peer always does (unless the request has no usable client address: an
// error); header and user when the header is present and believed; api_key
// when X-Api-Key is present (unknown: ErrUnknownAPIKey).
func (rs *Resolver) Resolve(r *http.Request, sources []Source) (Identity, error) {
	for _, s := range sources {
		id, ok, err := rs.from(r, s)
		if err != nil || ok {
			return id, err
		}
	}
	return Identity{}, ErrNoIdentity
}

func (rs *Resolver) from(r *http.Request, s Source) (Identity, bool, error) {
	switch s {
	case Peer:
		k, err := rs.ClientRules().Key(r)
		if err != nil {
			return Identity{}, false, err
		}
		return newIdentity(Peer, k), true, nil
	case APIKey:
		v, err := single(r.Header, APIKeyHeader)
		if err != nil || v == "" {
			return Identity{}, false, err
		}
		name, ok := rs.APIKeys.Lookup(v)
		if !ok {
			return Identity{}, false, ErrUnknownAPIKey
		}
		return newIdentity(APIKey, name), true, nil
	}
	name := s.Input()
	if !rs.HeadersBelieved(r) {
		return Identity{}, false, nil
	}
	v, err := single(r.Header, name)
	if err != nil || v == "" {
		return Identity{}, false, err
	}
	if rs.ValidateKey != nil {
		if err := rs.ValidateKey(name, v); err != nil {
			return Identity{}, false, err
		}
	}
	return newIdentity(s, v), true, nil
}

// single returns the one value of header name, "" when absent.
func single(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", fmt.Errorf("%w: %s", ErrRepeated, name)
}
