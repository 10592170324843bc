// Package redistest gives tests a real Redis: a private redis-server on a
// free loopback port, or the server named by LIMITER_TEST_REDIS_URL.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
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

	"github.com/redis/go-redis/v9"
)

// EnvURL names the variable that points tests at an existing Redis instead of
// a private redis-server.
const EnvURL = "LIMITER_TEST_REDIS_URL"

// EnvNoTopologies names the variable that, set to anything, skips the
// tests that need a Redis Cluster or a Sentinel set-up (StartCluster,
// StartSentinel: six and five processes), also under CI=true: make check,
// the quick loop, sets it; make test does not.
const EnvNoTopologies = "LIMITER_TEST_NO_TOPOLOGIES"

// skipTopology skips the test when EnvNoTopologies is set, and says so.
func skipTopology(t testing.TB, what string) bool {
	t.Helper()
	if os.Getenv(EnvNoTopologies) == "" {
		return false
	}
	t.Skip("redistest: " + EnvNoTopologies + " is set: no " + what)
	return true
}

// readyWithin bounds the wait for a started redis-server to answer PING.
const readyWithin = 10 * time.Second

// prefixes numbers the key prefixes handed out by this process.
var prefixes atomic.Int64

// Server is a Redis for one test. Its methods must be called from the test's
// goroutine (they may skip or fail the test), except URL, Addr and Prefix,
// which are safe anywhere.
type Server struct {
	t      testing.TB
	url    string
	addr   string
	prefix string
	shared bool // from EnvURL: not ours to stop, flush or restart

	bin, dir string
	extra    string // configuration lines after the common ones
	sentinel bool   // run as a sentinel (redis-server --sentinel)
	tls      *TLS   // a second, TLS port (StartTLS)
	tlsAddr  string
	port     int
	mu       sync.Mutex
	proc     *exec.Cmd
	exited   chan struct{}
}

// Start starts a private redis-server (binary "redis-server" on PATH, no
// persistence: --save "" --appendonly no, its directory in t.TempDir()) on a
// free loopback port and stops it at cleanup; or, when LIMITER_TEST_REDIS_URL
// is set, uses that server, where the test must keep to its own key prefix
// (Prefix), whose keys are deleted at cleanup (never FLUSHALL). Without
// either it skips the test with a reason naming redis-server and the
// variable, except when CI=true, where it fails the test.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, prefix: fmt.Sprintf("tgtest-%d-%d", os.Getpid(), prefixes.Add(1))}
	if url := os.Getenv(EnvURL); url != "" {
		o, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal("redistest: " + EnvURL + ": " + err.Error())
			return nil
		}
		s.url, s.addr, s.shared = url, o.Addr, true
		t.Cleanup(s.deleteKeys)
		return s
	}
	return startPrivate(t, "", false)
}

// TLS is what StartTLS serves: the server's certificate and key, the CA a
// client's certificate must chain to (tls-auth-clients yes), and the
// password of the default user (requirepass).
type TLS struct {
	Cert, Key, ClientCA string
	Password            string
}

// StartTLS starts a private server as Start does, with a second port
// (TLSAddr) that speaks TLS with the files of c and asks every client for
// a certificate; both ports need c.Password. Never a shared server.
func StartTLS(t testing.TB, c TLS) *Server {
	t.Helper()
	extra := fmt.Sprintf("tls-cert-file %q\ntls-key-file %q\ntls-ca-cert-file %q\ntls-auth-clients yes\nrequirepass %q\n",
		c.Cert, c.Key, c.ClientCA, c.Password)
	return (&Server{tls: &c}).startPrivate(t, extra, false)
}

// TLSAddr returns the host:port of StartTLS's TLS port.
func (s *Server) TLSAddr() string { return s.tlsAddr }

