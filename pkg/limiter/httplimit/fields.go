package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// The rate-limit header fields, in the canonical form net/http gives them
// (what Header.Set would store and what goes on the wire), so that the hot
// path assigns them without canonicalising each key again.
const (
	FieldPolicy    = "Ratelimit-Policy"
	FieldRateLimit = "Ratelimit"
	FieldLimit     = "X-Ratelimit-Limit"
	FieldRemaining = "X-Ratelimit-Remaining"
	FieldReset     = "X-Ratelimit-Reset"
)

// sfString renders s as a structured-field string (RFC 9651): quoted, with
// '"' and '\' escaped. Callers pass printable ASCII only (see validName).
func sfString(s string) string { return string(appendSFString(nil, s)) }

// appendSFString appends sfString(s) to b.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// validName reports whether a policy name can be a structured-field string:
// printable ASCII, 0x20 to 0x7E.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// PolicyHeader returns the RateLimit-Policy field value of
// draft-ietf-httpapi-ratelimit-headers-10 for the enforcing (non-shadow)
// policies of ps: items like "ping";q=3;w=60 joined by ", ". It is empty when
// every policy is a shadow. Policy names must be printable ASCII.
func PolicyHeader(ps []limiter.Policy) string {
	items := make([]string, 0, len(ps))
	for _, p := range ps {
		if !p.Shadow {
			items = append(items, sfString(p.Name)+";q="+strconv.FormatInt(p.Limit, 10)+";w="+strconv.FormatInt(int64(p.Window/time.Second), 10))
		}
	}
	return strings.Join(items, ", ")
}

// RateLimitHeader returns the RateLimit field value for policy p's decision
// d: "name";r=<remaining>;t=<seconds until reset> (see [NewFields]).
func RateLimitHeader(p limiter.Policy, d limiter.Decision) string {
	return NewFields("", p, d).RateLimit
}

// Fields are the values of one answer's rate-limit header fields, formatted
// once: the service's decision layer works them out for every transport,
// and the middleware for each request.
type Fields struct {
	// Policy is the RateLimit-Policy value (a [PolicyHeader]); empty when
	// every policy is a shadow, and then no field is set.
	Policy string
	// RateLimit is the RateLimit value of the policy shown (a
	// [RateLimitHeader]); empty when no enforcing policy was evaluated, and
	// then only RateLimit-Policy is set.
	RateLimit string
	// Limit, Remaining and Reset (whole seconds, rounded up) are the shown
	// policy's numbers, for the X-RateLimit-* fields.
	Limit, Remaining, Reset int64
}

// NewFields returns the fields for policy p's decision d, announced under
// policyHeader (a [PolicyHeader] value). The reset, in whole seconds rounded
// up, is the same rule for every algorithm: on a refusal that waiting can
// cure, the wait of d.RetryAfter, so that X-RateLimit-Reset equals
// Retry-After; otherwise d.ResetAfter. The RateLimit field's t is that
// reset capped at the policy's window (the w of RateLimit-Policy), which a
// sliding_window key can take up to two windows to empty.
func NewFields(policyHeader string, p limiter.Policy, d limiter.Decision) Fields {
	after := d.ResetAfter
	if !d.Allowed && d.RetryAfter > 0 {
		after = d.RetryAfter
	}
	reset := RetryAfterSeconds(after)
	var buf [128]byte
	b := appendSFString(buf[:0], p.Name)
	b = strconv.AppendInt(append(b, ";r="...), d.Remaining, 10)
	b = strconv.AppendInt(append(b, ";t="...), min(reset, RetryAfterSeconds(p.Window)), 10)
	return Fields{Policy: policyHeader, RateLimit: string(b), Limit: d.Limit, Remaining: d.Remaining, Reset: reset}
}

// Set sets the RateLimit-Policy field and, when a policy is shown, the
// RateLimit field and the X-RateLimit-Limit, -Remaining and -Reset fields on
// hd, replacing earlier values. Nothing is set when Policy is empty. The
// three numbers share one allocation, the five values' slices another.
func (f Fields) Set(hd http.Header) {
	if f.Policy == "" {
		return
	}
	if f.RateLimit == "" {
		hd[FieldPolicy] = []string{f.Policy}
		return
	}
	var buf [60]byte
	b := strconv.AppendInt(buf[:0], f.Limit, 10)
	i := len(b)
	b = strconv.AppendInt(b, f.Remaining, 10)
	j := len(b)
	b = strconv.AppendInt(b, f.Reset, 10)
	numbers := string(b)
	v := [...]string{f.Policy, f.RateLimit, numbers[:i], numbers[i:j], numbers[j:]}
	vals := v[:] // one backing array for the five one-value slices
	hd[FieldPolicy] = vals[0:1:1]
	hd[FieldRateLimit] = vals[1:2:2]
	hd[FieldLimit] = vals[2:3:3]
	hd[FieldRemaining] = vals[3:4:4]
	hd[FieldReset] = vals[4:5:5]
}

// SetRetryAfter sets the Retry-After field to d rounded up to whole seconds.
func SetRetryAfter(hd http.Header, d time.Duration) {
	hd["Retry-After"] = []string{strconv.FormatInt(RetryAfterSeconds(d), 10)}
}
