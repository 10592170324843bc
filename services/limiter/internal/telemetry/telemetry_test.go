package telemetry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/telemetry/otlptest"
)

// A value of an OTEL_* variable that the SDK would log and drop is refused
// at start, naming the variable, as a configuration error (exit status 2);
// a header value, which may hold a credential, is not quoted.
func TestBadVariablesAreRefused(t *testing.T) {
	for name, value := range map[string]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL":        "thrift",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc-web",
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "localhost:4318",
		"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT":  "10s",
		"OTEL_EXPORTER_OTLP_INSECURE":        "yes",
		"OTEL_EXPORTER_OTLP_COMPRESSION":     "zstd",
		"OTEL_EXPORTER_OTLP_HEADERS":         "authorization Bearer s3cret",
		"OTEL_EXPORTER_OTLP_CERTIFICATE":     "/nonexistent/ca.pem",
		"OTEL_EXPORTER_OTLP_CLIENT_KEY":      "/nonexistent/key.pem",
		"OTEL_TRACES_SAMPLER":                "sometimes",
		"OTEL_TRACES_EXPORTER":               "zipkin",
		"OTEL_RESOURCE_ATTRIBUTES":           "team",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			_, err := New(context.Background(), Options{Store: "memory"})
			require.Error(t, err)
			assert.ErrorIs(t, err, config.ErrInvalid)
			assert.Contains(t, err.Error(), name)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
	t.Run("OTEL_TRACES_SAMPLER_ARG", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", "1.5")
		_, err := New(context.Background(), Options{Store: "memory"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "OTEL_TRACES_SAMPLER_ARG")
	})
}

// The sampler is the variables' (parentbased_always_on by default): a
// span under a sampled caller is sampled, under an unsampled one not;
// always_off samples nothing; envoyproxy/ratelimit's TRACING_SAMPLING_RATE
// is a parent-based ratio over the variables.
func TestSampler(t *testing.T) {
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true})
	unsampled := sampled.WithTraceFlags(0)
	for _, c := range []struct {
		name string
		env  map[string]string
		peer *config.PeerTracing
		want map[string]bool // parent -> sampled
	}{
		{"default", nil, nil, map[string]bool{"none": true, "sampled": true, "unsampled": false}},
		{"always_off", map[string]string{"OTEL_TRACES_SAMPLER": "always_off"}, nil, map[string]bool{"none": false, "sampled": false, "unsampled": false}},
		{"always_on", map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, nil, map[string]bool{"none": true, "sampled": true, "unsampled": true}},
		{"ratio 0", map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}, nil, map[string]bool{"none": false, "sampled": true, "unsampled": false}},
		{"peer rate 0 over always_on", map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, &config.PeerTracing{ServiceName: "RateLimit", Protocol: "http/protobuf"},
			map[string]bool{"none": false, "sampled": true, "unsampled": false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			e, err := readEnv(c.peer)
			require.NoError(t, err)
			for parent, sc := range map[string]trace.SpanContext{"none": {}, "sampled": sampled, "unsampled": unsampled} {
				ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
				got := e.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: trace.TraceID{1}, Name: "x"}).Decision
				assert.Equal(t, c.want[parent], got == sdktrace.RecordAndSample, "parent %s", parent)
			}
		})
	}
}

// Under --envoy-compat-env the peer's TRACING_* say the protocol and the
// resource over the OTEL_* variables: here gRPC to a gRPC receiver though
// OTEL_EXPORTER_OTLP_PROTOCOL says http/protobuf, and the peer's service
// name, namespace and instance id.
func TestPeerTracingOverTheVariables(t *testing.T) {
	r := otlptest.StartGRPC(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "not-this")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod,service.namespace=not-this")
	tr, err := New(context.Background(), Options{Store: "memory", Peer: &config.PeerTracing{ServiceName: "RateLimit", ServiceNamespace: "edge", Protocol: "grpc", SamplingRate: 1}})
	require.NoError(t, err)
	_, span := tr.tracer.Start(context.Background(), "probe")
	span.End()
	require.NoError(t, tr.Shutdown(context.Background()), "shutting down flushes")
	spans := r.Spans()
	require.Len(t, spans, 1)
	res := spans[0].Resource
	assert.Equal(t, "RateLimit", res["service.name"])
	assert.Equal(t, "edge", res["service.namespace"])
	assert.Len(t, res["service.instance.id"], 36, "a random UUID, as the peer makes one: %q", res["service.instance.id"])
	assert.Equal(t, "prod", res["deployment.environment.name"], "OTEL_RESOURCE_ATTRIBUTES still adds what the peer does not say")
}

// The endpoint is checked for the protocol the exporter will use: the
// peer's TRACING_EXPORTER_PROTOCOL over OTEL_EXPORTER_OTLP_PROTOCOL, so a
// gRPC host:port is taken when the peer says grpc, and refused when the
// peer says http though the OTEL_* variables say grpc.
func TestEndpointCheckedForThePeersProtocol(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	e, err := readEnv(&config.PeerTracing{ServiceName: "RateLimit", Protocol: "grpc", SamplingRate: 1})
	require.NoError(t, err)
	assert.Equal(t, "grpc", e.protocol)

	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	_, err = readEnv(&config.PeerTracing{ServiceName: "RateLimit", Protocol: "http/protobuf", SamplingRate: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OTEL_EXPORTER_OTLP_ENDPOINT")
}
