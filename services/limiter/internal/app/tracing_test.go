package app

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/services/limiter/internal/telemetry"
	"github.com/tollgate/tollgate/services/limiter/internal/telemetry/otlptest"
)

// The keys the traced requests spend: personal data, which no span may
// carry unless --tracing-client-key.
const (
	checkKey = "check-key-5b1e"
	gwKey    = "gateway-key-77c0"
	envoyKey = "envoy-key-a9d2"
	resetKey = "4417" // a user id, in DELETE /rate/reset/{userId}'s path
)

// tracedSetup is a configuration whose three transports decide: /v1/check
// on the api policy, /v1/forward-auth on the gw policy keyed by the
// X-Api-Client header, ShouldRateLimit on the edge domain's customer
// descriptor; the SQLite store.
func tracedSetup(t *testing.T, extra ...string) []string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "limiter.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`policies:
  gw: {algorithm: sliding_window, limit: 5, window: 60s}
gateway:
  - {match: {path_prefix: /api/}, policies: [gw], key: "header:X-Api-Client"}
`), 0o600))
	return append([]string{"--config", file, "--sqlite-path", filepath.Join(dir, "limiter.db"),
		"--envoy-config", envoyRules, "--grpc-addr=127.0.0.1:0"}, extra...)
}

// caller is a caller's span, sent as a W3C traceparent.
type caller struct{ trace, span string }

func (c caller) traceparent() string { return "00-" + c.trace + "-" + c.span + "-01" }

// The three callers, one per transport.
var (
	checkCaller = caller{"0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"}
	gwCaller    = caller{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"}
	envoyCaller = caller{"5cf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"}
)

// sendTraced sends one request on each transport of a, each with its
// caller's traceparent, and requires each to be allowed.
func sendTraced(t *testing.T, a *App) {
	t.Helper()
	srv := httptestServer(t, a.Handler())
	checkTraced(t, srv, http.StatusOK)

	req, err := http.NewRequest(http.MethodGet, srv+"/v1/forward-auth", nil)
	require.NoError(t, err)
	req.Header.Set("X-Forwarded-Uri", "/api/orders")
	req.Header.Set("X-Api-Client", gwKey)
	req.Header.Set("traceparent", gwCaller.traceparent())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	req, err = http.NewRequest(http.MethodDelete, srv+"/rate/reset/"+resetKey, nil)
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no admin key")

	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", envoyCaller.traceparent())
	answer, err := rlsv3.NewRateLimitServiceClient(grpcClient(t, a)).ShouldRateLimit(ctx, request(envoyKey))
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OK, answer.GetOverallCode())
}

// checkTraced sends POST /v1/check of checkKey on the api policy to srv
// with checkCaller's traceparent, and requires status.
func checkTraced(t *testing.T, srv string, status int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv+"/v1/check", strings.NewReader(`{"policy":"api","key":"`+checkKey+`"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", checkCaller.traceparent())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, status, resp.StatusCode)
}

// httptestServer serves h on a loopback port until the test ends and
// returns its URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// traced is one request's spans: its server span (the caller's child),
// the decision spans under it and the store spans under those.
type traced struct {
	server            otlptest.Span
	decisions, stores []otlptest.Span
}

// tracedOf finds the spans of the request whose caller is c among spans;
// ok is false until they have all arrived (a server span, n decisions,
// each with its store span).
func tracedOf(spans []otlptest.Span, c caller, n int) (traced, bool) {
	var tr traced
	found := false
	for _, s := range spans {
		if s.TraceID() == c.trace && s.ParentID() == c.span {
			tr.server, found = s, true
		}
	}
	if !found {
		return tr, false
	}
	for _, s := range spans {
		if s.ParentID() == tr.server.SpanID() && s.GetName() == telemetry.DecisionSpan {
			tr.decisions = append(tr.decisions, s)
		}
	}
	for _, d := range tr.decisions {
		for _, s := range spans {
			if s.ParentID() == d.SpanID() && strings.HasPrefix(s.GetName(), telemetry.StoreSpan) {
				tr.stores = append(tr.stores, s)
			}
		}
	}
	return tr, len(tr.decisions) == n && len(tr.stores) == n
}

