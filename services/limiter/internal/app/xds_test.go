package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
)

const xdsNode = "init-test-node"

// xdsServer is go-control-plane's own State-of-the-World management server
// on a loopback port: it serves the snapshot set for xdsNode and reports
// every request it receives (the ACKs and NACKs) on reqs.
type xdsServer struct {
	cache cache.SnapshotCache
	reqs  chan *discoveryv3.DiscoveryRequest
	addr  string
	stop  func()
}

// startXDS starts the server on addr ("127.0.0.1:0" for a free port) with
// the snapshot first, until stop or the end of the test.
func startXDS(t *testing.T, addr string, first *cache.Snapshot, opts ...grpc.ServerOption) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil), reqs: make(chan *discoveryv3.DiscoveryRequest, 100)}
	x.set(t, first)
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.NewServer(ctx, x.cache, server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			x.reqs <- r
			return nil
		},
	})
	gs := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	x.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	x.stop = func() {
		cancel()
		gs.Stop()
		<-served
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			x.stop()
		}
	})
	return x
}

func (x *xdsServer) set(t *testing.T, s *cache.Snapshot) {
	t.Helper()
	require.NoError(t, s.Consistent())
	require.NoError(t, x.cache.SetSnapshot(context.Background(), xdsNode, s))
}

// await returns the first request received that ok accepts, failing the
// test after a minute without one.
func (x *xdsServer) await(t *testing.T, what string, ok func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case r := <-x.reqs:
			if ok(r) {
				return r
			}
		case <-deadline:
			t.Fatalf("no %s from the xDS client within a minute", what)
		}
	}
}

// ack waits for the client's ACK of version.
func (x *xdsServer) ack(t *testing.T, version string) {
	t.Helper()
	x.await(t, "ACK of version "+version, func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetErrorDetail() == nil && r.GetVersionInfo() == version
	})
}

// xdsVersion is the resources as version.
func xdsVersion(t *testing.T, version string, configs ...*rlsconfv3.RateLimitConfig) *cache.Snapshot {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	s, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	require.NoError(t, err)
	return s
}

// xdsLimit is one descriptor of a pushed config: key with a rate limit.
func xdsLimit(key string, unit rlsconfv3.RateLimitUnit, rpu uint32) *rlsconfv3.RateLimitDescriptor {
	return &rlsconfv3.RateLimitDescriptor{Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}}
}

// The configurations envoyproxy/ratelimit's own xDS integration tests push
// (TestXdsProviderBasicConfig, TestXdsProviderBasicConfigReload): basic and
// another first, reload added by the second version.
func peerBasic() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "basic", Domain: "basic", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		xdsLimit("key1", rlsconfv3.RateLimitUnit_SECOND, 50),
		xdsLimit("key1_local", rlsconfv3.RateLimitUnit_SECOND, 50),
		xdsLimit("one_per_minute", rlsconfv3.RateLimitUnit_MINUTE, 1),
	}}
}

func peerAnother() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "another", Domain: "another", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		xdsLimit("key2", rlsconfv3.RateLimitUnit_MINUTE, 20),
		xdsLimit("key3", rlsconfv3.RateLimitUnit_HOUR, 10),
		xdsLimit("key2_local", rlsconfv3.RateLimitUnit_MINUTE, 20),
		xdsLimit("key3_local", rlsconfv3.RateLimitUnit_HOUR, 10),
		xdsLimit("key4", rlsconfv3.RateLimitUnit_DAY, 20),
		xdsLimit("key4_local", rlsconfv3.RateLimitUnit_DAY, 20),
	}}
}

func peerReload() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "reload", Domain: "reload", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		xdsLimit("key1", rlsconfv3.RateLimitUnit_SECOND, 50),
		xdsLimit("block", rlsconfv3.RateLimitUnit_SECOND, 0),
		xdsLimit("one_per_minute", rlsconfv3.RateLimitUnit_MINUTE, 1),
	}}
}

