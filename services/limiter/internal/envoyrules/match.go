package envoyrules

import (
	"fmt"
	"net/url"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Match finds the limit of one request descriptor in domain, as
// envoyproxy/ratelimit does: the descriptor's entries walk the tree one level
// each, and at each level the descriptor of the entry's key is the one with
// the exact value, else the first matching wildcard in file order (not the
// longest: `/api/*` written before `/api/admin/*` takes /api/admin/x), else
// the key without value. The walk does not backtrack. The limit applies only when the last entry lands on a
// descriptor with a rate_limit; otherwise (unknown domain, no match, a
// deeper or shallower tree) Match returns nil.
//
// The key is the counter of the request: its entries as key=value pairs
// (for a share_threshold wildcard, the pattern instead of the value), so two
// clients with different values get different counters.
func (r *Rules) Match(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) (*Limit, limiter.Key) {
	lv := r.domains[domain]
	var n *node
	var subject strings.Builder
	for i, e := range entries {
		if lv == nil {
			return nil, limiter.Key{}
		}
		b := lv[e.GetKey()]
		if b == nil {
			return nil, limiter.Key{}
		}
		n = b.find(e.GetValue())
		if n == nil {
			return nil, limiter.Key{}
		}
		value := e.GetValue()
		if n.share {
			value = n.value
		}
		writePair(&subject, i, e.GetKey(), value)
		lv = n.next
	}
	if n == nil || n.limit == nil {
		return nil, limiter.Key{}
	}
	// A long descriptor is counted under its digest rather than refused.
	return n.limit, limiter.BoundKey(limiter.Key{Subject: subject.String()}, limiter.MaxKeyLen)
}

// noEntries is the subject of a descriptor without entries: a key needs
// one, and every subject made of entries holds a '='.
const noEntries = "(no entries)"

// writePair writes the i-th entry of a key: key=value, escaped, after a '&'
// unless it is the first.
func writePair(b *strings.Builder, i int, key, value string) {
	if i > 0 {
		b.WriteByte('&')
	}
	b.WriteString(url.QueryEscape(key))
	b.WriteByte('=')
	b.WriteString(url.QueryEscape(value))
}

// Override returns the limit that a descriptor's request-side override
// (its limit field) asks for, applied as envoyproxy/ratelimit applies it:
// in place of whatever rule the entries match, for any descriptor of a
// loaded domain, matched or not, and a descriptor without entries (one
// counter per domain and unit, as the peer's key of no entries). It
// returns nil for an unknown domain.
//
// The counter is fixed_window and named by the domain, the entries and the
// unit (see overridePolicy), never by the limit: overrides asking for other
// limits in the same unit compare the same count with their own limit, and
// a configured fixed_window limit of the same unit on the same entries (no
// share_threshold) counts on the same counter, as the peer's cache key
// (domain, entries, window) is the same for both. A unit outside second to
// year, or a limit above limiter.MaxLimit, is an error saying so: the
// request is wrong, which the transports answer as such; 0 refuses
// everything, as in a file.
func (r *Rules) Override(domain string, d *ratelimitv3.RateLimitDescriptor) (*Limit, limiter.Key, error) {
	o := d.GetLimit()
	u := Unit(o.GetUnit())
	unit, window, ok := unitOf(u)
	switch {
	case !ok:
		return nil, limiter.Key{}, fmt.Errorf("the limit override's unit %v is not one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR", o.GetUnit())
	case int64(o.GetRequestsPerUnit()) > limiter.MaxLimit:
		return nil, limiter.Key{}, fmt.Errorf("the limit override's requests_per_unit %d is above %d", o.GetRequestsPerUnit(), int64(limiter.MaxLimit))
	case r.domains[domain] == nil:
		return nil, limiter.Key{}, nil
	}
	var subject strings.Builder
	for i, e := range d.GetEntries() {
		writePair(&subject, i, e.GetKey(), e.GetValue())
	}
	if subject.Len() == 0 {
		subject.WriteString(noEntries)
	}
	key := limiter.BoundKey(limiter.Key{Subject: subject.String()}, limiter.MaxKeyLen)
	p := overridePolicy(domain, unit, int64(o.GetRequestsPerUnit()))
	if l, k := r.Match(domain, d.GetEntries()); l != nil && l.stored() && k == key &&
		l.Policy.Algorithm == limiter.FixedWindow && l.Policy.Window == window {
		p.Name = l.Policy.Name
	}
	return &Limit{Policy: p, Unit: u, RequestsPerUnit: o.GetRequestsPerUnit()}, key, nil
}

// find returns the descriptor of this key that matches value: the exact
// one, else the first matching wildcard in file order, else the key
// without value; nil when none.
func (b *branch) find(value string) *node {
	if n := b.exact[value]; n != nil {
		return n
	}
	for _, w := range b.wildcards {
		if globMatch(w.parts, value) {
			return w
		}
	}
	return b.any
}

// globMatch reports whether s matches the pattern split on '*' into parts:
// s starts with the first part, ends with the last, and holds the middle
// ones in order, each '*' standing for any run of characters, empty
// included. Greedy leftmost matching of the middle parts is exact for this
// kind of pattern.
func globMatch(parts []string, s string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
