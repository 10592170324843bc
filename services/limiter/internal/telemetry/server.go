package telemetry

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The server spans: the request's, a child of the caller's span when the
// request carries a W3C traceparent. Each asks the sampler first: an
// unsampled request only gets the span's context (its trace id, which the
// decision and store seams see is not recorded), and a sampled one only
// the attributes below, none of which can hold a client's key unless
// ClientKey: no client address, path, query nor user agent.

// serverSpan are the options of every server span, made once.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// untraced are the paths whose requests get no span: probes and scrapes,
// which come every few seconds and say nothing of a client's request.
var untraced = map[string]bool{"/healthz": true, "/readyz": true, "/healthcheck": true, "/metrics": true}

// Gin is the engines' first middleware (httpapi.Options.Trace), which runs
// once the route has matched: it starts the request's server span, named
// by its method and route template (POST /v1/check, DELETE
// /rate/reset/:userId; the method alone when no route matched). Sampled,
// the span has http.request.method, http.route, http.response.status_code,
// the listener's server.address and server.port and
// network.protocol.version, and a 5xx is an error; with ClientKey also the
// caller's network.peer.address, url.path and user_agent.original.
func (t *Tracing) Gin(c *gin.Context) {
	r := c.Request
	if untraced[r.URL.Path] {
		return
	}
	method, name := httpMethod(r.Method)
	route := c.FullPath()
	if route != "" {
		name += " " + route
	}
	ctx, span := t.tracer.Start(t.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), name, serverSpan...)
	c.Request = r.WithContext(ctx)
	if !span.IsRecording() {
		return
	}
	c.Next()
	t.endHTTP(span, r, method, route, c.Writer.Status())
}

// endHTTP sets the attributes and the status of the recorded span of r,
// which answered code, and ends it. (Apart from Gin, so that the
// handlers' stack does not hold its frame.)
func (t *Tracing) endHTTP(span trace.Span, r *http.Request, method attribute.KeyValue, route string, code int) {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, method, semconv.HTTPResponseStatusCode(code))
	if route != "" {
		attrs = append(attrs, semconv.HTTPRoute(route))
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		attrs = serverAddr(attrs, local)
	}
	if v := protocolVersion(r); v != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(v))
	}
	if t.clientKey {
		attrs = peerAddr(attrs, r.RemoteAddr)
		attrs = append(attrs, semconv.URLPath(r.URL.Path))
		if ua := r.UserAgent(); ua != "" {
			attrs = append(attrs, semconv.UserAgentOriginal(ua))
		}
	}
	if code >= http.StatusInternalServerError {
		// The status code says why: no description (semantic conventions).
		attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(code)))
		span.SetStatus(codes.Error, "")
	}
	span.SetAttributes(attrs...)
	span.End()
}

// httpMethods are the http.request.method of the methods the conventions
// know.
var httpMethods = map[string]attribute.KeyValue{
	http.MethodGet: semconv.HTTPRequestMethodGet, http.MethodHead: semconv.HTTPRequestMethodHead,
	http.MethodPost: semconv.HTTPRequestMethodPost, http.MethodPut: semconv.HTTPRequestMethodPut,
	http.MethodPatch: semconv.HTTPRequestMethodPatch, http.MethodDelete: semconv.HTTPRequestMethodDelete,
	http.MethodOptions: semconv.HTTPRequestMethodOptions, http.MethodConnect: semconv.HTTPRequestMethodConnect,
	http.MethodTrace: semconv.HTTPRequestMethodTrace,
}

// httpMethod returns the http.request.method of method and the method that
// names a span: a method the conventions do not know is _OTHER and HTTP
// (never the client's own word, which could be anything).
func httpMethod(method string) (attribute.KeyValue, string) {
	if attr, ok := httpMethods[method]; ok {
		return attr, method
	}
	return semconv.HTTPRequestMethodOther, "HTTP"
}

