package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
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

// recipes is where the shipped gateway configurations are.
var recipes = filepath.Join("..", "..", "deploy", "gateways")

// The addresses the shipped recipes name, replaced by the test's.
const (
	recipeListen   = "127.0.0.1:8000"
	recipeApp      = "127.0.0.1:9000"
	recipeTollgate = "127.0.0.1:8081"
	recipeLua      = "/etc/haproxy/tollgate.lua"
	recipeTraefik  = "/etc/traefik/tollgate.yml"
)

// gatewayTollgate is Tollgate's configuration behind every recipe: 5 per
// minute per client on /api/, 50 per minute for everyone together on
// /burst/, nothing elsewhere. sliding_log counts exactly in any 60 s, so
// no window boundary falls inside a test, which ends well within it.
const gatewayTollgate = `policies:
  api_gw:   { algorithm: sliding_log, limit: 5, window: 60s }
  burst_gw: { algorithm: sliding_log, limit: 50, window: 60s }
  host_gw:  { algorithm: sliding_log, limit: 1, window: 60s }
trusted_proxies: [127.0.0.1]
gateway:
  - match: { path_prefix: /api/ }
    policies: [api_gw]
    key: client
  - match: { host: limited.test, path_prefix: /host/ }
    policies: [host_gw]
    key: client
  - match: { path_prefix: /burst/ }
    policies: [burst_gw]
    key: global
`

// gatewayRecipe is one gateway: its program, its recipe's files (the first
// is the one the program is started on), the paths the files name of each
// other, how to start it on the rendered recipe, the statuses its recipe
// answers when Tollgate is down and when Tollgate is slower than the
// gateway's timeout, and whether its site answers any Host (Caddy's
// recipe names one: another is not routed to the application at all).
type gatewayRecipe struct {
	name, program string
	files         []string
	links         map[string]string // a path a file names -> the recipe file it stands for
	down, slow    int
	anyHost       bool
	start         func(t *testing.T, bin, conf, dir string) *exec.Cmd
}

var gatewayRecipes = []gatewayRecipe{
	{name: "nginx", program: "nginx", files: []string{"nginx.conf"}, down: http.StatusServiceUnavailable, slow: http.StatusServiceUnavailable, anyHost: true,
		start: func(t *testing.T, bin, conf, dir string) *exec.Cmd {
			return exec.Command(bin, "-p", dir+"/", "-c", conf, "-e", "stderr",
				"-g", "daemon off; pid "+filepath.Join(dir, "nginx.pid")+";")
		}},
	{name: "caddy", program: "caddy", files: []string{"Caddyfile"}, down: http.StatusBadGateway, slow: http.StatusGatewayTimeout,
		start: func(t *testing.T, bin, conf, dir string) *exec.Cmd {
			cmd := exec.Command(bin, "run", "--config", conf, "--adapter", "caddyfile")
			cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir, "HOME="+dir)
			return cmd
		}},
	{name: "haproxy", program: "haproxy", files: []string{"haproxy.cfg", "tollgate.lua"},
		links: map[string]string{recipeLua: "tollgate.lua"}, down: http.StatusServiceUnavailable, slow: http.StatusServiceUnavailable, anyHost: true,
		start: func(t *testing.T, bin, conf, dir string) *exec.Cmd {
			return exec.Command(bin, "-f", conf, "-db")
		}},
	{name: "traefik", program: "traefik", files: []string{"traefik.yml", "traefik-tollgate.yml"},
		links: map[string]string{recipeTraefik: "traefik-tollgate.yml"}, down: http.StatusInternalServerError, slow: http.StatusInternalServerError, anyHost: true,
		start: func(t *testing.T, bin, conf, dir string) *exec.Cmd {
			return exec.Command(bin, "--configFile="+conf)
		}},
}

