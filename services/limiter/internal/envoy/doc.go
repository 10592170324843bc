// Package envoy makes Tollgate a drop-in replacement for envoyproxy/ratelimit:
// it answers Envoy's rate-limit gRPC API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) and lets the
// HTTP service answer the same requests on POST /json, in protobuf's JSON
// mapping (DecodeJSON, AppendJSON). Both transports decide through Decide,
// whose errors are plain Go errors; only the gRPC server (grpc.go) turns
// them into gRPC statuses.
//
// The rules a request is matched with (envoyproxy/ratelimit's YAML
// configuration, read from files or pushed by xDS) are the rule model of
// internal/envoyrules, which knows no transport. Every decision goes
// through the service's decision layer and its limiter.Store, so memory,
// SQLite and Redis all work, and several instances on one Redis share the
// counters.
package envoy
