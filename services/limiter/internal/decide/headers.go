package decide

import "github.com/tollgate/tollgate/pkg/limiter/httplimit"

// Header is what a verdict shows in the rate-limit header fields of
// draft-ietf-httpapi-ratelimit-headers-10 (and the X-RateLimit-* fields the
// service also sends for clients that predate the draft), formatted by the
// library's httplimit, as its middleware formats them. Transports copy the
// values; they format nothing.
type Header struct {
	// Fields are the RateLimit-Policy value (every enforcing policy of the
	// request; empty when all are shadows: then no field is set) and the
	// values of the policy limiter.Evaluation shows: the first enforcing
	// refusal, else the enforcing policy with the least remaining (none
	// when no enforcing policy was evaluated).
	httplimit.Fields
	// RetryAfter is the Retry-After value in whole seconds (rounded up)
	// when the request is refused and waiting can make it pass (the longest
	// wait of its enforcing refusals); -1 otherwise.
	RetryAfter int64
}
