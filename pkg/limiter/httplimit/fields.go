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
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
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

// RateLimitHeader returns the RateLimit field value for policy name's
// decision d: "name";r=<remaining>;t=<seconds until reset, rounded up>.
func RateLimitHeader(name string, d limiter.Decision) string {
	return sfString(name) + ";r=" + strconv.FormatInt(d.Remaining, 10) + ";t=" + strconv.FormatInt(limiter.RetryAfterSeconds(d.ResetAfter), 10)
}

// SetFields sets the RateLimit-Policy field to policyHeader (a
// [PolicyHeader] value) and, when d is not nil, the RateLimit field and the
// X-RateLimit-Limit, -Remaining and -Reset fields for policy name's decision
// d. It replaces earlier values of these fields. The values share one
// allocation.
func SetFields(hd http.Header, policyHeader, name string, d *limiter.Decision) {
	if d == nil {
		hd[FieldPolicy] = []string{policyHeader}
		return
	}
	v := [...]string{
		policyHeader,
		RateLimitHeader(name, *d),
		strconv.FormatInt(d.Limit, 10),
		strconv.FormatInt(d.Remaining, 10),
		strconv.FormatInt(limiter.RetryAfterSeconds(d.ResetAfter), 10),
	}
	vals := v[:] // one backing array for the five one-value slices
	hd[FieldPolicy] = vals[0:1:1]
	hd[FieldRateLimit] = vals[1:2:2]
	hd[FieldLimit] = vals[2:3:3]
	hd[FieldRemaining] = vals[3:4:4]
	hd[FieldReset] = vals[4:5:5]
}

// SetRetryAfter sets the Retry-After field to d rounded up to whole seconds.
func SetRetryAfter(hd http.Header, d time.Duration) {
	hd["Retry-After"] = []string{strconv.FormatInt(limiter.RetryAfterSeconds(d), 10)}
}
