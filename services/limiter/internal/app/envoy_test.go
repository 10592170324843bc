package app

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// envoyRules is the envoy package's fixture folder.
var envoyRules = filepath.Join("..", "envoyrules", "testdata", "rules")

// grpcClient serves a's gRPC API on a loopback port until the test ends and
// returns a connection to it.
func grpcClient(t testing.TB, a *App) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return grpcClientOn(t, a, ln)
}

// grpcClientOn serves a's gRPC API on ln until the test ends and returns a
// connection to it.
func grpcClientOn(t testing.TB, a *App, ln net.Listener) *grpc.ClientConn {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.ServeGRPC(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		assert.NoError(t, <-done, "a clean graceful stop")
	})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// request is a RateLimitRequest for one customer of the edge domain.
func request(customer string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "customer", Value: customer}},
	}}}
}

// postJSON sends body to POST /json on srv.
func postJSON(t *testing.T, srv *httptest.Server, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(srv.URL+"/json", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, data
}

// TestJSONAnswersLikeGRPC sends the same requests (for two customers, so
// each has a fresh counter) over gRPC and POST /json: the answers are equal,
// and both count in the same decision metrics.
func TestJSONAnswersLikeGRPC(t *testing.T) {
	clock := limitertest.NewClock(t0)
	a := newApp(t, load(t, "--store=memory", "--envoy-config", envoyRules, "--grpc-addr=127.0.0.1:0", "--envoy-response-headers"), clock)
	client := rlsv3.NewRateLimitServiceClient(grpcClient(t, a))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)

	for i := 1; i <= 4; i++ {
		viaGRPC, err := client.ShouldRateLimit(context.Background(), request("over-grpc"))
		require.NoError(t, err)
		body, err := protojson.Marshal(request("over-json"))
		require.NoError(t, err)
		resp, data := postJSON(t, srv, string(body))
		var viaJSON rlsv3.RateLimitResponse
		require.NoError(t, protojson.Unmarshal(data, &viaJSON), string(data))
		assert.True(t, proto.Equal(viaGRPC, &viaJSON), "request %d:\ngrpc %v\njson %v", i, viaGRPC, &viaJSON)

		want, retry := http.StatusOK, ""
		if i == 4 {
			want, retry = http.StatusTooManyRequests, "15"
		}
		assert.Equal(t, want, resp.StatusCode, "request %d", i)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		assert.Equal(t, retry, resp.Header.Get("Retry-After"))
		assert.Equal(t, `"edge.customer";q=3;w=60`, resp.Header.Get("RateLimit-Policy"))
	}
	metrics, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	text, err := io.ReadAll(metrics.Body)
	require.NoError(t, err)
	require.NoError(t, metrics.Body.Close())
	assert.Contains(t, string(text), `tollgate_decisions_total{policy="edge.customer",result="allowed"} 6`)
	assert.Contains(t, string(text), `tollgate_decisions_total{policy="edge.customer",result="limited"} 2`)
}

// Refusals through the Envoy API are listed by /admin/offenders, with the
// HTTP routes' ones: the same tracker, the same hashed keys.
func TestEnvoyRefusalsAreOffenders(t *testing.T) {
	cfg := load(t, "--store=memory", "--envoy-config", envoyRules, "--offenders-raw-keys")
	cfg.AdminKey = "offenders-admin"
	a := newApp(t, cfg, limitertest.NewClock(t0))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	body, err := protojson.Marshal(request("greedy"))
	require.NoError(t, err)
	for range 5 { // limit 3 a minute: two refusals
		postJSON(t, srv, string(body))
	}
	blocked, err := protojson.Marshal(request("banned"))
	require.NoError(t, err)
	postJSON(t, srv, string(blocked)) // requests_per_unit 0: one refusal

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/admin/offenders", nil)
	require.NoError(t, err)
	req.Header.Set("X-Admin-Key", "offenders-admin")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var report struct {
		Refusals  uint64
		Offenders []struct {
			Policy, Key string
			Count       uint64
		}
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&report))
	assert.Equal(t, uint64(3), report.Refusals)
	require.Len(t, report.Offenders, 2)
	assert.Equal(t, "edge.customer", report.Offenders[0].Policy)
	assert.Equal(t, "customer=greedy", report.Offenders[0].Key)
	assert.Equal(t, uint64(2), report.Offenders[0].Count)
	assert.Equal(t, uint64(1), report.Offenders[1].Count)
}

