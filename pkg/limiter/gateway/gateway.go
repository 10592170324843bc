// Package gateway maps the requests a gateway asks about (forward-auth) to
// rate-limit policies: an ordered list of rules, each matching a method, a
// host and a path (every part optional), the first match winning. It knows
// nothing of HTTP servers: a request is three strings, so the service's
// /v1/forward-auth and a tool replaying access logs match with the same
// code.
//
// A request's path is compared after RequestPath has decoded and cleaned
// it, so that /static/../api/x and /%61pi/x meet the rule for /api/ as the
// upstream server will see them; paths and hosts compare without regard to
// case, and a host's trailing dot and port are ignored, so that /API/x on
// a case-insensitive upstream and limited.test. are what they are served
// as. Where upstreams differ, the request is counted on the stricter rule.
package gateway

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
)

// Match says which requests a rule applies to; an empty part matches any.
// Path and PathPrefix are exclusive.
type Match struct {
	// Method is compared exactly, after both sides are upper-cased.
	Method string
	// Host is a host name or address without a port, compared without
	// regard to case or a trailing dot; the request's port, if any, is
	// ignored.
	Host string
	// PathPrefix matches every path that starts with it, as a plain string
	// but for ASCII case: /api/ matches /api/, /api/x and /API/x, not /api;
	// /api matches /apix too.
	PathPrefix string
	// Path matches this path only, but for ASCII case.
	Path string
}

// KeyKind is where a rule takes the key its policies count.
type KeyKind uint8

// The key kinds.
const (
	// KeyClient is the client's address as the gateway forwarded it.
	KeyClient KeyKind = iota
	// KeyHeader is the value of one request header (an API key, a user
	// id): the client asserts it.
	KeyHeader
	// KeyGlobal is one constant key: the policies limit every matching
	// request together.
	KeyGlobal
)

// Key is a rule's key source.
type Key struct {
	Kind KeyKind
	// Header is the header's name for KeyHeader, as written.
	Header string
}

// ParseKey reads "client", "global" or "header:NAME".
func ParseKey(s string) (Key, error) {
	switch s {
	case "client":
		return Key{Kind: KeyClient}, nil
	case "global":
		return Key{Kind: KeyGlobal}, nil
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		if !isToken(name) {
			return Key{}, fmt.Errorf("gateway: %q is not an HTTP header name", name)
		}
		return Key{Kind: KeyHeader, Header: name}, nil
	}
	return Key{}, fmt.Errorf("gateway: key %q: want client, global or header:NAME", s)
}

// String returns the key as ParseKey reads it.
func (k Key) String() string {
	switch k.Kind {
	case KeyClient:
		return "client"
	case KeyGlobal:
		return "global"
	}
	return "header:" + k.Header
}

// Rule maps the requests it matches to policies, counted under its key.
type Rule struct {
	Match    Match
	Policies []string // names, evaluated in order; at least one
	Key      Key
}

