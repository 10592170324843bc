package envoy

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// t0 is 15 seconds before a minute ends.
var t0 = time.Date(2026, 3, 1, 12, 0, 45, 0, time.UTC)

// stores are the backends every scenario runs on.
var stores = map[string]func(t *testing.T) limiter.Store{
	"memory": func(t *testing.T) limiter.Store {
		s := memstore.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
	"sqlite": func(t *testing.T) limiter.Store {
		s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "limiter.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
}

// server is a Service behind a real gRPC server on a loopback port.
type server struct {
	client  rlsv3.RateLimitServiceClient
	health  healthpb.HealthClient
	clock   *limitertest.Clock
	metrics *prometheus.Registry
}

// fixtures loads the rule model's testdata/rules, with the header fields on
// (off by default; the drop-in tests of the app package cover that).
func fixtures(t testing.TB) *envoyrules.Rules {
	t.Helper()
	r, err := envoyrules.LoadDir(filepath.Join("..", "envoyrules", "testdata", "rules"), envoyrules.Options{ResponseHeaders: true})
	require.NoError(t, err)
	return r
}

// serve starts rules on store behind a gRPC server on 127.0.0.1:0 and
// returns a client; everything stops at cleanup.
func serve(t testing.TB, rules *envoyrules.Rules, store limiter.Store) *server {
	t.Helper()
	reg := prometheus.NewRegistry()
	clock := limitertest.NewClock(t0)
	srv, _ := NewGRPCServer(newService(t, rules, store, clock, reg), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &server{client: rlsv3.NewRateLimitServiceClient(conn), health: healthpb.NewHealthClient(conn), clock: clock, metrics: reg}
}

// newService returns a Service deciding rules on store, with its metrics
// on reg, in a snapshot of its own (whose seed routes no test asks).
func newService(t testing.TB, rules *envoyrules.Rules, store limiter.Store, clock limiter.Clock, reg prometheus.Registerer) *Service {
	t.Helper()
	m, err := decide.NewMetrics(reg)
	require.NoError(t, err)
	seed := []string{"seed"}
	snap, err := snapshot.New(snapshot.Parts{
		Policies:  []limiter.Policy{{Name: "seed", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Minute}},
		PingRoute: seed, CheckRoute: seed, Envoy: rules, Store: store, StoreName: "test", Clock: clock, Metrics: m,
	})
	require.NoError(t, err)
	return NewService(func() *snapshot.Snapshot { return snap })
}

// entries builds a descriptor from key, value pairs.
func entries(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask calls ShouldRateLimit and requires success.
func (s *server) ask(t *testing.T, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	require.Len(t, resp.GetStatuses(), len(ds), "one status per descriptor")
	return resp
}

// codesOf returns the overall code followed by each descriptor's.
func codesOf(resp *rlsv3.RateLimitResponse) []rlsv3.RateLimitResponse_Code {
	out := []rlsv3.RateLimitResponse_Code{resp.GetOverallCode()}
	for _, s := range resp.GetStatuses() {
		out = append(out, s.GetCode())
	}
	return out
}

// headers returns the response headers to add as a map.
func headers(resp *rlsv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	return h
}

// decisions reads tollgate_decisions_total for policy and result.
func (s *server) decisions(t *testing.T, policy, result string) float64 {
	t.Helper()
	mfs, err := s.metrics.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "tollgate_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["policy"] == policy && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