// TestGatewayRecipes runs each shipped recipe in a real gateway process in
// front of a real upstream, with the Tollgate binary as forward-auth: the
// limit holds at the client, per forwarded client address, exactly under
// concurrency, and the gateway fails as its recipe says when Tollgate stops.
func TestGatewayRecipes(t *testing.T) {
	skipShort(t)
	for _, gw := range gatewayRecipes {
		t.Run(gw.name, func(t *testing.T) {
			bin := gatewayProgram(t, gw.program)
			var hits sync.Map // first path segment -> *atomic.Int64
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seg := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)[0]
				n, _ := hits.LoadOrStore(seg, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				_, _ = io.WriteString(w, "upstream\n")
			}))
			t.Cleanup(upstream.Close)
			hitsOf := func(seg string) int64 {
				if n, ok := hits.Load(seg); ok {
					return n.(*atomic.Int64).Load()
				}
				return 0
			}

			cfg := filepath.Join(t.TempDir(), "tollgate.yaml")
			require.NoError(t, os.WriteFile(cfg, []byte(gatewayTollgate), 0o600))
			tollgate := startProcess(t, []string{"--store=memory", "--config=" + cfg})

			// The port was free a moment ago; another process may take it
			// before the gateway binds it (Caddy binds it on every address):
			// then the gateway is started again on another.
			var listen, base string
			for attempt := 1; ; attempt++ {
				listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(freeTCPPort(t)))
				dir := t.TempDir()
				conf := renderRecipe(t, gw, dir, map[string]string{
					recipeListen:   listen,
					recipeApp:      strings.TrimPrefix(upstream.URL, "http://"),
					recipeTollgate: strings.TrimPrefix(tollgate.url, "http://"),
				})
				base = "http://" + listen
				if startGateway(t, gw.start(t, bin, conf, dir), base) {
					break
				}
				require.Less(t, attempt, 5, "the gateway's port was taken by another process 5 times")
			}

			// 8 requests from one client: 5 reach the upstream, 3 are
			// refused at the client with 429, Retry-After and the fields.
			alice := clientFrom(t, "127.0.0.2")
			var codes []int
			for range 8 {
				resp := get(t, alice, base+"/api/items", nil)
				codes = append(codes, resp.StatusCode)
				if resp.StatusCode == http.StatusTooManyRequests {
					retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					assert.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
					assert.Positive(t, retry)
					assert.Equal(t, `"api_gw";q=5;w=60`, resp.Header.Get("RateLimit-Policy"))
					assert.Regexp(t, `^"api_gw";r=0;t=\d+$`, resp.Header.Get("RateLimit"))
					assert.Contains(t, resp.body, "rate-limit-exceeded")
				}
			}
			assert.Equal(t, []int{200, 200, 200, 200, 200, 429, 429, 429}, codes)
			assert.Equal(t, int64(5), hitsOf("api"))

			// /static/ is matched by no rule: unlimited.
			for range 20 {
				assert.Equal(t, http.StatusOK, get(t, alice, base+"/static/app.js", nil).StatusCode)
			}
			assert.Equal(t, int64(20), hitsOf("static"))

			// A forged X-Forwarded-For changes nobody's key: alice stays
			// refused, and bob, claiming to be alice, spends his own budget.
			assert.Equal(t, http.StatusTooManyRequests, get(t, alice, base+"/api/items", map[string]string{"X-Forwarded-For": "198.51.100.7"}).StatusCode)
			bob := clientFrom(t, "127.0.0.3")
			resp := get(t, bob, base+"/api/items", map[string]string{"X-Forwarded-For": "127.0.0.2"})
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, int64(6), hitsOf("api"))
			// Nor do client-set original-request headers: alice claiming
			// her /api/ request was for /static/ (by either header name
			// Tollgate reads) stays refused, and the upstream is not reached.
			for _, forged := range []map[string]string{
				{"X-Original-URI": "/static/x", "X-Original-Method": "GET"},
				{"X-Forwarded-Uri": "/static/x", "X-Forwarded-Method": "GET"},
			} {
				assert.Equal(t, http.StatusTooManyRequests, get(t, alice, base+"/api/items", forged).StatusCode, "forged %v", forged)
			}
			assert.Equal(t, int64(6), hitsOf("api"))
			// Path tricks where an upstream may serve /api/ while a naive
			// match sees another path are counted as /api/: alice stays
			// refused (";x" is dropped as servlet containers do).
			for _, trick := range []string{"/%61pi/items", "//api/items", "/static/../api/items", "/static/%2e%2e/api/items", "/api;x/items", "/./api/items", "/api%2Fitems"} {
				assert.Equal(t, http.StatusTooManyRequests, get(t, alice, base+trick, nil).StatusCode, trick)
			}
			// The same request in other forms is counted as /api/: an
			// absolute-form target (as sent to a proxy), other methods, the
			// path in another case (a case-insensitive upstream, IIS or
			// ASP.NET, serves /API/items as /api/items) or with a backslash
			// (which the same upstreams read as a slash). Alice stays refused.
			for _, head := range []string{
				"GET http://" + listen + "/api/items HTTP/1.1\r\nHost: " + listen,
				"HEAD /api/items HTTP/1.1\r\nHost: " + listen,
				"OPTIONS /api/items HTTP/1.1\r\nHost: " + listen,
				"POST /api/items HTTP/1.1\r\nHost: " + listen + "\r\nContent-Length: 0",
				"GET /API/items HTTP/1.1\r\nHost: " + listen,
				"GET /Api/Items HTTP/1.1\r\nHost: " + listen,
				"GET /api\\items HTTP/1.1\r\nHost: " + listen,
				"GET /api%5Citems HTTP/1.1\r\nHost: " + listen,
			} {
				assert.Equal(t, http.StatusTooManyRequests, rawStatus(t, "127.0.0.2", listen, head), head)
			}
			assert.Equal(t, int64(6), hitsOf("api"))
			// A rule for one host (limit 1): the host with a trailing dot,
			// in another case, with a port, or named by an absolute-form
			// target is the same host; dave's second request is refused
			// (or the gateway refuses the request itself: 400).
			if gw.anyHost {
				assert.Equal(t, http.StatusOK, rawStatus(t, "127.0.0.6", listen, "GET /host/x HTTP/1.1\r\nHost: limited.test"))
				for _, head := range []string{
					"GET /host/x HTTP/1.1\r\nHost: limited.test.",
					"GET /host/x HTTP/1.1\r\nHost: LIMITED.Test",
					"GET /host/x HTTP/1.1\r\nHost: limited.test:80",
					"GET /host/x HTTP/1.1\r\nHost: limited.test.:80",
					"GET http://limited.test/host/x HTTP/1.1\r\nHost: limited.test",
					"GET http://limited.test./host/x HTTP/1.1\r\nHost: limited.test.",
					"GET http://limited.test/host/x HTTP/1.1\r\nHost: other.test",
				} {
					assert.Contains(t, []int{http.StatusTooManyRequests, http.StatusBadRequest}, rawStatus(t, "127.0.0.6", listen, head), head)
				}
			}

			// 200 concurrent clients on one key: exactly the limit passes.
			const n = 200
			var ok, refused atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				c := clientFrom(t, fmt.Sprintf("127.0.1.%d", 1+i%250))
				wg.Go(func() {
					<-start
					switch code := get(t, c, base+"/burst/x", nil).StatusCode; code {
					case http.StatusOK:
						ok.Add(1)
					case http.StatusTooManyRequests:
						refused.Add(1)
					default:
						t.Errorf("burst: status %d", code)
					}
				})
			}
			close(start)
			wg.Wait()
			assert.Equal(t, int64(50), ok.Load())
			assert.Equal(t, int64(n-50), refused.Load())
			assert.Equal(t, int64(50), hitsOf("burst"))

			// Tollgate slow: stopped (SIGSTOP), its port still takes
			// connections, and no answer comes: the gateway gives up after
			// its timeout and fails as its recipe says.
			require.NoError(t, syscall.Kill(tollgate.pid, syscall.SIGSTOP))
			t.Cleanup(func() { _ = syscall.Kill(tollgate.pid, syscall.SIGCONT) })
			require.Eventually(t, func() bool { return stopped(t, tollgate.pid) }, 30*time.Second, 10*time.Millisecond, "SIGSTOP took effect")
			assert.Equal(t, gw.slow, rawStatus(t, "127.0.0.7", listen, "GET /api/items HTTP/1.1\r\nHost: "+listen), "Tollgate slow")
			require.NoError(t, syscall.Kill(tollgate.pid, syscall.SIGCONT))

			// Tollgate stopped: the gateway fails as its recipe says, and
			// nothing more reaches the upstream.
			tollgate.stop()
			carol := clientFrom(t, "127.0.0.4")
			assert.Equal(t, gw.down, get(t, carol, base+"/api/items", nil).StatusCode)
			assert.Equal(t, int64(6), hitsOf("api"))
		})
	}
}

