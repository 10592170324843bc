// Command loadgen drives a running Tollgate service over HTTP with vegeta's
// library and compares its rate-limiting algorithms side by side: the fixed
// window's double burst at a window boundary, the check-then-act race under
// concurrency, and throughput and latency per algorithm. Each run writes a
// Markdown report with PNG plots into --out and prints a summary. The
// baseline command serves a limiter-free Gin handler, the HTTP ceiling.
//
// Run "loadgen --help" for the commands and flags.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
