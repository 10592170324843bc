package main

// Several service processes on one Redis: one exact limit across them,
// what each on_store_error mode does while Redis is down and after it comes
// back, and what clock skew does in server-time and client-time mode. The
// processes are the real binary (built once for the package, or
// $LIMITER_BIN); Redis is a private redis-server (redistest).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// built is the limiter binary shared by the package's tests.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// sharedBinary returns $LIMITER_BIN (set by make test) or the binary built
// once for the package into a temporary folder that TestMain removes.
func sharedBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("LIMITER_BIN"); bin != "" {
		return bin
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "limiter-test-bin-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "limiter")
		out, err := exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.bin
}

// removeSharedBinary deletes the folder of the binary built by sharedBinary.
func removeSharedBinary() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

// instance is one running service process.
type instance struct {
	url      string // http://127.0.0.1:PORT
	grpcAddr string // empty unless --grpc-addr was given
	pid      int
	// stop stops the process with SIGTERM and waits for it; cleanup calls
	// it too, once in all.
	stop func()

	mu   sync.Mutex
	logs strings.Builder // stderr: one JSON object per line
}

// logCount returns how many log lines have msg starting with prefix.
func (in *instance) logCount(prefix string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for line := range strings.SplitSeq(in.logs.String(), "\n") {
		var l struct{ Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Msg, prefix) {
			n++
		}
	}
	return n
}

// startInstance starts the service on a free port with the redis store at
// srv, the YAML policies and the extra flags; env adds to the environment
// (LIMITER_TEST_CLOCK_OFFSET). It returns once the instance is ready and
// stops it with SIGTERM at cleanup.
func startInstance(t *testing.T, srv *redistest.Server, policies string, flags []string, env ...string) *instance {
	t.Helper()
	return launchInstance(t, nil, srv.URL(), policies, flags, env...)
}

// launchInstance is startInstance on the Redis at redisURL, the command
// prefixed by wrapper (such as taskset's arguments) when not empty.
func launchInstance(t *testing.T, wrapper []string, redisURL, policies string, flags []string, env ...string) *instance {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "limiter.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(policies), 0o600))
	args := append([]string{"--store=redis", "--redis-url=" + redisURL, "--config=" + cfg}, flags...)
	return startWrapped(t, wrapper, args, env...)
}

// startProcess starts the binary with --addr=127.0.0.1:0 --log-format=json
// and args, env adding to the environment. It reads the addresses from the
// "listening" line wherever it comes among the logs (a warning may come
// first on a busy machine), then waits, polling, until /readyz answers 200:
// a test starts from a ready instance, not from a log line's position. The
// process is stopped with SIGTERM at cleanup.
func startProcess(t *testing.T, args []string, env ...string) *instance {
	t.Helper()
	return startWrapped(t, nil, args, env...)
}