// TestXDSPushesTheEnvoyRules runs the service with --envoy-xds-server
// against go-control-plane's SotW server pushing the peer's integration
// configuration: version 1 is answered once ACKed; version 2 (domain reload
// added) changes the answers with no restart; version 3, bad, is NACKed with
// the field at fault and version 2's answers stay; and after the management
// server goes away and comes back with version 4, the client reconnects and
// applies it.
func TestXDSPushesTheEnvoyRules(t *testing.T) {
	x := startXDS(t, "127.0.0.1:0", xdsVersion(t, "1", peerBasic(), peerAnother()))
	a := newApp(t, load(t, "--store=memory", "--grpc-addr=127.0.0.1:0",
		"--envoy-xds-server="+x.addr, "--envoy-xds-node-id="+xdsNode), limitertest.NewClock(t0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		assert.NoError(t, <-served)
	})
	rls := rlsv3.NewRateLimitServiceClient(grpcClient(t, a))
	ask := func(domain, key string) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}},
		}}})
		require.NoError(t, err)
		require.Len(t, resp.GetStatuses(), 1)
		return resp.GetStatuses()[0]
	}
	over := rlsv3.RateLimitResponse_OVER_LIMIT

	x.ack(t, "1")
	assert.EqualValues(t, 50, ask("basic", "key1").GetCurrentLimit().GetRequestsPerUnit())
	assert.EqualValues(t, 20, ask("another", "key4").GetCurrentLimit().GetRequestsPerUnit())
	assert.NotEqual(t, over, ask("basic", "one_per_minute").GetCode())
	assert.Equal(t, over, ask("basic", "one_per_minute").GetCode(), "1 per minute, counted")
	assert.Nil(t, ask("reload", "block").GetCurrentLimit(), "no domain reload yet")

	x.set(t, xdsVersion(t, "2", peerBasic(), peerAnother(), peerReload()))
	x.ack(t, "2")
	assert.Equal(t, over, ask("reload", "block").GetCode(), "requests_per_unit 0 blocks")
	assert.EqualValues(t, 50, ask("reload", "key1").GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, over, ask("basic", "one_per_minute").GetCode(), "the counters of unchanged rules carry on")

	// Version 3 drops domain another and carries a rate limit without a
	// unit: refused whole.
	bad := peerReload()
	bad.Descriptors = append(bad.Descriptors, xdsLimit("no_unit", rlsconfv3.RateLimitUnit_UNKNOWN, 5))
	x.set(t, xdsVersion(t, "3", peerBasic(), bad))
	nack := x.await(t, "NACK of version 3", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetErrorDetail() != nil
	})
	assert.Equal(t, "2", nack.GetVersionInfo(), "the NACK names the version still running")
	assert.Contains(t, nack.GetErrorDetail().GetMessage(), `xds:"reload": descriptors[3].rate_limit.unit: "" is not one of second`)
	assert.Equal(t, over, ask("reload", "block").GetCode(), "version 2 still answers")
	assert.EqualValues(t, 20, ask("another", "key4").GetCurrentLimit().GetRequestsPerUnit(), "nothing of version 3 applied")

	// Version 5 holds more descriptors than a configuration may: refused
	// as it is read, before any of it is built.
	huge := &rlsconfv3.RateLimitConfig{Name: "huge", Domain: "huge"}
	for i := range envoyrules.MaxRules {
		huge.Descriptors = append(huge.Descriptors, xdsLimit(fmt.Sprintf("k%d", i), rlsconfv3.RateLimitUnit_MINUTE, 5))
	}
	x.set(t, xdsVersion(t, "5", peerBasic(), huge))
	nack = x.await(t, "NACK of version 5", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetErrorDetail() != nil && strings.Contains(r.GetErrorDetail().GetMessage(), "huge")
	})
	assert.Equal(t, "2", nack.GetVersionInfo())
	// basic (its domain and 4 descriptors) counts first, whatever order
	// the server sent them in: resources are read by name.
	assert.Contains(t, nack.GetErrorDetail().GetMessage(), fmt.Sprintf(`xds:"huge": descriptors[%d]: more than %d domains and descriptors`, envoyrules.MaxRules-5, envoyrules.MaxRules))
	assert.Equal(t, over, ask("reload", "block").GetCode(), "version 2 still answers")

	// The management server goes away, and comes back on the same address
	// with version 4: the peer's first configuration again.
	x.stop()
	x = startXDS(t, x.addr, xdsVersion(t, "4", peerBasic(), peerAnother()))
	hello := x.await(t, "a new stream", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	assert.Equal(t, "2", hello.GetVersionInfo(), "the new stream names the version running")
	assert.Equal(t, xdsNode, hello.GetNode().GetId())
	x.ack(t, "4")
	assert.Nil(t, ask("reload", "block").GetCurrentLimit(), "domain reload is gone")
	assert.EqualValues(t, 50, ask("basic", "key1").GetCurrentLimit().GetRequestsPerUnit())
}

