package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logLine is the part of a JSON log line the test reads.
type logLine struct {
	Msg, Addr, Error string
}

// TestBinaryReloadsOnSIGHUP sends a real SIGHUP to the real binary: a
// raised limit takes effect, a bad file is refused with one line naming the
// field, and the policies in force stay.
func TestBinaryReloadsOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	file := filepath.Join(t.TempDir(), "limiter.yaml")
	writeFile := func(text string) { require.NoError(t, os.WriteFile(file, []byte(text), 0o600)) }
	writeFile("policies:\n  ping: {limit: 1}\n")
	cmd := exec.Command(binary(t), "--addr=127.0.0.1:0", "--log-format=json", "--store=memory", "--config="+file)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	logs := make(chan logLine, 64)
	go func() {
		defer close(logs)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var l logLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg != "request" {
				logs <- l
			}
		}
	}()
	next := func(want string) logLine {
		t.Helper()
		for {
			select {
			case l, ok := <-logs:
				require.True(t, ok, "the binary exited while waiting for %q", want)
				if l.Msg == want {
					return l
				}
			case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
				t.Fatalf("no %q log line", want)
			}
		}
	}
	addr := next("listening").Addr
	pingStatus := func() int {
		t.Helper()
		resp, err := http.Get("http://" + addr + "/ping")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, pingStatus())
	require.Equal(t, http.StatusTooManyRequests, pingStatus())

	writeFile("policies:\n  ping: {limit: 4}\n")
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	next("reloaded")
	assert.Equal(t, http.StatusOK, pingStatus(), "3 <= 4 (the fixed window counts refusals too): the raised limit applies")

	writeFile("policies:\n  ping: {limit: nine}\n")
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	refused := next("reload refused; the running policies stay")
	assert.Contains(t, refused.Error, "policies.ping.limit")
	assert.Equal(t, http.StatusOK, pingStatus(), "4 <= 4: still the reloaded limit")
	assert.Equal(t, http.StatusTooManyRequests, pingStatus())

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	drained := make(chan struct{})
	go func() {
		for range logs { // stderr is read to its end before Wait closes it
		}
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the binary did not stop after SIGTERM")
	}
	require.NoError(t, cmd.Wait(), "exit status 0 after SIGTERM")
}