// startPrivate starts a private server whose configuration ends with the
// lines extra, a sentinel when sentinel is true, and stops it at cleanup.
// Without redis-server it skips or fails the test as Start does.
func startPrivate(t testing.TB, extra string, sentinel bool) *Server {
	return (&Server{}).startPrivate(t, extra, sentinel)
}

func (s *Server) startPrivate(t testing.TB, extra string, sentinel bool) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	if bin == "" {
		return nil
	}
	s.t, s.prefix = t, fmt.Sprintf("tgtest-%d-%d", os.Getpid(), prefixes.Add(1))
	s.bin, s.dir, s.extra, s.sentinel = bin, t.TempDir(), extra, sentinel
	t.Cleanup(s.Stop)
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err == nil {
			err = s.launch(port)
		}
		if err == nil {
			return s
		}
		if attempt == 3 { // another process took the port each time
			t.Fatal("redistest: " + err.Error())
			return nil
		}
	}
}

// lookPath returns the path of the program name, or "" after skipping the
// test (failing it under CI=true) when it is not on PATH.
func lookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	why := "redistest: " + name + " is not on PATH and " + EnvURL + " is not set"
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	} else {
		t.Skip(why)
	}
	return ""
}

// URL returns the server's URL, redis://127.0.0.1:PORT/0 for a private one.
func (s *Server) URL() string { return s.url }

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Prefix returns a key prefix that no other Server of any test shares: tests
// pass it to the store (redisstore.WithPrefix) so that a shared server's keys
// stay apart and can be deleted at cleanup. A test that needs several
// prefixes extends it with '-' and a suffix; the keys deleted at cleanup are
// those named Prefix() followed by ':' or '-'.
func (s *Server) Prefix() string { return s.prefix }

