//go:build pprof

package main

import (
	"log"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
)

// A binary built with -tags pprof serves net/http/pprof on
// LIMITER_PPROF_ADDR (a loopback address, say 127.0.0.1:6060): the profiles
// docs/benchmarks.md reads come from it. Release builds have no such
// listener.
func init() {
	addr := os.Getenv("LIMITER_PPROF_ADDR")
	if addr == "" {
		return
	}
	go func() { log.Println(http.ListenAndServe(addr, nil)) }()
}
