package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	// floodEnv makes the test binary a flooder (see flood) instead of
	// running tests.
	floodEnv = "TOLLGATE_TEST_FLOOD"
	// floodConns is how many idle connections each of the two flooders
	// holds: 20,000 in all, split over two processes so that each stays
	// well within a descriptor limit of 20,000.
	floodConns = 10_000
	// serviceNOFILE is the service's descriptor limit in the test.
	serviceNOFILE = 4096
)

// flood dials floodConns connections to addr from 127.0.0.2, 32 at a time
// (a dial the server does not take times out after a second; the whole
// flood stops after 20 seconds), prints "dialled N", and holds them, sending
// nothing, until its standard input closes. It returns the exit status.
func flood(addr string) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < floodConns+256 {
		fmt.Printf("skip: descriptor limit %d is below %d\n", lim.Cur, floodConns+256)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	var held []net.Conn
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: time.Second}
			for next.Add(1) <= floodConns && ctx.Err() == nil {
				if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("dialled %d\n", len(held))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
	return 0
}

// startFlooders runs the test binary as a flooder of each address, all at
// once, and waits until they hold their connections; they stop at cleanup.
func startFlooders(t *testing.T, addrs ...string) {
	t.Helper()
	var outs []*bufio.Reader
	for _, addr := range addrs {
		outs = append(outs, startFlooder(t, addr))
	}
	for i, out := range outs {
		line, err := out.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "skip:") {
			t.Skip(line)
		}
		t.Logf("flooder of %s: %s", addrs[i], strings.TrimSpace(line))
	}
}

func startFlooder(t *testing.T, addr string) *bufio.Reader {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), floodEnv+"="+addr)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second): // a hang guard
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return bufio.NewReader(stdout)
}

// startLimited starts the binary under a descriptor limit of nofile (set
// by the shell that execs it) and returns its HTTP and gRPC addresses.
func startLimited(t *testing.T, nofile int, args ...string) (httpAddr, grpcAddr string) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", `ulimit -n "$0" && exec "$@"`, strconv.Itoa(nofile), sharedBinary(t)}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		var l struct {
			Msg      string
			Addr     string
			GRPCAddr string `json:"grpc_addr"`
		}
		if json.Unmarshal(lines.Bytes(), &l) == nil && l.Msg == "listening" {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return l.Addr, l.GRPCAddr
		}
	}
	t.Fatal("the service exited before listening")
	return "", ""
}

// TestIdleConnectionsLeaveHealthzAnswering: 20,000 idle connections from
// one client (127.0.0.2), half to the HTTP port and half to the gRPC port
// (never sending a preface), against a service limited to 4,096
// descriptors: another client's /healthz still answers. Without bounds the
// service ran out of descriptors (accept: too many open files) and stopped
// answering anyone.
func TestIdleConnectionsLeaveHealthzAnswering(t *testing.T) {
	skipShort(t)
	envoyDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(envoyDir, "a.yaml"), []byte("domain: d\n"), 0o600))
	httpAddr, grpcAddr := startLimited(t, serviceNOFILE, "--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0",
		"--envoy-config="+envoyDir, "--store=memory", "--log-format=json")
	startFlooders(t, httpAddr, grpcAddr)

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var last error
	ok := assert.Eventually(t, func() bool {
		resp, err := client.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			last = err
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 100*time.Millisecond, "GET /healthz from 127.0.0.1 while 127.0.0.2 holds 20,000 idle connections")
	if !ok {
		t.Logf("last error: %v", last)
	}
}
