package client_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// built is the service binary built once for the package when LIMITER_BIN
// is not set.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// binary returns $LIMITER_BIN (set by make test) or the service built from
// the workspace into a temporary folder.
func binary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("LIMITER_BIN"); bin != "" {
		return bin
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "client-test-bin-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "limiter")
		out, err := exec.Command("go", "build", "-o", built.bin, "github.com/tollgate/tollgate/services/limiter").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.bin
}

// service is one running service process.
type service struct {
	url, grpcAddr string
	stop          func()
}

// policiesYAML are the policies every test service has.
const policiesYAML = `policies:
  api:   { algorithm: sliding_log, limit: 3, window: 60s }
  ping:  { algorithm: fixed_window, limit: 3, window: 60s }
  check: { algorithm: sliding_log, limit: 10, window: 60s }
`

// envoyYAML is the Envoy rules file of every test service.
const envoyYAML = `domain: shop
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
`

// startService starts the binary on free loopback ports (HTTP and gRPC) with
// the test policies and extra flags; it is stopped at cleanup, or earlier by
// stop.
func startService(t *testing.T, flags ...string) *service {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "limiter.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(policiesYAML), 0o600))
	rules := filepath.Join(dir, "envoy")
	require.NoError(t, os.Mkdir(rules, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(rules, "shop.yaml"), []byte(envoyYAML), 0o600))
	args := append([]string{"--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0", "--log-format=json",
		"--config=" + cfg, "--envoy-config=" + rules, "--store=memory"}, flags...)
	cmd := exec.Command(binary(t), args...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	var logs strings.Builder
	listening := make(chan service, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			logs.Write(lines.Bytes())
			logs.WriteByte('\n')
			var l struct {
				Msg, Addr string
				GRPCAddr  string `json:"grpc_addr"`
			}
			if json.Unmarshal(lines.Bytes(), &l) == nil && l.Msg == "listening" {
				listening <- service{url: "http://" + l.Addr, grpcAddr: l.GRPCAddr}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second): // a hang guard
				_ = cmd.Process.Kill()
				<-done
			}
			<-copied
		})
	}
	t.Cleanup(stop)
	select {
	case s := <-listening:
		s.stop = stop
		return &s
	case <-copied:
		t.Fatalf("the service exited before listening; logs:\n%s", logs.String())
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the service did not start listening")
	}
	return nil
}
