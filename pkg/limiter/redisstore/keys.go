package redisstore

import (
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Key layout:
//
//	<prefix>:{<policy>:<subject>}:<scope>:<suffix>
//
// The braces are a Redis Cluster hash tag: only the text between them is
// hashed, so every key of one (policy, subject) lands in one slot, whatever
// its scope or algorithm, and one script may touch them all. Policy, subject
// and scope are escaped (see escape) so that user input can never close the
// tag early, forge a separator, or put a glob character into the pattern of
// ResetSubject's SCAN.

// Key suffixes, one per kind of state.
const (
	suffixFixed   = "fw"  // hash: window start (Unix seconds) -> attempts
	suffixSliding = "sw"  // hash: window start (Unix seconds) -> admitted units
	suffixLog     = "log" // sorted set of events, scored by Unix microseconds
	suffixBucket  = "tb"  // string "<seconds>:<nanoseconds>:<set at s>:<set at ns>": the GCRA tat, when set
)

// suffixes lists every suffix, so that a reset removes a key's state whatever
// algorithm its policy had when the state was written.
var suffixes = [...]string{suffixFixed, suffixSliding, suffixLog, suffixBucket}

// suffixFor returns the suffix of a's state; an algorithm without a case
// here is an error, never another algorithm's key.
func suffixFor(a limiter.Algorithm) (string, error) {
	switch a {
	case limiter.FixedWindow:
		return suffixFixed, nil
	case limiter.SlidingWindow:
		return suffixSliding, nil
	case limiter.TokenBucket:
		return suffixBucket, nil
	case limiter.SlidingLog, limiter.SlidingLogUnsafe: // they share the event log
		return suffixLog, nil
	}
	return "", fmt.Errorf("%q: %w", a, limiter.ErrUnknownAlgorithm)
}

// subjectPrefix returns the part of the key names of (policy, subject) that
// comes before the scope, hash tag included.
func subjectPrefix(prefix, policy, subject string) string {
	return prefix + ":{" + escape(policy) + ":" + escape(subject) + "}:"
}

// keyName returns the name of k's key holding the state named by suffix.
func keyName(prefix, policy string, k limiter.Key, suffix string) string {
	return subjectPrefix(prefix, policy, k.Subject) + escape(k.Scope) + ":" + suffix
}

// unreserved reports whether c is left as is by escape. The set excludes the
// tag braces, the ':' separator, the glob characters * ? [ ] \ and '%' itself.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.'
}

// escape percent-encodes every byte of s outside [A-Za-z0-9._-]. The
// encoding is injective and its output holds none of the characters the key
// layout or a SCAN pattern treats specially.
func escape(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// validPrefix reports whether p can start key names: not empty, and made of
// characters that neither open a hash tag nor act in a SCAN pattern.
func validPrefix(p string) bool {
	return p != "" && !strings.ContainsAny(p, "{}*?[]\\")
}
