// Package canon puts client input in one canonical form before it becomes a
// rate-limit key, so that spellings of one thing share one budget: endpoints
// (Unicode NFC, control characters refused, optional folding), peer
// addresses (IPv6 grouped by prefix, IPv4-mapped addresses folded), and JSON
// objects whose members are named once.
package canon