// Client returns a go-redis client on the server, closed at cleanup, for
// inspecting keys from tests.
func (s *Server) Client() *redis.Client {
	s.t.Helper()
	o, err := redis.ParseURL(s.url)
	if err != nil {
		s.t.Fatal("redistest: " + err.Error())
		return nil
	}
	c := redis.NewClient(o)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the private server now and waits until it has exited, for
// outage tests; its data is gone. Stopping a stopped server does nothing. On
// a shared server (LIMITER_TEST_REDIS_URL) it skips the test.
func (s *Server) Stop() {
	s.t.Helper()
	s.needPrivate("Stop")
	s.mu.Lock()
	proc, exited := s.proc, s.exited
	s.proc = nil
	s.mu.Unlock()
	if proc == nil {
		return
	}
	_ = proc.Process.Kill()
	<-exited
}

// Restart stops the private server if it runs and starts a new, empty one on
// the same port. On a shared server it skips the test.
func (s *Server) Restart() {
	s.t.Helper()
	s.needPrivate("Restart")
	s.Stop()
	if err := s.launch(s.port); err != nil {
		s.t.Fatal("redistest: restart: " + err.Error())
	}
}

// Freeze stops the private server's process (SIGSTOP): it accepts
// connections (the kernel does) but answers nothing until Thaw; Stop kills
// it frozen or not. On a shared server it skips the test.
func (s *Server) Freeze() { s.signal("Freeze", syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal("Thaw", syscall.SIGCONT) }

func (s *Server) signal(what string, sig syscall.Signal) {
	s.t.Helper()
	s.needPrivate(what)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.t.Fatal("redistest: " + what + ": the server is stopped")
		return
	}
	if err := s.proc.Process.Signal(sig); err != nil {
		s.t.Fatal("redistest: " + what + ": " + err.Error())
	}
}

// PID returns the private server's process id, 0 when it is stopped. On a
// shared server it skips the test.
func (s *Server) PID() int {
	s.t.Helper()
	s.needPrivate("PID")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Process.Pid
}

// Shared reports whether the server is the one LIMITER_TEST_REDIS_URL names,
// which tests must not stop, reconfigure or flush.
func (s *Server) Shared() bool { return s.shared }

func (s *Server) needPrivate(what string) {
	if s.shared {
		s.t.Helper()
		s.t.Skip("redistest: " + what + " needs a private redis-server; " + EnvURL + " names a shared one")
	}
}

// launch starts redis-server on port and waits until it answers PING.
func (s *Server) launch(port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(s.dir, "redis.log")
	common := fmt.Sprintf("bind 127.0.0.1\nport %d\ndaemonize no\ndir %q\nlogfile %q\n", port, s.dir, logPath)
	password, tlsAddr := "", ""
	if s.tls != nil {
		tlsPort, err := freePort()
		if err != nil {
			return err
		}
		tlsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
		common += fmt.Sprintf("tls-port %d\n", tlsPort)
		password = s.tls.Password
	}
	args := []string{filepath.Join(s.dir, "redis.conf")}
	if s.sentinel {
		args = append(args, "--sentinel") // the sentinel rewrites its file: a fresh one each launch
	} else {
		// No persistence; a replica (a failover test) syncs at once instead
		// of the primary waiting 5s for more replicas to join a diskless
		// sync.
		common += "save \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n" + debugCommand(s.bin)
	}
	if err := os.WriteFile(args[0], []byte(common+s.extra), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	if err := waitReady(addr, password, cmd.Process.Pid, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		logText, _ := os.ReadFile(logPath)
		return fmt.Errorf("redis-server on %s: %w; log:\n%s", addr, err, logText)
	}
	s.mu.Lock()
	s.proc, s.exited = cmd, exited
	s.port, s.addr, s.url, s.tlsAddr = port, addr, "redis://"+addr+"/0", tlsAddr
	s.mu.Unlock()
	return nil
}

// debugCommand returns the configuration line that lets tests send DEBUG
// (DEBUG SLEEP: a slow server) from loopback: needed from Redis 7 on, and
// unknown (a start-up error) before.
func debugCommand(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	_, v, ok := strings.Cut(string(out), " v=")
	major, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if !ok || err != nil || major < 7 {
		return ""
	}
	return "enable-debug-command local\n"
}

// waitReady polls addr, a few milliseconds apart, until the redis-server of
// process pid answers there, the process exits, or readyWithin passes. The
// process id matters: another test process may have won the port, and its
// server must not be taken for ours.
func waitReady(addr, password string, pid int, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyWithin)
	for {
		got, err := serverPID(addr, password)
		if err == nil && got == pid {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before answering")
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering within %s", readyWithin)
		}
	}
}

// serverPID asks the server at addr for its process id (INFO server), on a
// new connection, authenticated with password when not empty.
func serverPID(addr, password string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := fmt.Fprintf(conn, "AUTH %s\r\n", password); err != nil {
			return 0, err
		}
		if ok, err := r.ReadString('\n'); err != nil || ok != "+OK\r\n" {
			return 0, fmt.Errorf("AUTH answered %q (%v)", strings.TrimSpace(ok), err)
		}
	}
	if _, err := conn.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	head, err := r.ReadString('\n') // "$<length>" of a bulk string
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("answered %q", strings.TrimSpace(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}

// freePort returns a loopback TCP port that was free a moment ago, chosen at
// random below the kernel's ephemeral range (32768 and up), so that no
// outgoing connection and no listener on port 0 takes it between a Stop and
// a Restart.
func freePort() (int, error) {
	for range 100 {
		port := 20000 + rand.IntN(12768)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			_ = l.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port in 20000..32767")
}

// deleteKeys deletes the test's keys (Prefix:* and Prefix-*) from a shared
// server.
func (s *Server) deleteKeys() {
	o, err := redis.ParseURL(s.url)
	if err != nil {
		s.t.Error("redistest: " + err.Error())
		return
	}
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pattern := range []string{s.prefix + ":*", s.prefix + "-*"} {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				s.t.Error("redistest: delete test keys: " + err.Error())
				return
			}
		}
		if err := iter.Err(); err != nil {
			s.t.Error("redistest: delete test keys: " + err.Error())
			return
		}
	}
}