// startWrapped is startProcess with the command prefixed by wrapper (such
// as taskset's arguments) when not empty.
func startWrapped(t *testing.T, wrapper []string, args []string, env ...string) *instance {
	t.Helper()
	argv := append(append(append(wrapper, sharedBinary(t)), "--addr=127.0.0.1:0", "--log-format=json"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	in := &instance{pid: cmd.Process.Pid}
	type listeningLine struct {
		Msg      string
		Addr     string
		GRPCAddr string `json:"grpc_addr"`
	}
	listening := make(chan listeningLine, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			in.mu.Lock()
			in.logs.Write(lines.Bytes())
			in.logs.WriteByte('\n')
			in.mu.Unlock()
			var l listeningLine
			if json.Unmarshal(lines.Bytes(), &l) == nil && l.Msg == "listening" {
				listening <- l
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	in.stop = sync.OnceFunc(func() {
		// Connections the transport dialled but never used are new, not
		// idle, to the server, whose graceful shutdown would wait for them.
		client.CloseIdleConnections()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second): // a hang guard
			_ = cmd.Process.Kill()
			<-done
			t.Error("the service did not stop after SIGTERM")
		}
		<-copied
	})
	t.Cleanup(in.stop)
	select {
	case l := <-listening:
		in.url, in.grpcAddr = "http://"+l.Addr, l.GRPCAddr
	case <-copied:
		t.Fatalf("the service exited before listening; logs:\n%s", in.logs.String())
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the service did not start listening")
	}
	for deadline := time.Now().Add(30 * time.Second); ready(t, in) != http.StatusOK; {
		if time.Now().After(deadline) { // a hang guard, not a timing assertion
			in.mu.Lock()
			defer in.mu.Unlock()
			t.Fatalf("the service did not become ready; logs:\n%s", in.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return in
}

// client is shared by the tests: enough idle connections that a burst
// reuses them, and a timeout that only guards against hangs.
var client = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 256},
}

// check sends POST /v1/check for key under policy and returns the status,
// the body decoded into a map, and the Content-Type.
func check(t testing.TB, in *instance, policy, key string) (int, map[string]any, string) {
	t.Helper()
	body := fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)
	resp, err := client.Post(in.url+"/v1/check", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return resp.StatusCode, m, resp.Header.Get("Content-Type")
}

// statuses sends n checks one after another and returns their statuses.
func statuses(t testing.TB, in *instance, policy, key string, n int) []int {
	t.Helper()
	got := make([]int, n)
	for i := range got {
		got[i], _, _ = check(t, in, policy, key)
	}
	return got
}

// ready returns the status of GET /readyz.
func ready(t testing.TB, in *instance) int {
	t.Helper()
	resp, err := client.Get(in.url + "/readyz")
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// burst sends n concurrent checks for key under policy, released together,
// the i-th to instances[i%len(instances)], and returns how many each
// instance allowed. Every answer must be 200 or 429.
func burst(t *testing.T, instances []*instance, policy, key string, n int) []int64 {
	t.Helper()
	allowed := make([]atomic.Int64, len(instances))
	var limited atomic.Int64
	errs := make(chan error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		in := i % len(instances)
		wg.Go(func() {
			<-start
			body := fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)
			resp, err := client.Post(instances[in].url+"/v1/check", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				allowed[in].Add(1)
			case http.StatusTooManyRequests:
				limited.Add(1)
			default:
				errs <- fmt.Errorf("instance %d answered %d", in, resp.StatusCode)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := make([]int64, len(instances))
	var total int64
	for i := range allowed {
		got[i] = allowed[i].Load()
		total += got[i]
	}
	assert.Equal(t, int64(n), total+limited.Load(), "every attempt answered 200 or 429")
	return got
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// skipShort skips tests that start processes under -short.
func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and service processes")
	}
}

// limit is the policies' limit in these tests: windows of a day, so that no
// window boundary and no refill falls inside a burst of a second or so.
const limit = 37

// fourAlgorithms has one policy per atomic algorithm.
var fourAlgorithms = fmt.Sprintf(`policies:
  fixed_window:   { algorithm: fixed_window,   limit: %[1]d, window: 24h }
  sliding_log:    { algorithm: sliding_log,    limit: %[1]d, window: 24h }
  sliding_window: { algorithm: sliding_window, limit: %[1]d, window: 24h }
  token_bucket:   { algorithm: token_bucket,   limit: %[1]d, window: 24h }
`, limit)

// generous keeps the exactness tests about counting: a loaded two-core
// machine must not turn a slow Redis answer, or a decision queued behind a
// burst, into a 503, nor a slow client into a closed connection. The last
// one is real: under -race at load average 15+, the test's client can take
// more than the default 5s between connecting and writing its request, and
// the server rightly closes such a connection unanswered (the client reads
// EOF); with 1m it did not happen in 16 rounds of 400 where 5s failed 6.
//
// The whole request's read deadline (--read-timeout, 10s) is counted from
// the connection's first byte, so a header that took over 10s left no time
// for the body: the service answered 400 "the body could not be read" (6 of
// 400 once the answers were also checked against the OpenAPI document, which
// costs the client CPU). 1m for both.
var generous = []string{"--redis-timeout=5s", "--decision-timeout=30s", "--read-header-timeout=1m", "--read-timeout=1m"}

// TestInstancesShareOneExactLimit: 400 concurrent attempts on one key, split
// between two processes on one Redis, allow exactly the limit, for every
// algorithm.
func TestInstancesShareOneExactLimit(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	a := startInstance(t, srv, fourAlgorithms, generous)
	b := startInstance(t, srv, fourAlgorithms, generous)
	for _, alg := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			got := burst(t, []*instance{a, b}, alg, srv.Prefix()+"-exact", 400)
			assert.Equal(t, int64(limit), sum(got), "allowed across both instances %v", got)
		})
	}
}

// TestClockSkewAcrossInstances runs two processes whose clocks disagree by
// three windows. In server-time mode (the default) Redis's TIME decides and
// they enforce one limit together whatever their clocks say; with
// --redis-client-time each counts in the window of its own clock, and the
// two together admit twice the limit. The difference is the point.
func TestClockSkewAcrossInstances(t *testing.T) {
	skipShort(t)
	const skew = "LIMITER_TEST_CLOCK_OFFSET=-72h" // three 24h windows behind
	t.Run("server time", func(t *testing.T) {
		srv := redistest.Start(t)
		a := startInstance(t, srv, fourAlgorithms, generous)
		b := startInstance(t, srv, fourAlgorithms, generous, skew)
		assert.Equal(t, 0, a.logCount("TEST ONLY: LIMITER_TEST_CLOCK_OFFSET"))
		assert.Equal(t, 1, b.logCount("TEST ONLY: LIMITER_TEST_CLOCK_OFFSET"), "a WARN at start")
		for _, alg := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket"} {
			t.Run(alg, func(t *testing.T) {
				got := burst(t, []*instance{a, b}, alg, srv.Prefix()+"-skew", 400)
				assert.Equal(t, int64(limit), sum(got), "one limit despite the skew %v", got)
			})
		}
	})
	t.Run("client time", func(t *testing.T) {
		srv := redistest.Start(t)
		flags := append([]string{"--redis-client-time"}, generous...)
		a := startInstance(t, srv, fourAlgorithms, flags)
		b := startInstance(t, srv, fourAlgorithms, flags, skew)
		// The window algorithms show it exactly: each instance counts in its
		// own window field. (The log and the bucket are loosened too, but by
		// an amount that depends on the interleaving: one instance's pruning
		// deletes the other's events, a bucket's time runs ahead of the
		// other's clock.)
		for _, alg := range []string{"fixed_window", "sliding_window"} {
			t.Run(alg, func(t *testing.T) {
				got := burst(t, []*instance{a, b}, alg, srv.Prefix()+"-skew", 400)
				assert.Equal(t, []int64{limit, limit}, got, "each instance admits a whole limit")
			})
		}
	})
}

// outagePolicies has one policy per on_store_error mode.
var outagePolicies = `policies:
  closed: { algorithm: fixed_window, limit: 3, window: 24h }
  open:   { algorithm: sliding_log,  limit: 3, window: 24h, on_store_error: fail_open }
  local:  { algorithm: token_bucket, limit: 3, window: 24h, on_store_error: local }
`

// TestRedisOutageAndRecovery stops Redis under two running instances: each
// policy answers as its on_store_error says, /readyz answers 503, and once
// Redis is back (empty, on the same port) both instances decide from it
// again without a restart.
func TestRedisOutageAndRecovery(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("stops Redis: needs a private redis-server")
	}
	flags := []string{"--redis-timeout=1s", "--redis-breaker-cooldown=100ms"}
	a := startInstance(t, srv, outagePolicies, flags)
	b := startInstance(t, srv, outagePolicies, flags)
	instances := []*instance{a, b}
	for _, p := range []string{"closed", "open", "local"} {
		code, _, _ := check(t, a, p, "before")
		require.Equal(t, http.StatusOK, code, p)
	}
	require.Equal(t, http.StatusOK, ready(t, a))

	srv.Stop()

	ok, limited, unavailable := http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable
	for i, in := range instances {
		code, body, ctype := check(t, in, "closed", "outage")
		assert.Equal(t, unavailable, code, "instance %d: fail_closed", i)
		assert.Equal(t, "application/problem+json", ctype)
		assert.Equal(t, float64(unavailable), body["status"])

		assert.Equal(t, []int{ok, ok, ok, ok, ok}, statuses(t, in, "open", "outage", 5), "instance %d: fail_open", i)
		assert.Equal(t, []int{ok, ok, ok, limited, limited}, statuses(t, in, "local", "outage", 5),
			"instance %d: local limits on its own, a whole limit per instance", i)
		assert.Equal(t, unavailable, ready(t, in), "instance %d: /readyz", i)
	}
	metrics := scrape(t, a)
	assert.Contains(t, metrics, `tollgate_store_fallback_total{mode="fail_open",policy="open"} 5`)
	assert.Contains(t, metrics, `tollgate_store_fallback_total{mode="local",policy="local"} 5`)

	srv.Restart()
	for i, in := range instances {
		code := unavailable
		for try := 0; try < 600 && code != ok; try++ { // up to about 30s: waiting for the server, not a window
			if try > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			code = ready(t, in)
		}
		require.Equal(t, ok, code, "instance %d: /readyz once Redis is back", i)
	}

	code, _, _ := check(t, a, "closed", "outage")
	assert.Equal(t, ok, code, "fail_closed decides again")
	_, body, _ := check(t, a, "local", "outage")
	assert.Equal(t, true, body["allowed"], "Redis (empty after its restart) decides, not the exhausted local bucket")
	assert.Equal(t, 2.0, body["remaining"])
	_, body, _ = check(t, b, "local", "outage")
	assert.Equal(t, 1.0, body["remaining"], "the two instances share Redis again")
	keys, err := srv.Client().Keys(context.Background(), "tollgate:*").Result()
	require.NoError(t, err)
	assert.Len(t, keys, 2, "the closed and local keys of \"outage\", written to Redis: %v", keys)
	assert.Contains(t, scrape(t, a), `tollgate_store_fallback_total{mode="local",policy="local"} 5`, "no fallback since")

	for i, in := range instances {
		assert.Equal(t, 1, in.logCount("store degraded"), "instance %d: one line when the outage starts", i)
		assert.Equal(t, 1, in.logCount("store recovered"), "instance %d: one line when it ends", i)
	}
}

// scrape returns the /metrics text.
func scrape(t testing.TB, in *instance) string {
	t.Helper()
	resp, err := client.Get(in.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestBadClockOffsetIsAConfigurationError(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"LIMITER_TEST_CLOCK_OFFSET": "soon"}[k]
	}
	err := run(context.Background(), []string{"--store=memory"}, getenv, io.Discard, io.Discard)
	var printed strings.Builder
	assert.Equal(t, 2, exitCode(err, &printed))
	assert.Equal(t, `limiter: config: LIMITER_TEST_CLOCK_OFFSET: "soon" is not a duration such as -90s or 2h`+"\n", printed.String())
}