// The server spans of sendTraced's requests, by name.
const (
	checkSpan = "POST /v1/check"
	gwSpan    = "GET /v1/forward-auth"
	envoySpan = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	resetSpan = "DELETE /rate/reset/:userId"
)

// callers are the callers of sendTraced's requests by their server span.
var callers = map[string]caller{checkSpan: checkCaller, gwSpan: gwCaller, envoySpan: envoyCaller}

// The attributes of an HTTP and of a gRPC server span, and those
// --tracing-client-key adds to each.
var (
	httpAttrs     = []string{"http.request.method", "http.route", "http.response.status_code", "server.address", "server.port", "network.protocol.version"}
	httpClientKey = []string{"network.peer.address", "url.path", "user_agent.original"}
	grpcAttrs     = []string{"rpc.system.name", "rpc.method", "rpc.response.status_code", "server.address", "server.port"}
	grpcClientKey = []string{"network.peer.address"}
)

// requireTraced waits for the spans of the three transports' requests and
// checks their names, parents and attributes.
func requireTraced(t *testing.T, r *otlptest.Receiver) []otlptest.Span {
	t.Helper()
	spans := r.WaitFor(t, "the spans of the four requests", func(spans []otlptest.Span) bool {
		if !slices.ContainsFunc(spans, func(s otlptest.Span) bool { return s.GetName() == resetSpan }) {
			return false
		}
		for _, c := range callers {
			if _, ok := tracedOf(spans, c, 1); !ok {
				return false
			}
		}
		return true
	})
	for name, route := range map[string]string{checkSpan: "/v1/check", gwSpan: "/v1/forward-auth"} {
		tr, _ := tracedOf(spans, callers[name], 1)
		a := tr.server.Attrs
		assert.Equal(t, strings.Fields(name)[0], a["http.request.method"], name)
		assert.Equal(t, route, a["http.route"], "%s: the route template", name)
		assert.Equal(t, "200", a["http.response.status_code"], name)
		assert.Equal(t, "1.1", a["network.protocol.version"], name)
		assert.Equal(t, "127.0.0.1", a["server.address"], "%s: the listener's", name)
		assert.NotEmpty(t, a["server.port"], name)
		assert.Equal(t, "STATUS_CODE_UNSET", tr.server.GetStatus().GetCode().String(), name)
	}
	reset := spans[slices.IndexFunc(spans, func(s otlptest.Span) bool { return s.GetName() == resetSpan })]
	assert.Equal(t, "/rate/reset/:userId", reset.Attrs["http.route"], "the route template, not the path")
	assert.Equal(t, "403", reset.Attrs["http.response.status_code"])
	assert.Equal(t, "STATUS_CODE_UNSET", reset.GetStatus().GetCode().String(), "a 4xx is the client's, not the server's error")
	tr, _ := tracedOf(spans, envoyCaller, 1)
	a := tr.server.Attrs
	assert.Equal(t, "grpc", a["rpc.system.name"])
	assert.Equal(t, envoySpan, a["rpc.method"])
	assert.Equal(t, "OK", a["rpc.response.status_code"])
	assert.Equal(t, "127.0.0.1", a["server.address"], "the listener's")
	policies := map[string]string{checkSpan: "api", gwSpan: "gw", envoySpan: "edge.customer"}
	algorithms := map[string]string{"api": "fixed_window", "gw": "sliding_window", "edge.customer": "fixed_window"}
	for name, c := range callers {
		tr, _ := tracedOf(spans, c, 1)
		assert.Equal(t, name, tr.server.GetName(), "the server span of the caller %s is the request's, a child of the caller's span", c.span)
		d := tr.decisions[0].Attrs
		policy := policies[name]
		assert.Equal(t, policy, d["tollgate.policy"], name)
		assert.Equal(t, algorithms[policy], d["tollgate.algorithm"], name)
		for attr, want := range map[string]string{"tollgate.allowed": "true", "tollgate.cost": "1", "tollgate.shadow": "false"} {
			assert.Equal(t, want, d[attr], "%s: %s", name, attr)
		}
		assert.NotEmpty(t, d["tollgate.remaining"], name)
		s := tr.stores[0]
		assert.Equal(t, telemetry.StoreSpan+"allow", s.GetName(), name)
		assert.Equal(t, "sqlite", s.Attrs["tollgate.store"], name)
		assert.Equal(t, "sqlite", s.Attrs["db.system.name"], name)
		assert.Equal(t, policy, s.Attrs["tollgate.policy"], name)
		assert.NotEmpty(t, s.Attrs["tollgate.store.batch"], "%s: the SQLite writer's batch", name)
	}
	return spans
}

