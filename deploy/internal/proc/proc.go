// Package proc starts bin/limiter for the deploy module's tests, as an
// operator's runtime would: a separate process with its own arguments and
// environment, stopped with SIGTERM at cleanup.
package proc

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BinEnv names the variable holding the path of the limiter binary; make
// test sets it to bin/limiter.
const BinEnv = "LIMITER_BIN"

// readyWithin bounds the wait for a started process to answer; a hang
// guard on a busy machine, not a timing assertion.
const readyWithin = 60 * time.Second

// Bin returns $LIMITER_BIN, or skips the test (fails it under CI=true).
func Bin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: run make test, which builds bin/limiter", BinEnv)
		}
		t.Skipf("%s is not set: run make test, which builds bin/limiter", BinEnv)
	}
	return bin
}

// FreePort returns a TCP port that was free a moment ago on every address
// (a rendered pod listens on 0.0.0.0). Another process may take it before
// the limiter binds it: see Process.BindFailed.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Process is a started limiter.
type Process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// Output returns what the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Start runs bin with args and exactly env (nothing of the test's own
// environment leaks in), in dir, and stops it at cleanup.
func Start(t testing.TB, bin, dir string, args, env []string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = dir
	p := &Process{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(readyWithin):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("limiter's output:\n%s", p.out.String())
		}
	})
	return p
}

// WaitStatus polls url until it answers want, and fails the test when the
// process exits first or readyWithin passes. tlsConf, when not nil, is used
// for an https URL.
func (p *Process) WaitStatus(t testing.TB, url string, want int, tlsConf *tls.Config) {
	t.Helper()
	if err := p.Poll(url, want, tlsConf); err != nil {
		t.Fatal(err)
	}
}

// Poll is WaitStatus returning its failure: the process exited (see
// BindFailed) or url did not answer want within readyWithin.
func (p *Process) Poll(url string, want int, tlsConf *tls.Config) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(readyWithin)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("the limiter exited before %s answered %d (%s):\n%s", url, want, last, p.out.String())
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = fmt.Sprintf("status %d", resp.StatusCode)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not a wait for time to pass
	}
	return fmt.Errorf("%s did not answer %d within %s (%s):\n%s", url, want, readyWithin, last, p.out.String())
}

// BindFailed reports whether the process exited because a port it was
// given was taken meanwhile by another process: the caller picks other
// ports and starts again.
func (p *Process) BindFailed() bool {
	select {
	case <-p.done:
		return strings.Contains(p.out.String(), "address already in use")
	default:
		return false
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
