package telemetry

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/services/limiter/internal/telemetry/otlptest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// seen is what a handler saw of its request's span.
type seen struct {
	span      trace.SpanContext
	recording bool
}

// seeing returns what ctx's span is.
func seeing(ctx context.Context) seen {
	s := trace.SpanFromContext(ctx)
	return seen{s.SpanContext(), s.IsRecording()}
}

// rls answers ShouldRateLimit OK and tells seen what it saw.
type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
	seen chan<- seen
}

func (s rls) ShouldRateLimit(ctx context.Context, _ *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.seen <- seeing(ctx)
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// serveTraced serves a Gin engine traced by tr, with GET /items/:id and
// /healthz, and a gRPC server traced by tr, with Envoy's rate-limit service
// and grpc.health.v1, until the test ends. Each handler tells seen what it
// saw. It returns the engine's URL and a client of the gRPC server.
func serveTraced(t *testing.T, tr *Tracing, seen chan<- seen) (string, *grpc.ClientConn) {
	t.Helper()
	e := gin.New()
	e.Use(tr.Gin)
	for _, path := range []string{"/items/:id", "/healthz"} {
		e.GET(path, func(c *gin.Context) {
			seen <- seeing(c.Request.Context())
			c.Status(http.StatusNoContent)
		})
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	gs := grpc.NewServer(tr.GRPC())
	rlsv3.RegisterRateLimitServiceServer(gs, rls{seen: seen})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return srv.URL, conn
}

// get sends a method request of url with traceparent and returns its
// status.
func get(t *testing.T, method, url, traceparent string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// The server spans ask the sampler first. Under the default sampler, which
// follows the caller, a request whose caller did not sample its trace gets
// no span on either transport, only its context: the caller's trace,
// unrecorded, so that the decision and store seams stay silent and the
// trace id goes on. A sampled caller's request gets its span; probes and
// health checks none; a method the conventions do not know is named HTTP
// and _OTHER, never by the client's word.
func TestServerSpansAskTheSamplerFirst(t *testing.T) {
	r := otlptest.StartGRPC(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	tr, err := New(context.Background(), Options{Store: "memory"})
	require.NoError(t, err)
	saw := make(chan seen, 2)
	url, conn := serveTraced(t, tr, saw)
	client := rlsv3.NewRateLimitServiceClient(conn)
	unsampled := trace.TraceID{0x5e, 1}
	sampled := trace.TraceID{0x5e, 2}
	parent := func(id trace.TraceID, flags string) string {
		return "00-" + id.String() + "-00f067aa0ba902b7-" + flags
	}
	call := func(traceparent string) {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
		_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d"})
		require.NoError(t, err)
	}

	require.Equal(t, http.StatusNoContent, get(t, http.MethodGet, url+"/items/7", parent(unsampled, "00")))
	call(parent(unsampled, "00"))
	for _, transport := range []string{"HTTP", "gRPC"} {
		s := <-saw
		assert.Equal(t, unsampled, s.span.TraceID(), "%s: the caller's trace goes on", transport)
		assert.False(t, s.span.IsSampled(), transport)
		assert.False(t, s.recording, "%s: not recorded, so the seams beneath make no span", transport)
	}

	require.Equal(t, http.StatusNoContent, get(t, http.MethodGet, url+"/healthz", parent(sampled, "01")))
	assert.False(t, (<-saw).span.IsValid(), "a probe has no span")
	_, err = healthpb.NewHealthClient(conn).Check(metadata.AppendToOutgoingContext(context.Background(), "traceparent", parent(sampled, "01")), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)

	require.Equal(t, http.StatusNoContent, get(t, http.MethodGet, url+"/items/8", parent(sampled, "01")))
	call(parent(sampled, "01"))
	for _, transport := range []string{"HTTP", "gRPC"} {
		s := <-saw
		assert.Equal(t, sampled, s.span.TraceID(), transport)
		assert.True(t, s.recording, transport)
	}
	require.Equal(t, http.StatusNotFound, get(t, "BREW", url+"/items/9", parent(sampled, "01")))

	require.NoError(t, tr.Shutdown(context.Background()), "shutting down flushes")
	spans := r.Spans()
	var names []string
	for _, s := range spans {
		names = append(names, s.GetName())
		assert.Equal(t, sampled.String(), s.TraceID(), "%s: only the sampled caller's trace", s.GetName())
	}
	assert.ElementsMatch(t, []string{"GET /items/:id", "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "HTTP"}, names,
		"no span for the unsampled caller, the probe, the health check")
	brew := spans[slices.IndexFunc(spans, func(s otlptest.Span) bool { return s.GetName() == "HTTP" })]
	assert.Equal(t, "_OTHER", brew.Attrs["http.request.method"])
	assert.Equal(t, "404", brew.Attrs["http.response.status_code"])
	assert.NotContains(t, brew.Attrs, "http.route", "no route matched")
}