// gatewayProgram returns the path of program, skipping the test when it is
// not installed (failing it under CI=true, where .ci/run installs it).
func gatewayProgram(t *testing.T, program string) string {
	t.Helper()
	bin, err := exec.LookPath(program)
	if err == nil {
		return bin
	}
	if p := "/usr/sbin/" + program; fileExists(p) { // nginx and haproxy live in sbin
		return p
	}
	why := program + " is not installed (" + map[string]string{"nginx": "Debian package nginx-light", "caddy": "Debian package caddy", "haproxy": "Debian package haproxy", "traefik": "scripts/traefik.sh builds it"}[program] + ")"
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// renderRecipe writes the recipe's files into dir with each key of replace
// (an address the recipe names) and of the recipe's links (a path one file
// names of another, which becomes the written file's) replaced, and returns
// the path of the file the gateway starts on. A key that none of the
// recipe's files holds fails the test, so that the recipe and the test
// cannot drift apart.
func renderRecipe(t *testing.T, gw gatewayRecipe, dir string, replace map[string]string) string {
	t.Helper()
	replace = maps.Clone(replace)
	for from, file := range gw.links {
		replace[from] = filepath.Join(dir, file)
	}
	texts := make([]string, len(gw.files))
	for i, file := range gw.files {
		data, err := os.ReadFile(filepath.Join(recipes, file))
		require.NoError(t, err)
		texts[i] = string(data)
	}
	for from, to := range replace {
		held := false
		for i := range texts {
			held = held || strings.Contains(texts[i], from)
			texts[i] = strings.ReplaceAll(texts[i], from, to)
		}
		require.True(t, held, "%s no longer name %s", strings.Join(gw.files, ", "), from)
	}
	for i, file := range gw.files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(texts[i]), 0o600))
	}
	return filepath.Join(dir, gw.files[0])
}