// TestXDSSettingsThatContradictFailTheStart: the rules come from one
// source, and TLS files need TLS.
func TestXDSSettingsThatContradictFailTheStart(t *testing.T) {
	for args, want := range map[string]string{
		"--envoy-config=" + envoyRules:                                      "config: envoy-xds-server: exclusive with --envoy-config: the Envoy rules come either from a folder or from an xDS management server; set one",
		"--envoy-xds-tls-server-name=xds.test":                              "config: envoy-xds-tls: --envoy-xds-tls-ca, -cert, -key and -server-name need --envoy-xds-tls",
		"--envoy-xds-tls --envoy-xds-tls-cert=" + envoyRules + "/edge.yaml": "config: envoy-xds-tls-cert: --envoy-xds-tls-cert and --envoy-xds-tls-key go together",
	} {
		_, err := New(context.Background(), load(t, append([]string{"--store=memory", "--envoy-xds-server=127.0.0.1:1"}, strings.Fields(args)...)...))
		require.ErrorIs(t, err, config.ErrInvalid, args)
		assert.Equal(t, want, err.Error())
	}
	_, err := New(context.Background(), load(t, "--store=memory", "--envoy-xds-tls"))
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Equal(t, "config: envoy-xds-tls: needs --envoy-xds-server", err.Error())
}

// TestXDSOverMutualTLS subscribes to a management server that presents a
// certificate for xds.test and asks for a client certificate, both signed
// by a CA made here: with --envoy-xds-tls-ca, -cert, -key and -server-name
// the version is applied and ACKed.
func TestXDSOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	// issue writes a certificate for name (and its key) signed by the CA.
	issue := func(name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
			DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}}, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
		require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
		return certFile, keyFile
	}
	serverCert, serverKey := issue("xds.test", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := issue("tollgate", x509.ExtKeyUsageClientAuth)
	pair, err := tls.LoadX509KeyPair(serverCert, serverKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	x := startXDS(t, "127.0.0.1:0", xdsVersion(t, "1", peerBasic()), grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12,
	})))

	a := newApp(t, load(t, "--store=memory", "--envoy-xds-server="+x.addr, "--envoy-xds-node-id="+xdsNode, "--envoy-xds-tls",
		"--envoy-xds-tls-ca="+caFile, "--envoy-xds-tls-cert="+clientCert, "--envoy-xds-tls-key="+clientKey, "--envoy-xds-tls-server-name=xds.test"),
		limitertest.NewClock(t0))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.followXDS(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	x.ack(t, "1")
	assert.Equal(t, []string{"basic"}, a.current.Load().Envoy.Domains())
}

// A version's resources are read by name, in whatever order the server
// sends them (go-control-plane's follows its map): every instance builds
// the same rules and refuses a bad version naming the same resource.
func TestXDSResourcesAreReadByName(t *testing.T) {
	a := newApp(t, load(t, "--store=memory", "--envoy-xds-server=127.0.0.1:1"), limitertest.NewClock(t0))
	bad := func(name string) *anypb.Any {
		r, err := anypb.New(&rlsconfv3.RateLimitConfig{Name: name, Domain: name, Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: ""}}})
		require.NoError(t, err)
		return r
	}
	sent := a.applyXDS("1", []*anypb.Any{bad("b"), bad("a")})
	require.Error(t, sent)
	assert.Contains(t, sent.Error(), `xds:"a"`)
	assert.Equal(t, sent.Error(), a.applyXDS("1", []*anypb.Any{bad("a"), bad("b")}).Error())
}