func TestJSONRefusesBadBodies(t *testing.T) {
	a := newApp(t, load(t, "--store=memory", "--envoy-config", envoyRules), limitertest.NewClock(t0))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	tests := []struct {
		name, body string
		want       int
		detail     string
	}{
		{"not json", `{"domain":`, http.StatusBadRequest, "not a RateLimitRequest"},
		{"unknown field", `{"domain":"edge","descriptors":[],"extra":1}`, http.StatusBadRequest, "not a RateLimitRequest"},
		{"no descriptors", `{"domain":"edge","descriptors":[]}`, http.StatusBadRequest, "descriptor list must not be empty"},
		{"empty", ``, http.StatusBadRequest, "body is empty"},
		{"too large", `{"domain":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := postJSON(t, srv, tt.body)
			assert.Equal(t, tt.want, resp.StatusCode)
			assert.Equal(t, httplimit.ProblemContentType, resp.Header.Get("Content-Type"))
			var p httplimit.Problem
			require.NoError(t, json.Unmarshal(data, &p), string(data))
			assert.Contains(t, p.Detail, tt.detail)
		})
	}
	resp, data := postJSON(t, srv, `{"domain":"nowhere","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "an unknown domain is OK")
	assert.JSONEq(t, `{"overallCode":"OK","statuses":[{"code":"OK"}]}`, string(data))
}

func TestNoEnvoyAPIUnlessAskedFor(t *testing.T) {
	a := newApp(t, load(t, "--store=memory"), limitertest.NewClock(t0))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	resp, _ := postJSON(t, srv, `{"domain":"edge","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.ErrorIs(t, a.ServeGRPC(context.Background(), ln), errNoEnvoy)
}

func TestBadEnvoyConfigFailsTheStart(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: shop\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: shop\n"), 0o600))
	_, err := New(context.Background(), load(t, "--store=memory", "--envoy-config", dir))
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Equal(t, "envoy: "+filepath.Join(dir, "b.yaml")+`: domain: "shop" is already defined in `+filepath.Join(dir, "a.yaml")+"; --envoy-merge-domain-config merges the files of one domain (line 1)", err.Error())

	clash := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(clash, "c.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o600))
	yaml := filepath.Join(t.TempDir(), "limiter.yaml")
	require.NoError(t, os.WriteFile(yaml, []byte("policies:\n  d.k: {algorithm: fixed_window, limit: 1, window: 1s}\n"), 0o600))
	_, err = New(context.Background(), load(t, "--store=memory", "--config", yaml, "--envoy-config", clash))
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Contains(t, err.Error(), "policies.d.k: an Envoy descriptor in "+clash+" derives the same policy name")
}

func TestPruneCoversEnvoyPolicies(t *testing.T) {
	clock := limitertest.NewClock(t0)
	a := newApp(t, load(t, "--sqlite-path", filepath.Join(t.TempDir(), "e.db"), "--envoy-config", envoyRules), clock)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	resp, _ := postJSON(t, srv, `{"domain":"platform","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	clock.Advance(2 * time.Minute)
	n, err := a.Prune(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the sliding_log event of platform.api_key")
}

// TestRunServesGRPCAndStopsBoth runs the whole service with --grpc-addr: the
// listening line names both addresses, health answers SERVING, and a
// cancelled context stops both servers cleanly.
func TestRunServesGRPCAndStopsBoth(t *testing.T) {
	l, _, stop := runLogged(t, load(t, "--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0", "--store=memory", "--envoy-config", envoyRules, "--log-format=json"))

	conn, err := grpc.NewClient(l.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	health, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, health.GetStatus())
	answer, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), request("run"))
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, answer.GetOverallCode())
	resp, err := http.Get("http://" + l.Addr + "/healthz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	require.NoError(t, stop())
	_, err = net.Dial("tcp", l.GRPCAddr)
	assert.Error(t, err, "the gRPC listener is closed")
}

// TestHeldCallsEndAtTheReadTimeout: 20 connections open 25 calls each whose
// request message never comes; each ends with DeadlineExceeded once the
// read timeout has passed, while the connections stay open, and the
// goroutines go back to what they were before the calls. Without a
// deadline the calls were held until the client left.
func TestHeldCallsEndAtTheReadTimeout(t *testing.T) {
	const conns, callsPerConn = 20, 25
	a := newApp(t, load(t, "--store=memory", "--envoy-config", envoyRules, "--grpc-addr=127.0.0.1:0", "--read-timeout=1s"), limitertest.NewClock(t0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.ServeGRPC(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		assert.NoError(t, <-done)
	})
	var clients []*grpc.ClientConn
	for range conns {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		// One whole call opens the connection.
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), request("c"))
		require.NoError(t, err)
		clients = append(clients, conn)
	}
	baseline := runtime.NumGoroutine()

	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	codesSeen := make(chan codes.Code, conns*callsPerConn)
	var wg sync.WaitGroup
	for _, conn := range clients {
		for range callsPerConn {
			// The headers go now; the request message never does.
			s, err := conn.NewStream(t.Context(), desc, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
			require.NoError(t, err)
			wg.Go(func() { codesSeen <- status.Code(s.RecvMsg(&rlsv3.RateLimitResponse{})) })
		}
	}
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(60 * time.Second):
		require.FailNow(t, "held calls still open 60 s after they began, with a read timeout of 1 s")
	}
	close(codesSeen)
	n := 0
	for c := range codesSeen {
		assert.Equal(t, codes.DeadlineExceeded, c)
		n++
	}
	assert.Equal(t, conns*callsPerConn, n)
	// The connections are still up: a whole call still answers.
	_, err = rlsv3.NewRateLimitServiceClient(clients[0]).ShouldRateLimit(t.Context(), request("c"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseline+5 }, 30*time.Second, 10*time.Millisecond,
		"goroutines back to the %d before the held calls", baseline)
}