// RuleError is a rule that New refuses: its index, the field ("match.path",
// "policies", ...) and why.
type RuleError struct {
	Index  int
	Field  string
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("gateway: rule %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Rules is a validated, ordered list of rules. It is immutable and safe
// for concurrent use.
type Rules struct {
	rules []Rule
}

// New validates rules and returns them ready to match; the rules are copied
// with their method upper-cased and their host lower-cased, without a
// trailing dot.
func New(rules []Rule) (*Rules, error) {
	out := make([]Rule, len(rules))
	for i, r := range rules {
		m := r.Match
		bad := func(field, reason string) error { return &RuleError{Index: i, Field: field, Reason: reason} }
		if m.Method != "" && !isToken(m.Method) {
			return nil, bad("match.method", fmt.Sprintf("%q is not an HTTP method", m.Method))
		}
		if m.Host != "" && !validHost(m.Host) {
			return nil, bad("match.host", fmt.Sprintf("%q is not a host name or address without a port", m.Host))
		}
		if m.Path != "" && m.PathPrefix != "" {
			return nil, bad("match", "path and path_prefix are exclusive")
		}
		for field, p := range map[string]string{"match.path": m.Path, "match.path_prefix": m.PathPrefix} {
			if p == "" {
				continue
			}
			if clean, err := RequestPath(p); err != nil || clean != p {
				return nil, bad(field, fmt.Sprintf("%q is not a clean absolute path (want one such as /api/, without ., .., //, %%-escapes or a query)", p))
			}
		}
		if len(r.Policies) == 0 {
			return nil, bad("policies", "must name at least one policy")
		}
		for j, p := range r.Policies {
			if p == "" {
				return nil, bad(fmt.Sprintf("policies[%d]", j), "empty policy name")
			}
			for _, q := range r.Policies[:j] {
				if q == p {
					return nil, bad(fmt.Sprintf("policies[%d]", j), fmt.Sprintf("policy %q is listed twice", p))
				}
			}
		}
		if r.Key.Kind > KeyGlobal || r.Key.Kind == KeyHeader && !isToken(r.Key.Header) {
			return nil, bad("key", "want client, global or header:NAME")
		}
		m.Method, m.Host = strings.ToUpper(m.Method), strings.TrimSuffix(strings.ToLower(m.Host), ".")
		out[i] = Rule{Match: m, Policies: append([]string(nil), r.Policies...), Key: r.Key}
	}
	return &Rules{rules: out}, nil
}

// Len returns the number of rules.
func (rs *Rules) Len() int { return len(rs.rules) }

// Rule returns rule i (0 <= i < Len) as New stored it; do not modify its
// Policies.
func (rs *Rules) Rule(i int) Rule { return rs.rules[i] }

// Match returns the index of the first rule at or after from that matches
// (method, host, path), or -1 when none does. path must be what RequestPath
// returns; host may carry a port. A caller whose matching rule cannot form
// its key (a header absent) goes on with Match(…, i+1).
func (rs *Rules) Match(method, host, path string, from int) int {
	method = strings.ToUpper(method)
	host = hostOnly(host)
	for i := max(from, 0); i < len(rs.rules); i++ {
		m := rs.rules[i].Match
		if m.Method != "" && m.Method != method ||
			m.Host != "" && !strings.EqualFold(m.Host, host) ||
			m.Path != "" && !equalFoldASCII(m.Path, path) ||
			m.PathPrefix != "" && !(len(path) >= len(m.PathPrefix) && equalFoldASCII(path[:len(m.PathPrefix)], m.PathPrefix)) {
			continue
		}
		return i
	}
	return -1
}

// ErrBadPath is returned by RequestPath for a request target it cannot read.
var ErrBadPath = errors.New("gateway: request path")

// ParseTarget returns the host and the path (see RequestPath) of a request
// target. The origin form (a path, an optional query) names no host: "".
// The absolute form (http://host[:port]/path, as a client sends it to a
// proxy, and HAProxy passes it on) names its authority, which a server
// uses instead of the Host header (RFC 9112, section 3.2.2). Another
// scheme, and an empty host or one with user information, are ErrBadPath.
func ParseTarget(target string) (host, path string, err error) {
	p := target
	if scheme, rest, ok := strings.Cut(target, "://"); ok && !strings.HasPrefix(target, "/") {
		if !strings.EqualFold(scheme, "http") && !strings.EqualFold(scheme, "https") {
			return "", "", fmt.Errorf("%w: %q is neither a path nor an http(s) URL", ErrBadPath, target)
		}
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		host, p = rest[:end], rest[end:]
		if host == "" || strings.Contains(host, "@") {
			return "", "", fmt.Errorf("%w: %q names no host, or user information", ErrBadPath, target)
		}
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
	}
	path, err = RequestPath(p)
	return host, path, err
}

// RequestPath returns the path of a request target (origin form: a path
// with an optional query), percent-decoded and cleaned as a server
// resolving it would: ";" parameters of each segment dropped (as servlet
// containers and Spring do: "/api;x/items" is served as "/api/items", so
// it must be counted as that), a backslash read as a slash (as IIS and
// ASP.NET do), dot segments resolved, repeated slashes folded, a final
// slash kept. An encoded "%3B" is a literal semicolon and stays; an
// encoded "%5C" is a backslash, so a slash. A target that is not an
// absolute path, an invalid escape and a decoded control character are
// ErrBadPath.
func RequestPath(target string) (string, error) {
	p, _, _ := strings.Cut(target, "?")
	p, _, _ = strings.Cut(p, "#")
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: %q is not an absolute path", ErrBadPath, target)
	}
	if strings.Contains(p, ";") {
		segs := strings.Split(p, "/")
		for i, seg := range segs {
			segs[i], _, _ = strings.Cut(seg, ";")
		}
		p = strings.Join(segs, "/")
	}
	dec, err := url.PathUnescape(p)
	if err != nil {
		return "", fmt.Errorf("%w: %q has an invalid %%-escape", ErrBadPath, target)
	}
	for i := 0; i < len(dec); i++ {
		if dec[i] < 0x20 || dec[i] == 0x7f {
			return "", fmt.Errorf("%w: %q holds a control character", ErrBadPath, target)
		}
	}
	dec = strings.ReplaceAll(dec, `\`, "/")
	clean := path.Clean(dec)
	if strings.HasSuffix(dec, "/") && clean != "/" {
		clean += "/"
	}
	return clean, nil
}

// hostOnly drops a port from host ("h:80", "[::1]:80"), the brackets of
// an IPv6 literal and one trailing dot (the absolute name "h." is "h").
func hostOnly(host string) string {
	if strings.HasPrefix(host, "[") {
		if end := strings.IndexByte(host, ']'); end > 0 {
			return host[1:end]
		}
		return host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Count(host, ":") == 1 {
		host = host[:i]
	}
	return strings.TrimSuffix(host, ".")
}

// equalFoldASCII reports whether a and b are equal but for the case of
// ASCII letters.
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// validHost accepts a host name or an address, without a port: letters,
// digits, '.', '-', '_' and, for IPv6, ':'.
func validHost(h string) bool {
	for _, c := range []byte(h) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
		case c == ':' && strings.Count(h, ":") >= 2: // IPv6
		default:
			return false
		}
	}
	return h != ""
}

// isToken reports whether s is an RFC 9110 token (a method, a header name).
func isToken(s string) bool {
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}
