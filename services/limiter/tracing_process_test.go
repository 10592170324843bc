package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/services/limiter/internal/telemetry/otlptest"
)

// flushOnly keeps the exporter's batch until the process stops: what the
// receiver gets was sent by the graceful stop.
const flushOnly = "OTEL_BSP_SCHEDULE_DELAY=3600000"

// postTraced posts body to url with the W3C traceparent of the caller's
// span span in trace trace, and requires status.
func postTraced(t *testing.T, url, body, trace, span string, status int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+trace+"-"+span+"-01")
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, status, resp.StatusCode)
}

// childOf returns the span of spans whose parent is the caller's span, and
// the names of the spans of its trace.
func childOf(t *testing.T, spans []otlptest.Span, trace, span string) (otlptest.Span, []string) {
	t.Helper()
	var child *otlptest.Span
	var names []string
	for _, s := range spans {
		if s.TraceID() != trace {
			continue
		}
		names = append(names, s.GetName())
		if s.ParentID() == span {
			child = &s
		}
	}
	require.NotNil(t, child, "no span is the caller's child among %d", len(spans))
	return *child, names
}

// TestBinaryExportsTracesByTheOTELVariables starts the binary with
// --tracing and only the standard OTEL_* variables to configure the
// exporter (OTLP/gRPC to a receiver), the batch held until the process
// stops: a /v1/check sent with a traceparent is, once the process stopped
// on SIGTERM, at the receiver as the caller's child with its decision and
// store spans, under the service name and resource the variables give. A
// variable the exporter cannot take stops the start naming it.
func TestBinaryExportsTracesByTheOTELVariables(t *testing.T) {
	skipShort(t)
	r := otlptest.StartGRPC(t)
	in := startProcess(t, []string{"--store=memory", "--tracing"},
		"OTEL_EXPORTER_OTLP_ENDPOINT="+r.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", flushOnly,
		"OTEL_SERVICE_NAME=tollgate-bin", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test")
	const trace, span = "1af7651916cd43dd8448eb211c80319d", "c7ad6b7169203332"
	postTraced(t, in.url+"/v1/check", `{"policy":"api","key":"bin-key-31"}`, trace, span, http.StatusOK)
	in.stop()

	spans := r.Spans()
	server, names := childOf(t, spans, trace, span)
	assert.Equal(t, "POST /v1/check", server.GetName())
	assert.ElementsMatch(t, []string{"POST /v1/check", "tollgate.decision", "tollgate.store.allow"}, names, "sent when the process stopped")
	assert.Equal(t, "tollgate-bin", server.Resource["service.name"])
	assert.Equal(t, "test", server.Resource["deployment.environment.name"])

	conns := r.Conns()
	cmd := exec.Command(binary(t), "--store=memory", "--tracing", "--addr=127.0.0.1:0")
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_PROTOCOL=thrift")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Run(), &exit)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Equal(t, `limiter: config: OTEL_EXPORTER_OTLP_PROTOCOL: "thrift": not grpc, http/protobuf or http/json`+"\n", stderr.String())
	assert.Equal(t, conns, r.Conns(), "the refused start connected to nothing")
}

// TestBinaryTracesByThePeersVariables: with --envoy-compat-env,
// envoyproxy/ratelimit's TRACING_ENABLED and TRACING_EXPORTER_PROTOCOL
// turn tracing on over gRPC (though OTEL_EXPORTER_OTLP_PROTOCOL says
// http/protobuf), its TRACING_SERVICE_* name the service, and the endpoint
// is OTEL_EXPORTER_OTLP_ENDPOINT, as the peer lets its SDK read it.
func TestBinaryTracesByThePeersVariables(t *testing.T) {
	skipShort(t)
	redis := redistest.Start(t)
	r := otlptest.StartGRPC(t)
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "config"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(root, "config", "edge.yaml"), []byte(
		"domain: edge\ndescriptors:\n  - key: path\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n"), 0o600))
	in := startProcess(t, []string{"--envoy-compat-env", "--grpc-addr=127.0.0.1:0"},
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr(), "RUNTIME_ROOT="+root, "LOG_LEVEL=info",
		"TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=grpc", "TRACING_SERVICE_NAMESPACE=edge", "TRACING_SERVICE_INSTANCE_ID=pod-7",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+r.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_SERVICE_NAME=not-this", flushOnly)
	const trace, span = "2af7651916cd43dd8448eb211c80319e", "d7ad6b7169203333"
	postTraced(t, in.url+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/a"}]}]}`, trace, span, http.StatusOK)
	in.stop()

	server, names := childOf(t, r.Spans(), trace, span)
	assert.Equal(t, "POST /json", server.GetName())
	assert.Contains(t, names, "tollgate.store.allow")
	assert.Equal(t, map[string]string{"service.name": "RateLimit", "service.namespace": "edge", "service.instance.id": "pod-7"},
		map[string]string{"service.name": server.Resource["service.name"], "service.namespace": server.Resource["service.namespace"],
			"service.instance.id": server.Resource["service.instance.id"]})
}
