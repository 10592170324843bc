package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// wrkRun is what one wrk run reports (the done() line of wrkScript).
type wrkRun struct {
	Requests     int64 // answers, whatever their status
	Duration     time.Duration
	SocketErrors int64 // connect, read, write errors and timeouts
	StatusErrors int64 // answers that were not 2xx or 3xx
	Lat          Latencies
}

// parseWrkOutput finds the loadgen-wrk line in wrk's output.
func parseWrkOutput(out []byte) (wrkRun, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "loadgen-wrk" {
			continue
		}
		if len(f) != 12 {
			return wrkRun{}, fmt.Errorf("loadgen: wrk: %d fields in %q, want 12", len(f), sc.Text())
		}
		var n [11]int64
		for i, s := range f[1:] {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				return wrkRun{}, fmt.Errorf("loadgen: wrk: field %d %q is not a count", i+1, s)
			}
			n[i] = v
		}
		us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
		return wrkRun{
			Requests: n[0], Duration: us(n[1]), SocketErrors: n[2] + n[3] + n[4] + n[5], StatusErrors: n[6],
			Lat: Latencies{P50: us(n[7]), P90: us(n[8]), P99: us(n[9]), Max: us(n[10])},
		}, nil
	}
	return wrkRun{}, errors.New("loadgen: wrk: no loadgen-wrk line in its output")
}

// wholeSeconds formats d for wrk's -d and --timeout: whole seconds, at least 1.
func wholeSeconds(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Second/2)/time.Second), 1), 10) + "s"
}

// runWrk runs wrk (one thread, conns connections) on url with script for
// du and reports it as a benchRun (CPU is left to the caller).
func runWrk(ctx context.Context, wrk, url, script string, conns int, du, timeout time.Duration) (benchRun, error) {
	dir, err := os.MkdirTemp("", "loadgen-wrk")
	if err != nil {
		return benchRun{}, fmt.Errorf("loadgen: wrk: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "bench.lua")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		return benchRun{}, fmt.Errorf("loadgen: wrk: %w", err)
	}
	cmd := exec.CommandContext(ctx, wrk, "-t1", "-c"+strconv.Itoa(conns), "-d"+wholeSeconds(du),
		"--timeout", wholeSeconds(timeout), "-s", path, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return benchRun{}, fmt.Errorf("loadgen: wrk: %w: %s", err, bytes.TrimSpace(out))
	}
	w, err := parseWrkOutput(out)
	if err != nil {
		return benchRun{}, fmt.Errorf("%w; its output: %s", err, bytes.TrimSpace(out))
	}
	run := benchRun{
		OK:      int(w.Requests - w.StatusErrors),
		Failed:  int(w.StatusErrors + w.SocketErrors),
		Elapsed: w.Duration,
		Lat:     w.Lat,
	}
	if run.Failed > 0 {
		run.FirstFailure = fmt.Sprintf("wrk: %d answers not 2xx/3xx, %d socket errors", w.StatusErrors, w.SocketErrors)
	}
	return run, nil
}
