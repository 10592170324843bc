package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestStartedAsRatelimitReadsThePeersEnvironment starts the binary under
// envoyproxy/ratelimit's name, as its image's /bin/ratelimit, with only
// the peer's variables: it listens on PORT and GRPC_PORT, answers the
// peer's /healthcheck, reaches Redis by REDIS_SOCKET_TYPE/REDIS_URL, and
// applies the rules of RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config and logs at
// LOG_LEVEL (the peer's default, WARN, would hide the INFO lines) in
// LOG_FORMAT.
func TestStartedAsRatelimitReadsThePeersEnvironment(t *testing.T) {
	skipShort(t)
	redis := redistest.Start(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "ratelimit")
	data, err := os.ReadFile(binary(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	rules := filepath.Join(dir, "data", "ratelimit", "config")
	require.NoError(t, os.MkdirAll(rules, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(rules, "edge.yaml"), []byte(
		"domain: edge\ndescriptors:\n  - key: path\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n"), 0o600))

	port, grpcPort := freeTCPPort(t), freeTCPPort(t)
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = []string{
		"HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port),
		"GRPC_HOST=127.0.0.1", fmt.Sprintf("GRPC_PORT=%d", grpcPort),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr(),
		"RUNTIME_ROOT=" + filepath.Join(dir, "data"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"USE_STATSD=false", "LOG_LEVEL=info", "LOG_FORMAT=json",
	}
	var (
		mu   sync.Mutex
		logs strings.Builder
	)
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	output := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second): // a hang guard
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	for deadline := time.Now().Add(60 * time.Second); ; { // a hang guard, not a timing assertion
		resp, err := hc.Get(base + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("ratelimit exited:\n%s", output())
		default:
		}
		require.True(t, time.Now().Before(deadline), "no /healthcheck 200 on PORT:\n%s", output())
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", grpcPort))
	require.NoError(t, err, "nothing listens on GRPC_PORT")
	conn.Close()

	resp, err := hc.Post(base+"/json", "application/json", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/a"}]}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var answer struct {
		OverallCode string `json:"overallCode"`
		Statuses    []struct {
			CurrentLimit struct {
				RequestsPerUnit int    `json:"requestsPerUnit"`
				Unit            string `json:"unit"`
			} `json:"currentLimit"`
		} `json:"statuses"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
	assert.Equal(t, "OK", answer.OverallCode)
	require.Len(t, answer.Statuses, 1, "the RUNTIME_* folder's rule")
	assert.Equal(t, 2, answer.Statuses[0].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, "HOUR", answer.Statuses[0].CurrentLimit.Unit)
	assert.True(t, strings.HasPrefix(output(), `{"time":`), "LOG_FORMAT=json: %s", output())
}