// protocolVersion is r's network.protocol.version ("1.1", "2"), empty
// when unknown.
func protocolVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		return "1.1"
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return "1.0"
	case r.ProtoMajor == 2:
		return "2"
	}
	return ""
}

// serverAddr appends server.address and server.port of the listener's
// address local to attrs.
func serverAddr(attrs []attribute.KeyValue, local net.Addr) []attribute.KeyValue {
	if tcp, ok := local.(*net.TCPAddr); ok {
		return append(attrs, semconv.ServerAddress(tcp.IP.String()), semconv.ServerPort(tcp.Port))
	}
	return append(attrs, semconv.ServerAddress(local.String()))
}

// peerAddr appends network.peer.address, the caller's address (the
// connection's: no header is trusted for it), host:port addr without its
// port, to attrs.
func peerAddr(attrs []attribute.KeyValue, addr string) []attribute.KeyValue {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	return append(attrs, semconv.NetworkPeerAddress(addr))
}

// healthMethods prefixes the methods of grpc.health.v1, which get no span.
var healthMethods = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

// GRPC is the gRPC server's option that starts a server span per unary
// call but a health check, named by its method
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), a child
// of the caller's span when the call's metadata carries a W3C traceparent
// (Envoy sends one when it traces). Sampled, the span has rpc.system.name,
// rpc.method, rpc.response.status_code and the listener's server.address
// and server.port, and a status the conventions call a server's error
// (Internal, Unavailable, ...) is an error; with ClientKey also the
// caller's network.peer.address. Put it first among the interceptors, so
// that its span sees what the others answer (a recovered panic's
// Internal).
func (t *Tracing) GRPC() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(t.unary)
}

func (t *Tracing) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, healthMethods) {
		return handler(ctx, req)
	}
	method := strings.TrimPrefix(info.FullMethod, "/")
	ctx, span := t.tracer.Start(t.propagator.Extract(ctx, incoming{ctx}), method, serverSpan...)
	if !span.IsRecording() {
		return handler(ctx, req)
	}
	resp, err := handler(ctx, req)
	t.endRPC(ctx, span, method, status.Code(err))
	return resp, err
}

// endRPC sets the attributes and the status of the recorded span of the
// call of method, which ended with code, and ends it. (Apart from unary,
// so that the handler's stack does not hold its frame: each call runs on
// a goroutine of its own, whose stack is copied when it outgrows its
// start.)
func (t *Tracing) endRPC(ctx context.Context, span trace.Span, method string, code grpccodes.Code) {
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, semconv.RPCSystemNameGRPC, semconv.RPCMethod(method), semconv.RPCResponseStatusCode(rpccode.Code(code).String()))
	if p, ok := peer.FromContext(ctx); ok {
		if p.LocalAddr != nil {
			attrs = serverAddr(attrs, p.LocalAddr)
		}
		if t.clientKey && p.Addr != nil {
			attrs = peerAddr(attrs, p.Addr.String())
		}
	}
	if serverError(code) {
		attrs = append(attrs, semconv.ErrorTypeKey.String(rpccode.Code(code).String()))
		span.SetStatus(codes.Error, "")
	}
	span.SetAttributes(attrs...)
	span.End()
}

// serverError reports whether a call that ended with c failed on the
// server's side, as the conventions for gRPC servers say; the other codes
// are the caller's.
func serverError(c grpccodes.Code) bool {
	switch c {
	case grpccodes.Unknown, grpccodes.DeadlineExceeded, grpccodes.Unimplemented, grpccodes.Internal, grpccodes.Unavailable, grpccodes.DataLoss:
		return true
	}
	return false
}

// incoming is a call's incoming metadata as the propagator reads it, a key
// at a time, without copying the whole metadata.
type incoming struct{ ctx context.Context }

func (c incoming) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c incoming) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	return slices.Collect(maps.Keys(md))
}

// Set does nothing: a propagator extracting never sets.
func (incoming) Set(string, string) {}
