// Package otlptest is an OpenTelemetry trace receiver for tests, written
// from the OTLP protocol's own definitions (go.opentelemetry.io/proto/otlp):
// the collector's gRPC TraceService, or OTLP/HTTP's POST /v1/traces with a
// protobuf body. It keeps every span it receives and counts the
// connections made to it, so that a test can also show that nothing came.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one span received, with its resource's and its own attributes
// as text.
type Span struct {
	*tracepb.Span
	Resource map[string]string
	Attrs    map[string]string
}

// TraceID and SpanID, ParentID are the span's ids in hex, as a W3C
// traceparent writes them.
func (s Span) TraceID() string  { return hex.EncodeToString(s.GetTraceId()) }
func (s Span) SpanID() string   { return hex.EncodeToString(s.GetSpanId()) }
func (s Span) ParentID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Receiver receives spans. Its methods are safe for concurrent use.
type Receiver struct {
	// Endpoint is what OTEL_EXPORTER_OTLP_ENDPOINT must say to reach it:
	// http://127.0.0.1:PORT.
	Endpoint string

	conns atomic.Int64
	mu    sync.Mutex
	spans []Span
}

// Conns returns how many connections were made to the receiver.
func (r *Receiver) Conns() int64 { return r.conns.Load() }

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor polls, for at most 30 seconds (a hang guard), until done says
// the spans received so far are enough, and returns them.
func (r *Receiver) WaitFor(t testing.TB, what string, done func([]Span) bool) []Span {
	t.Helper()
	var spans []Span
	require.Eventually(t, func() bool { spans = r.Spans(); return done(spans) }, 30*time.Second, 10*time.Millisecond,
		"the receiver never got %s", what)
	return spans
}

// add keeps the spans of req.
func (r *Receiver) add(req *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := text(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Span: s, Resource: res, Attrs: text(s.GetAttributes())})
			}
		}
	}
}

// text returns attributes as name -> value as text.
func text(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = Text(kv.GetValue())
	}
	return out
}

// Text is an attribute value as text: a string as it is, anything else as
// fmt prints the value it holds.
func Text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return fmt.Sprint(v.GetValue())
}

// counted counts the connections a listener accepts.
type counted struct {
	net.Listener
	n *atomic.Int64
}

func (l counted) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// traceService is the collector's gRPC TraceService.
type traceService struct {
	collectortrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// StartGRPC starts a receiver of OTLP over gRPC on a loopback port,
// stopped at the end of the test.
func StartGRPC(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &Receiver{Endpoint: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, traceService{r: r})
	go func() { _ = srv.Serve(counted{ln, &r.conns}) }()
	t.Cleanup(srv.Stop)
	return r
}

// StartHTTP starts a receiver of OTLP over HTTP with protobuf bodies
// (gzip or not) on a loopback port, closed at the end of the test.
func StartHTTP(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces of application/x-protobuf", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			z, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = z
		}
		data, err := io.ReadAll(io.LimitReader(body, 64<<20))
		var export collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(data, &export)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&export)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = io.Copy(w, bytes.NewReader(out))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	r.Endpoint = srv.URL
	return r
}
