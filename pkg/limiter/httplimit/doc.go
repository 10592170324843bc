// Package httplimit rate-limits net/http servers with the policies and
// stores of package limiter, and holds the HTTP vocabulary Tollgate's service
// answers with: the draft-ietf-httpapi-ratelimit-headers-10 fields
// (RateLimit-Policy, RateLimit), Retry-After, and RFC 9457 problem documents.
//
// A [Middleware] wraps any http.Handler; its Handle method is a
// func(http.Handler) http.Handler, the shape routers such as chi or
// net/http's ServeMux chains expect, and its Limit method is the building
// block of adapters for other routers (the ginlimit module for Gin).
//
// By default a request is keyed by the connection's peer address and never by
// a forwarding header: list your proxies with [ClientAddr] (or [NewClients],
// for more options) to believe X-Forwarded-For from them. An IPv6 client is
// keyed by its /64, as Tollgate's service keys it. Refusals answer 429 with Retry-After and the same
// problem document as the service:
//
//	{"type":"urn:tollgate:problem:rate-limit-exceeded","title":"Too Many Requests","status":429,
//	 "detail":"rate limit of 3 per 1m0s exceeded for policy \"api\"","violated-policies":["api"],
//	 "limit":3,"remaining":0,"reset_after":15,"retry_after":15}
//
// When the store cannot decide, the request is refused with 503 ([FailClosed],
// the default) or let through uncounted ([FailOpen]).
package httplimit
