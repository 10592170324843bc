package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startService starts the binary at $LIMITER_BIN on a free loopback port with
// the demo policies and the memory store, and returns its base URL and a
// function that stops it (SIGTERM, then SIGKILL after 10s) and reports
// whether it exited. Without $LIMITER_BIN the test skips, except under
// CI=true where it fails.
func startService(t *testing.T) (string, func() error) {
	t.Helper()
	bin := os.Getenv("LIMITER_BIN")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("LIMITER_BIN is not set under CI=true: run `make test`, which builds bin/limiter and sets it")
		}
		t.Skip("LIMITER_BIN is not set: run `make test`, which builds bin/limiter and sets it")
	}
	config, err := filepath.Abs(filepath.Join("configs", "demo.yaml"))
	require.NoError(t, err)
	target := deadURL(t)
	cmd := exec.Command(bin, "--addr", target[len("http://"):], "--config", config, "--store", "memory")
	cmd.Dir = t.TempDir()
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case stopErr = <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				stopErr = <-exited
			}
		})
		return stopErr
	}
	t.Cleanup(func() {
		_ = stop()
		if t.Failed() {
			t.Logf("service output:\n%s", logs.String())
		}
	})
	require.Eventually(t, func() bool {
		return checkHealth(t.Context(), http.DefaultClient, target) == nil
	}, 15*time.Second, 50*time.Millisecond, "the service never answered /healthz")
	return target, stop
}

func TestEndToEndAgainstTheService(t *testing.T) {
	target, stop := startService(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	// The probe, the report and the plots, through the command line.
	code := run(t.Context(), []string{"race", "--target", target, "--out", out, "--n", "200", "--rounds", "2"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	assert.FileExists(t, filepath.Join(out, "report.md"))
	decodePNG(t, filepath.Join(out, "race.png"))

	e := testEnv(t, "all", "--target", target, "--out", out, "--cycles", "1", "--n", "200", "--rounds", "2")
	limit := e.opts.limit

	b, err := runBoundary(t.Context(), e)
	require.NoError(t, err)
	worst := map[string]int{}
	for _, r := range b.Rows {
		assert.Zero(t, r.Failed, r.Policy)
		worst[r.Policy] = r.MaxSpan
	}
	assert.Greater(t, worst["fixed_window"], int(limit), "the fixed window admits more than its limit across a boundary")
	assert.LessOrEqual(t, worst["sliding_log"], int(limit), "the sliding log never does")

	r, err := runRace(t.Context(), e)
	require.NoError(t, err)
	for _, row := range r.Rows {
		require.Len(t, row.Rounds, 2, row.Policy)
		for _, rd := range row.Rounds {
			assert.Zero(t, rd.Failed, row.Policy)
			if row.Policy == "sliding_log" {
				require.Less(t, rd.Took, e.opts.window, "a round outlasted the window; the machine is too loaded to judge")
				assert.Equal(t, int(limit), rd.Admitted, "sliding_log admits exactly the limit")
			}
		}
	}

	require.NoError(t, stop(), "the service exits cleanly on SIGTERM")
	assert.Error(t, checkHealth(t.Context(), http.DefaultClient, target), "the service is stopped")
}
