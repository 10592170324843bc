// Package telemetry is the service's OpenTelemetry tracing, the one
// package that imports OpenTelemetry: the tracer provider and its OTLP
// exporter, configured by the standard OTEL_* variables, and the seams the
// rest of the service calls. A request's server span comes from Gin (the
// HTTP engines' first middleware) or GRPC (the gRPC server's interceptor),
// which take the caller's W3C traceparent with the SDK's propagator and
// ask the sampler before doing anything else; the decision layer's spans
// come from Decision (a decide.Tracer) and the store's from Store, which
// hears the library's limiter.StoreObserver.
//
// Tracing is off unless --tracing: then nothing here is built, no
// exporter starts, and the service pays nothing for it.
package telemetry

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// ServiceName is the resource's service.name unless OTEL_SERVICE_NAME
// (or OTEL_RESOURCE_ATTRIBUTES) says another.
const ServiceName = "tollgate"

// scope names the tracer of the spans this package makes.
const scope = "github.com/tollgate/tollgate/services/limiter"

// Options configures New.
type Options struct {
	// ClientKey puts the client key on the decision spans
	// (--tracing-client-key), and the caller's address, the request's
	// path and its user agent on the server spans; without it no span
	// carries any of them.
	ClientKey bool
	// Peer is what envoyproxy/ratelimit's TRACING_* variables say, over
	// the OTEL_* ones; nil: the OTEL_* variables alone.
	Peer *config.PeerTracing
	// Store names the store kind on the store spans ("sqlite", "redis",
	// "memory").
	Store string
}

// Tracing is the service's tracer provider and the seams that make spans.
// It is safe for concurrent use.
type Tracing struct {
	provider   *sdktrace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	clientKey  bool
	store      attribute.KeyValue
}

// New builds the tracer provider from the OTEL_* variables (and o.Peer
// over them) and starts its OTLP exporter. A variable it cannot take is
// a *config.Error naming it, so that the service refuses to start rather
// than trace with something other than what the operator wrote. Call
// Shutdown to flush the spans and stop the exporter.
func New(ctx context.Context, o Options) (*Tracing, error) {
	env, err := readEnv(o.Peer)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, o.Peer)
	if err != nil {
		return nil, err
	}
	var exporter sdktrace.SpanExporter
	switch env.protocol {
	case protocolGRPC:
		exporter, err = otlptracegrpc.New(ctx)
	case protocolHTTPJSON:
		exporter, err = otlptracehttp.New(ctx, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
	default:
		exporter, err = otlptracehttp.New(ctx, otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf))
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithSampler(env.sampler), sdktrace.WithResource(res))
	return &Tracing{
		provider:   provider,
		tracer:     provider.Tracer(scope),
		propagator: propagation.TraceContext{},
		clientKey:  o.ClientKey,
		store:      attrStore.String(o.Store),
	}, nil
}

// newResource is the resource of every span: service.name tollgate, then
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, then what peer says.
func newResource(ctx context.Context, peer *config.PeerTracing) (*resource.Resource, error) {
	opts := []resource.Option{resource.WithTelemetrySDK(), resource.WithAttributes(semconv.ServiceName(ServiceName)), resource.WithFromEnv()}
	if peer != nil {
		id := peer.ServiceInstanceID
		if id == "" {
			id = uuid.NewString() // as the peer does
		}
		attrs := []attribute.KeyValue{semconv.ServiceName(peer.ServiceName), semconv.ServiceInstanceID(id)}
		if peer.ServiceNamespace != "" {
			attrs = append(attrs, semconv.ServiceNamespace(peer.ServiceNamespace))
		}
		opts = append(opts, resource.WithAttributes(attrs...))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil {
		return nil, &config.Error{Field: "OTEL_RESOURCE_ATTRIBUTES", Reason: err.Error()}
	}
	return res, nil
}

// Shutdown ends the exporter once it has sent the spans still queued,
// within ctx.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}