// keysIn returns the keys that some attribute of spans (the resource's,
// the span's, its events') holds, or that a span's name holds.
func keysIn(spans []otlptest.Span, keys ...string) map[string][]string {
	found := map[string][]string{}
	look := func(where, v string) {
		for _, k := range keys {
			if strings.Contains(v, k) {
				found[k] = append(found[k], where)
			}
		}
	}
	for _, s := range spans {
		look(s.GetName()+" (name)", s.GetName())
		for name, v := range s.Resource {
			look(s.GetName()+" resource "+name, v)
		}
		for name, v := range s.Attrs {
			look(s.GetName()+" "+name, v)
		}
		for _, e := range s.GetEvents() {
			for _, kv := range e.GetAttributes() {
				look(s.GetName()+" event "+e.GetName()+" "+kv.GetKey(), otlptest.Text(kv.GetValue()))
			}
		}
	}
	return found
}

// TestTracesJoinTheCallersTrace: with --tracing and the OTLP/gRPC exporter
// pointed by OTEL_* at a receiver, one /v1/check, one forward-auth call
// and one ShouldRateLimit, each sent with a traceparent, give spans whose
// parent is the caller's span: the request's, a decision per policy with
// its attributes, a store call with the SQLite batch. No span carries a
// key; with --tracing-client-key the decision spans do.
func TestTracesJoinTheCallersTrace(t *testing.T) {
	for _, clientKey := range []bool{false, true} {
		t.Run(map[bool]string{false: "no key", true: "client key"}[clientKey], func(t *testing.T) {
			r := otlptest.StartGRPC(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: the batch goes out while the test waits
			args := tracedSetup(t, "--tracing")
			if clientKey {
				args = append(args, "--tracing-client-key")
			}
			a := newApp(t, load(t, args...), limitertest.NewClock(t0))
			sendTraced(t, a)
			spans := requireTraced(t, r)
			assert.Equal(t, telemetry.ServiceName, spans[0].Resource["service.name"], "the service's name unless OTEL_SERVICE_NAME")
			for name, c := range callers {
				tr, _ := tracedOf(spans, c, 1)
				want, extra := httpAttrs, httpClientKey
				if name == envoySpan {
					want, extra = grpcAttrs, grpcClientKey
				}
				if clientKey {
					want = slices.Concat(want, extra)
				}
				assert.ElementsMatch(t, want, slices.Collect(maps.Keys(tr.server.Attrs)), "%s: these attributes and no other", name)
			}
			found := keysIn(spans, checkKey, gwKey, envoyKey, resetKey)
			if !clientKey {
				assert.Empty(t, found, "no key on any span, in any attribute")
				return
			}
			for _, c := range []struct {
				caller caller
				key    string
			}{{checkCaller, checkKey}, {gwCaller, gwKey}, {envoyCaller, envoyKey}} {
				tr, _ := tracedOf(spans, c.caller, 1)
				assert.Contains(t, tr.decisions[0].Attrs["tollgate.key"], c.key, "--tracing-client-key puts the key on the decision span")
			}
		})
	}
}

// TestTracesOverOTLPHTTP: the default protocol, http/protobuf, sends the
// same spans to an OTLP/HTTP receiver.
func TestTracesOverOTLPHTTP(t *testing.T) {
	r := otlptest.StartHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "tollgate-edge")
	a := newApp(t, load(t, tracedSetup(t, "--tracing")...), limitertest.NewClock(t0))
	sendTraced(t, a)
	spans := requireTraced(t, r)
	assert.Equal(t, "tollgate-edge", spans[0].Resource["service.name"], "OTEL_SERVICE_NAME names the service")
	assert.Empty(t, keysIn(spans, checkKey, gwKey, envoyKey, resetKey))
}