// startGateway starts cmd, stops it at cleanup, and waits until it answers
// at base (its logs are shown if it exits or never answers). It returns
// false when the gateway exited because its port was in use.
func startGateway(t *testing.T, cmd *exec.Cmd, base string) bool {
	t.Helper()
	var logs strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second): // a hang guard
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	// Its own transport: the gateway's answers are not Tollgate's, which
	// TestMain checks against the OpenAPI document.
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer probe.CloseIdleConnections()
	for deadline := time.Now().Add(30 * time.Second); ; {
		// No rule matches /ready: uncounted, in no segment the test
		// counts. Ready is the upstream's 200 through the gateway (Traefik
		// answers 404 until its file provider has loaded the routes).
		resp, err := probe.Get(base + "/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-exited:
			mu.Lock()
			defer mu.Unlock()
			if strings.Contains(strings.ToLower(logs.String()), "address already in use") { // nginx and HAProxy spell it "Address"
				t.Logf("%s: its port was taken: %s", cmd.Path, logs.String())
				return false
			}
			t.Fatalf("%s exited: %s", cmd.Path, logs.String())
		default:
		}
		if time.Now().After(deadline) { // a hang guard, not a timing assertion
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s does not answer: %s", cmd.Path, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// freeTCPPort returns a loopback port that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip: a distinct client address for the gateway.
func clientFrom(t *testing.T, ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// gatewayAnswer is an answer with its body read.
type gatewayAnswer struct {
	*http.Response
	body string
}

// get sends GET url from c with extra headers; a transport error fails the
// test and reads as status 0.
func get(t *testing.T, c *http.Client, url string, header map[string]string) gatewayAnswer {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if !assert.NoError(t, err) {
		return gatewayAnswer{Response: &http.Response{Header: http.Header{}}}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	assert.NoError(t, err)
	return gatewayAnswer{Response: resp, body: string(body)}
}

// stopped reports whether every thread of the process pid is stopped
// (state T), as a SIGSTOP leaves them once it has taken effect.
func stopped(t *testing.T, pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	require.NoError(t, err)
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		require.NoError(t, err)
		// pid (comm) state ...: the state follows the last ')'.
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) == 0 || f[0] != "T" {
			return false
		}
	}
	return true
}

// rawStatus sends a request's head (its lines without the final CRLFs)
// as written, from the loopback address ip to addr, on a connection of
// its own, and returns the answer's status; 0 when none came.
func rawStatus(t *testing.T, ip, addr, head string) int {
	t.Helper()
	conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(90*time.Second))) // a hang guard
	_, err = io.WriteString(conn, head+"\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	method, _, _ := strings.Cut(head, " ")
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Logf("%q: no answer: %v", head, err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
