// Package canon puts client input in one canonical form before it becomes a
// rate-limit key, so that spellings of one thing share one budget: endpoints
// (Unicode NFC, control characters refused, optional folding) and JSON
// objects whose members are named once. Peer addresses are keyed by the
// library's httplimit.Clients, the one implementation the service and the
// middleware share.
package canon