// TestTracingOffSendsNothing: without --tracing, the same requests with
// the same OTEL_* variables send nothing: no exporter, the receiver sees
// no connection even once the app has closed (which flushes an exporter),
// and the global tracer provider is still OpenTelemetry's no-op default.
func TestTracingOffSendsNothing(t *testing.T) {
	for _, r := range []*otlptest.Receiver{otlptest.StartGRPC(t), otlptest.StartHTTP(t)} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
		a, err := New(context.Background(), load(t, tracedSetup(t)...), WithClock(limitertest.NewClock(t0)))
		require.NoError(t, err)
		assert.Nil(t, a.tracing, "no tracer provider, no exporter")
		sendTraced(t, a)
		require.NoError(t, a.Close())
		assert.Zero(t, r.Conns(), "nothing connected to the receiver")
		assert.Empty(t, r.Spans())
		_, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider)
		assert.False(t, sdk, "the global tracer provider is untouched")
	}
}

// TestStoreErrorOnTheStoreSpan: with Redis down, a decision's store span
// records the error and its status is Error, with the node and the
// breaker's state; the decision span and the request's 503 follow.
func TestStoreErrorOnTheStoreSpan(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("stops Redis: needs a private redis-server")
	}
	r := otlptest.StartGRPC(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	a := newApp(t, load(t, "--tracing", "--store=redis", "--redis-url", srv.URL()), limitertest.NewClock(t0))
	srv.Stop()
	checkTraced(t, httptestServer(t, a.Handler()), http.StatusServiceUnavailable)

	var tr traced
	r.WaitFor(t, "the failed request's spans", func(spans []otlptest.Span) bool {
		var ok bool
		tr, ok = tracedOf(spans, checkCaller, 1)
		return ok
	})
	store := tr.stores[0]
	assert.Equal(t, "redis", store.Attrs["tollgate.store"])
	assert.Equal(t, srv.Addr(), store.Attrs["tollgate.redis.node"])
	assert.Equal(t, "fixed_window", store.Attrs["tollgate.redis.script"])
	assert.Equal(t, "closed", store.Attrs["tollgate.redis.breaker"])
	for _, s := range []otlptest.Span{store, tr.decisions[0]} {
		assert.Equal(t, "STATUS_CODE_ERROR", s.GetStatus().GetCode().String(), s.GetName())
		assert.Contains(t, s.GetStatus().GetMessage(), "store unavailable", s.GetName())
		require.NotEmpty(t, s.GetEvents(), s.GetName())
		assert.Equal(t, "exception", s.GetEvents()[0].GetName(), "%s: the error recorded", s.GetName())
	}
	assert.Equal(t, "503", tr.server.Attrs["http.response.status_code"])
	assert.Equal(t, "503", tr.server.Attrs["error.type"])
	assert.Equal(t, "STATUS_CODE_ERROR", tr.server.GetStatus().GetCode().String(), "a 5xx is the server's error")
	assert.Empty(t, keysIn([]otlptest.Span{store, tr.decisions[0], tr.server}, checkKey))
}
