// Command lab measures what each of Tollgate's rate-limiting algorithms
// costs and how far it strays from an exact sliding log. It is the
// library's first outside user: it imports pkg/limiter (never the service)
// and drives the algorithms with a virtual clock, the trace's own
// timestamps, so that hours of traffic replay in seconds.
//
// Run "lab --help" for the commands and flags.
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
