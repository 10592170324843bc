package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/openapitest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(floodEnv); spec != "" {
		var fs floodSpec
		if err := json.Unmarshal([]byte(spec), &fs); err != nil {
			fmt.Fprintln(os.Stderr, floodEnv+":", err)
			os.Exit(2)
		}
		os.Exit(flood(fs))
	}
	gin.SetMode(gin.TestMode)
	// Every request the tests send with http.Get or the shared client, and
	// every answer of the binary, is checked against the OpenAPI document.
	checked, err := openapitest.NewCollector()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.DefaultTransport = checked.Wrap(http.DefaultTransport)
	client.Transport = checked.Wrap(client.Transport)
	code := m.Run()
	removeSharedBinary()
	if err := checked.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: answers the OpenAPI document does not describe:\n%v\n", err)
		code = 1
	}
	os.Exit(code)
}

func noEnv(string) string { return "" }

func TestHelpListsEveryFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"--help"}, noEnv, &out, &errOut))
	for _, flag := range []string{"--addr", "--config", "--store", "--sqlite-path", "--redis-url", "--grpc-addr",
		"--envoy-config", "--trusted-proxies", "--prune-interval", "--memory-max-keys", "--max-header-bytes",
		"--read-header-timeout", "--read-timeout", "--write-timeout", "--idle-timeout", "--shutdown-timeout",
		"--log-level", "--log-format", "--tls-cert", "--tls-key", "--tls-client-ca", "--grpc-tls-cert", "--internal-tls-client-ca", "LIMITER_ADMIN_KEY"} {
		assert.Contains(t, out.String(), flag)
	}
	assert.Empty(t, errOut.String())
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantLine string
	}{
		{"bad flag value", []string{"--store=etcd"}, nil, 2, `limiter: config: --store: "etcd" is not one of sqlite, memory, redis`},
		{"bad env value", nil, map[string]string{"LIMITER_PRUNE_INTERVAL": "0"}, 2,
			`limiter: config: LIMITER_PRUNE_INTERVAL: "0" is not a positive duration such as 500ms, 10s or 1m`},
		{"envoy config not a folder", []string{"--envoy-config=/nonexistent/ratelimit"}, nil, 2,
			`limiter: config: --envoy-config: "/nonexistent/ratelimit" is not a folder`},
		{"tls certificate without its key", nil, map[string]string{"LIMITER_TLS_CERT": "/etc/tollgate/cert.pem"}, 2,
			`limiter: config: LIMITER_TLS_KEY: must be set with LIMITER_TLS_CERT`},
		{"tls certificate unreadable", []string{"--tls-cert=/nonexistent/cert.pem", "--tls-key=/nonexistent/key.pem"}, nil, 2,
			`limiter: config: --tls-cert: "/nonexistent/cert.pem" cannot be read: no such file or directory`},
		{"runtime failure", []string{"--store=memory", "--addr=256.0.0.1:1"}, nil, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, &out, &errOut)
			var printed bytes.Buffer
			assert.Equal(t, tt.wantCode, exitCode(err, &printed))
			lines := strings.Split(strings.TrimSuffix(printed.String(), "\n"), "\n")
			require.Len(t, lines, 1, "one line on stderr")
			if tt.wantLine != "" {
				assert.Equal(t, tt.wantLine, lines[0])
			}
		})
	}
	var printed bytes.Buffer
	assert.Equal(t, 0, exitCode(nil, &printed))
	assert.Empty(t, printed.String())
	assert.Equal(t, 1, exitCode(errors.New("a\nb"), &printed))
	assert.Equal(t, "limiter: a b\n", printed.String())
}

// binary returns the limiter binary: $LIMITER_BIN (set by make test) or the
// one built once for the package.
func binary(t *testing.T) string {
	t.Helper()
	return sharedBinary(t)
}

// TestBinaryServesAndStopsOnSIGTERM starts the real binary on a free port,
// uses it over HTTP, and stops it with SIGTERM: exit status 0.
func TestBinaryServesAndStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	dir := t.TempDir()
	cmd := exec.Command(binary(t), "--addr=127.0.0.1:0", "--log-format=json", "--access-log=all", "--sqlite-path="+filepath.Join(dir, "db", "limiter.db"))
	cmd.Env = append(os.Environ(), "LIMITER_ADMIN_KEY=bin-admin-secret")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	logs := bufio.NewScanner(stderr)
	require.True(t, logs.Scan(), "the binary logs where it listens")
	var first struct{ Msg, Addr string }
	require.NoError(t, json.Unmarshal(logs.Bytes(), &first), logs.Text())
	require.Equal(t, "listening", first.Msg)
	assert.NotContains(t, logs.Text(), "bin-admin-secret")
	var rest bytes.Buffer
	copied := make(chan struct{})
	go func() {
		for logs.Scan() {
			rest.Write(logs.Bytes())
			rest.WriteByte('\n')
		}
		close(copied)
	}()

	for i := 1; i <= 4; i++ {
		resp, err := http.Get("http://" + first.Addr + "/ping")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		want := http.StatusOK
		if i == 4 {
			want = http.StatusTooManyRequests
		}
		assert.Equal(t, want, resp.StatusCode, "ping %d", i)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status 0 after SIGTERM")
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("the binary did not stop after SIGTERM")
	}
	<-copied
	assert.Contains(t, rest.String(), `"msg":"shutting down"`)
	assert.Equal(t, 4, strings.Count(rest.String(), `"route":"/ping"`), "one access-log line per request")
}

// TestShippedConfigsStart starts the service on each configuration the
// repository ships for its tools (tools/loadgen/configs, used by make bench
// and make demo), Envoy rules included: a policy the loader refuses there
// would otherwise only show when someone runs the bench.
func TestShippedConfigsStart(t *testing.T) {
	dir := filepath.Join("..", "..", "tools", "loadgen", "configs")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // start, then stop at once
			args := []string{"--config", file, "--store", "memory", "--addr", "127.0.0.1:0",
				"--envoy-config", filepath.Join(dir, "envoy-bench")}
			var errOut bytes.Buffer
			require.NoError(t, run(ctx, args, noEnv, io.Discard, &errOut), errOut.String())
		})
	}
}

// The started binary with --ping-key api_key,peer and no --api-keys-file
// logged "listening" and served (issue 35); it now exits 2 at once with
// the one line naming the setting.
func TestBinaryRefusesAnAPIKeySourceWithoutKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary(t), "--addr=127.0.0.1:0", "--store=memory", "--ping-key=api_key,peer")
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, stderr.String())
	assert.Equal(t, 2, exit.ExitCode())
	assert.Equal(t, "limiter: config: --ping-key: api_key needs --api-keys-file (the digests of the accepted X-Api-Key values): without it every X-Api-Key would be refused (401)\n", stderr.String())
}
