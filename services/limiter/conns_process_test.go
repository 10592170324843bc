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
	"regexp"
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
	// running tests; its value is a floodSpec.
	floodEnv = "TOLLGATE_TEST_FLOOD"
	// serviceNOFILE is the service's descriptor limit in the test.
	serviceNOFILE = 4096
)

// floodSpec is what one flooder process does: dial Conns connections to
// Addr from the loopback address From and hold them, either silent (Ask
// false: the connection sends nothing) or idle keep-alive (Ask: each sends
// one GET /healthz, reads the answer and keeps the connection; one that gets
// no answer is closed).
type floodSpec struct {
	Addr, From string
	Conns      int
	Ask        bool
}

// flood dials spec.Conns connections, 32 at a time (a dial the server does
// not take times out after a second, an answer after 5 seconds; the whole
// flood stops after 30 seconds), prints "dialled N held M", and holds the M kept
// connections until its standard input closes. It returns the exit status.
func flood(spec floodSpec) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < uint64(spec.Conns)+256 {
		fmt.Printf("skip: descriptor limit %d is below %d\n", lim.Cur, spec.Conns+256)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var held []net.Conn
	var next, dialled atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(spec.From)}, Timeout: time.Second}
			for next.Add(1) <= int64(spec.Conns) && ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", spec.Addr)
				if err != nil {
					continue
				}
				dialled.Add(1)
				if spec.Ask && !askHealthz(c) {
					c.Close()
					continue
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Printf("dialled %d held %d\n", dialled.Load(), len(held))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
	return 0
}

// askHealthz sends GET /healthz on c and reports whether a 200 came back
// within 5 seconds; c stays open (keep-alive) either way.
func askHealthz(c net.Conn) bool {
	if c.SetDeadline(time.Now().Add(5*time.Second)) != nil {
		return false
	}
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: tollgate\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startFlooders runs the test binary as a flooder for each spec, all at
// once, and waits until they hold their connections; they stop at cleanup.
func startFlooders(t *testing.T, specs ...floodSpec) {
	t.Helper()
	var outs []*bufio.Reader
	for _, spec := range specs {
		outs = append(outs, startFlooder(t, spec))
	}
	for i, out := range outs {
		line, err := out.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "skip:") {
			t.Skip(line)
		}
		t.Logf("flooder of %s from %s: %s", specs[i].Addr, specs[i].From, strings.TrimSpace(line))
	}
}

func startFlooder(t *testing.T, spec floodSpec) *bufio.Reader {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), floodEnv+"="+string(b))
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
	startFlooders(t, floodSpec{Addr: httpAddr, From: "127.0.0.2", Conns: 10_000}, floodSpec{Addr: grpcAddr, From: "127.0.0.2", Conns: 10_000})

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

// TestFourAddressesCannotLockOutAFifth: four client addresses (127.0.0.2..5)
// try 5,000 idle keep-alive connections each (20,000 in all: each sends one
// GET /healthz and holds the connection) against a service limited to 1,024
// descriptors; a fifth address still gets /healthz and /ping answered.
// With a quarter of the slots per client, four addresses took them all and
// every other client went unanswered.
func TestFourAddressesCannotLockOutAFifth(t *testing.T) {
	skipShort(t)
	httpAddr, _ := startLimited(t, 1024, "--addr=127.0.0.1:0", "--store=memory", "--log-format=json")
	var specs []floodSpec
	for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		specs = append(specs, floodSpec{Addr: httpAddr, From: from, Conns: 5_000, Ask: true})
	}
	startFlooders(t, specs...)

	fifth := clientFrom(t, "127.0.0.6")
	for _, path := range []string{"/healthz", "/ping"} {
		resp, err := fifth.Get("http://" + httpAddr + path)
		if !assert.NoError(t, err, "GET %s from a fifth address while four hold idle connections", path) {
			continue
		}
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "GET %s from a fifth address", path)
	}
	// The clients over their share swapped their own idle connections or
	// were refused, and /metrics says how many.
	resp, err := fifth.Get("http://" + httpAddr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	var turnedAway float64
	for _, name := range []string{"tollgate_connections_refused_total", "tollgate_connections_reclaimed_total"} {
		m := regexp.MustCompile(`(?m)^` + name + `\{listener="addr"\} (\S+)$`).FindSubmatch(body)
		require.NotNil(t, m, "%s in /metrics", name)
		v, err := strconv.ParseFloat(string(m[1]), 64)
		require.NoError(t, err)
		turnedAway += v
	}
	assert.Greater(t, turnedAway, 0.0, "connections refused or reclaimed")
}

// TestTrustedProxyUsesEverySlot: 250 connections open at once from one
// address listed in --trusted-proxies, against a service limited to 1,024
// descriptors, each asking 10 times: every answer arrives (the per-client
// share does not apply to a proxy that speaks for many clients).
func TestTrustedProxyUsesEverySlot(t *testing.T) {
	skipShort(t)
	const conns, asks, proxy = 250, 10, "127.0.0.7"
	httpAddr, _ := startLimited(t, 1024, "--addr=127.0.0.1:0", "--store=memory", "--log-format=json", "--trusted-proxies="+proxy)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(proxy)}, Timeout: 10 * time.Second}
	var failed atomic.Int64
	var firsts, wg sync.WaitGroup
	firsts.Add(conns)
	for range conns {
		wg.Go(func() {
			c, err := d.Dial("tcp", httpAddr)
			if err != nil {
				failed.Add(asks)
				firsts.Done()
				return
			}
			defer c.Close()
			for i := range asks {
				if !askHealthz(c) {
					failed.Add(int64(asks - i))
					if i == 0 {
						firsts.Done()
					}
					return
				}
				if i == 0 {
					// Every connection is open and answered once before any
					// asks again: 250 at once.
					firsts.Done()
					firsts.Wait()
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, failed.Load(), "GET /healthz over %d connections from the trusted proxy %s, %d each: unanswered", conns, proxy, asks)
}
