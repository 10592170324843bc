// Package telemetry is the service's OpenTelemetry tracing, the one
// package that imports OpenTelemetry: the tracer provider and its OTLP
// exporter, configured by the standard OTEL_* variables, and the seams the
// rest of the service calls. A request's span comes from the contrib
// instrumentation (otelhttp around the HTTP engine, otelgrpc's stats
// handler on the gRPC server), which takes the caller's W3C traceparent;
// the decision layer's spans come from Decision (a decide.Tracer) and the
// store's from Store, which hears the library's limiter.StoreObserver.
//
// Tracing is off unless --tracing: then nothing here is built, no
// exporter starts, and the service pays nothing for it.
package telemetry

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

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
	// (--tracing-client-key); without it no span carries a key, nor
	// the client's address or a path that may hold one.
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

// untraced are the paths whose requests get no span: probes and scrapes,
// which come every few seconds and say nothing of a client's request.
var untraced = map[string]bool{"/healthz": true, "/readyz": true, "/healthcheck": true, "/metrics": true}

// HTTP returns h with a server span per request (otelhttp), a child of
// the caller's span when the request carries a W3C traceparent; probes
// and scrapes are not traced. The span's name is the method until Gin
// names it by its route.
func (t *Tracing) HTTP(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "",
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(t.propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool { return !untraced[r.URL.Path] }))
}

// redacted replaces an attribute value that could name a client, as
// OpenTelemetry's conventions redact a URL's credentials.
const redacted = "REDACTED"

// Gin is the engine's first middleware (httpapi.Options.Trace): once the
// route has matched, it names the request's span by the route template
// (POST /v1/check) and sets http.route. Unless ClientKey, it also
// redacts what otelhttp took from the request that can be a client's key:
// its address (network.peer.address, client.address, X-Forwarded-For's
// included: the peer key source) and a path that is not the route itself
// (/rate/reset/{userId}, or no route at all).
func (t *Tracing) Gin(c *gin.Context) {
	span := trace.SpanFromContext(c.Request.Context())
	if span.IsRecording() {
		route, name := c.FullPath(), c.Request.Method
		attrs := make([]attribute.KeyValue, 0, 4)
		if route != "" {
			name += " " + route
			attrs = append(attrs, semconv.HTTPRoute(route))
		}
		span.SetName(name)
		if !t.clientKey {
			attrs = append(attrs, semconv.NetworkPeerAddress(redacted), semconv.ClientAddress(redacted))
			if c.Request.URL.Path != route {
				attrs = append(attrs, semconv.URLPath(redacted))
			}
		}
		span.SetAttributes(attrs...)
	}
	c.Next()
}

// GRPC is the gRPC server's option that makes a server span per call
// (otelgrpc), a child of the caller's span when its metadata carries a
// W3C traceparent (Envoy sends one when it traces); health checks are not
// traced.
func (t *Tracing) GRPC() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(t.propagator),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck()))))
}
