package decide

import (
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Header is what a verdict shows in the rate-limit header fields of
// draft-ietf-httpapi-ratelimit-headers-10 (and the X-RateLimit-* fields the
// seeds announce). Transports copy the values; they format nothing.
type Header struct {
	// Policy is the RateLimit-Policy value: every enforcing policy of the
	// request. Empty when all are shadows: then no field is set.
	Policy string
	// RateLimit is the RateLimit value of the policy shown (the enforcing
	// refusal, else the enforcing policy with the least remaining); empty
	// when no enforcing policy was evaluated.
	RateLimit string
	// Limit, Remaining and Reset (whole seconds, rounded up) are the shown
	// policy's numbers, for the X-RateLimit-* fields.
	Limit, Remaining, Reset int64
	// RetryAfter is the Retry-After value in whole seconds (rounded up)
	// when the request is refused and waiting can make it pass; -1 otherwise.
	RetryAfter int64
}

// sfString renders s as a structured-field string (RFC 9651): quoted, with
// '"' and '\' escaped. Policy names are printable ASCII (the configuration
// checks it).
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

// PolicyHeader returns the RateLimit-Policy field value of
// draft-ietf-httpapi-ratelimit-headers-10 for the enforcing (non-shadow)
// policies of ps: items like "ping";q=3;w=60 joined by ", ". It is empty when
// every policy is a shadow.
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
