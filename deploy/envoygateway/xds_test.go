package envoygateway_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// egNode is the node id under which Envoy Gateway's rate-limit runner sets
// its snapshots (ratelimit.InfraName): a rate-limit service that asks under
// another id gets no rules.
const egNode = "envoy-ratelimit"

// egCerts are the certificates Envoy Gateway's certgen makes (d32f282,
// internal/crypto/certgen.go): one RSA CA named envoy-gateway signing, with
// no extended key usage, the control plane's certificate (the envoy-gateway
// Service's names), and the same kind of certificate, named "*" for
// *.NAMESPACE, for Envoy and for the rate-limit service (the
// envoy-rate-limit Secret, mounted at /certs: the gRPC server's and the xDS
// client's certificate at once). Keys are PKCS#1 PEM, as certgen writes
// them.
type egCerts struct {
	ca                          []byte
	gateway, envoy, ratelimit   tls.Certificate
	ratelimitCert, ratelimitKey []byte
	pool                        *x509.CertPool
	// For backend.redis.tls: Redis' own certificate and the client
	// certificate of the Secret certificateRef names (the operator's, here
	// signed by the same CA).
	redisCert, redisKey, redisClientCert, redisClientKey []byte
}

func newEGCerts(t *testing.T) *egCerts {
	t.Helper()
	now := time.Now()
	caKey := rsaKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "envoy-gateway"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	c := &egCerts{ca: pemBlock("CERTIFICATE", caDER), pool: x509.NewCertPool()}
	c.pool.AddCert(caCert)
	leaf := func(serial int64, cn string, dns []string, ips []net.IP) (certPEM, keyPEM []byte, pair tls.Certificate) {
		key := rsaKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageDataEncipherment |
				x509.KeyUsageKeyEncipherment | x509.KeyUsageContentCommitment,
			DNSNames: dns, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		certPEM, keyPEM = pemBlock("CERTIFICATE", der), pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
		pair, err = tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		return certPEM, keyPEM, pair
	}
	// The control plane's names, and 127.0.0.1: the test reaches
	// envoy-gateway:18001 on loopback, as the cluster's DNS would resolve it,
	// and Tollgate's xDS client checks the name it dials, as the peer's does.
	_, _, c.gateway = leaf(2, "envoy-gateway", []string{
		"envoy-gateway", "envoy-gateway.envoy-gateway-system",
		"envoy-gateway.envoy-gateway-system.svc", "envoy-gateway.envoy-gateway-system.svc.cluster.local",
	}, []net.IP{net.IPv4(127, 0, 0, 1)})
	_, _, c.envoy = leaf(3, "*", []string{"*.envoy-gateway-system"}, nil)
	c.ratelimitCert, c.ratelimitKey, c.ratelimit = leaf(4, "*", []string{"*.envoy-gateway-system"}, nil)
	c.redisCert, c.redisKey, _ = leaf(5, "redis", []string{"redis.redis.svc"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	c.redisClientCert, c.redisClientKey, _ = leaf(6, "envoy-ratelimit", nil, nil)
	return c
}

// redisClientSecret is the kubernetes.io/tls Secret of the Redis client
// certificate, as the rate-limit pod mounts it at /redis-certs.
func (c *egCerts) redisClientSecret() map[string]string {
	return map[string]string{"tls.crt": string(c.redisClientCert), "tls.key": string(c.redisClientKey)}
}

// redisServer is a Redis' TLS: its certificate, the CA its clients'
// must chain to, the password.
func (c *egCerts) redisServer(t *testing.T, password string) redistest.TLS {
	t.Helper()
	return redistest.TLS{Cert: writeFile(t, "redis.crt", c.redisCert), Key: writeFile(t, "redis.key", c.redisKey), ClientCA: c.caFile(t), Password: password}
}

// caFile is the CA's certificate in a file.
func (c *egCerts) caFile(t *testing.T) string {
	t.Helper()
	return writeFile(t, "ca.crt", c.ca)
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// secret is the envoy-rate-limit Secret's data, as the rate-limit pod
// mounts it at /certs.
func (c *egCerts) secret() map[string]string {
	return map[string]string{"tls.crt": string(c.ratelimitCert), "tls.key": string(c.ratelimitKey), "ca.crt": string(c.ca)}
}

// envoyTLS is how Envoy Gateway's Envoy connects to the rate-limit service
// (d32f282, internal/xds/translator/globalresources.go,
// buildEnvoyClientTLSSocket): TLS 1.3 at most, the service's certificate
// checked against /certs/ca.crt, Envoy's own certificate shown. Envoy checks
// no name; the test asks for one that the certificate carries, which is
// stricter.
func (c *egCerts) envoyTLS() *tls.Config {
	return &tls.Config{
		RootCAs: c.pool, Certificates: []tls.Certificate{c.envoy},
		ServerName: "envoy-ratelimit.envoy-gateway-system", MaxVersion: tls.VersionTLS13,
	}
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return key
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// egXDS is Envoy Gateway's rate-limit xDS server (d32f282,
// internal/globalratelimit/runner/runner.go): go-control-plane's SotW
// server on a snapshot cache without ADS ordering, the
// AggregatedDiscoveryService alone, mTLS as crypto.LoadTLSConfig sets it
// (TLS 1.3, a client certificate required and checked against the CA,
// h2), each version one snapshot of RateLimitConfig resources for egNode.
// It reports every request it receives, with the node id of its stream.
type egXDS struct {
	addr  string
	cache cachev3.SnapshotCache
	reqs  chan xdsRequest
}

type xdsRequest struct {
	node string
	req  *discoveryv3.DiscoveryRequest
}

func startEGXDS(t *testing.T, certs *egCerts) *egXDS {
	t.Helper()
	x := &egXDS{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), reqs: make(chan xdsRequest, 100)}
	var (
		mu    sync.Mutex
		nodes = map[int64]string{}
	)
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, x.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(stream int64, r *discoveryv3.DiscoveryRequest) error {
			mu.Lock()
			if id := r.GetNode().GetId(); id != "" {
				nodes[stream] = id
			}
			node := nodes[stream]
			mu.Unlock()
			select {
			case x.reqs <- xdsRequest{node: node, req: r}:
			default: // nobody waits for it
			}
			return nil
		},
	})
	tc := &tls.Config{
		Certificates: []tls.Certificate{certs.gateway}, NextProtos: []string{"h2"},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: certs.pool, MinVersion: tls.VersionTLS13,
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	x.addr = ln.Addr().String()
	served := make(chan struct{})
	go func() { _ = gs.Serve(ln); close(served) }()
	t.Cleanup(func() {
		cancel()
		gs.Stop()
		<-served
	})
	return x
}

// push sets version as the snapshot of egNode, as the runner's
// addNewSnapshot does.
func (x *egXDS) push(t *testing.T, version string, configs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	s, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	require.NoError(t, err)
	require.NoError(t, x.cache.SetSnapshot(context.Background(), egNode, s))
}

// acked waits until a client on egNode's stream ACKs version of the
// RateLimitConfig type: the rules are applied by then.
func (x *egXDS) acked(t *testing.T, version string, exited <-chan struct{}, output func() string) {
	t.Helper()
	deadline := time.After(time.Minute) // a hang guard, not a timing assertion
	var seen []string
	for {
		select {
		case r := <-x.reqs:
			seen = append(seen, r.node+"@"+r.req.GetVersionInfo())
			if r.node == egNode && r.req.GetTypeUrl() == resourcev3.RateLimitConfigType &&
				r.req.GetResponseNonce() != "" && r.req.GetErrorDetail() == nil && r.req.GetVersionInfo() == version {
				return
			}
			if d := r.req.GetErrorDetail(); d != nil {
				t.Fatalf("version %s NACKed: %s", r.req.GetVersionInfo(), d.GetMessage())
			}
		case <-exited:
			t.Fatalf("the rate-limit service exited before it ACKed version %s:\n%s", version, output())
		case <-deadline:
			t.Fatalf("no ACK of version %s from node %s within a minute (requests seen, node@version: %v):\n%s", version, egNode, seen, output())
		}
	}
}
