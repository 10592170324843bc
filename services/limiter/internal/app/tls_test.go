package app

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

// listeners are the addresses of an app's public, internal and gRPC
// listeners, and its log.
type listeners struct {
	public, internal, grpc string
	logs                   *tlstest.Log
	app                    *App
}

// serveListeners builds an app for args (with the Envoy fixture rules and
// the memory store) and serves its three listeners on loopback ports until
// the test ends, when each must stop cleanly.
func serveListeners(t *testing.T, args ...string) listeners {
	t.Helper()
	// The internal and gRPC addresses only turn the listeners on: the test
	// hands the app listeners of its own.
	cfg := load(t, append([]string{"--store=memory", "--internal-addr=127.0.0.1:1", "--grpc-addr=127.0.0.1:2", "--envoy-config", envoyRules}, args...)...)
	log, logs := tlstest.NewLog()
	a, err := New(context.Background(), cfg, WithLogger(log))
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	l := listeners{logs: logs, app: a}
	for _, s := range []struct {
		addr  *string
		serve func(context.Context, net.Listener) error
	}{{&l.public, a.Serve}, {&l.internal, a.ServeInternal}, {&l.grpc, a.ServeGRPC}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		*s.addr = ln.Addr().String()
		wg.Go(func() { assert.NoError(t, s.serve(ctx, ln), "a clean stop") })
	}
	t.Cleanup(func() {
		stop()
		wg.Wait()
		assert.NoError(t, a.Close())
	})
	return l
}

// clientTLS trusts ca and, when client is not nil, shows it whatever CAs
// the server names.
func clientTLS(ca *tlstest.CA, client *tls.Certificate) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if client != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return client, nil }
	}
	return cfg
}

// httpsGet sends GET url on a new connection and returns the status and
// the name on the server's certificate.
func httpsGet(t *testing.T, url string, ca *tlstest.CA, client *tls.Certificate) (int, string, error) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, // a hang guard
		Transport: &http.Transport{TLSClientConfig: clientTLS(ca, client), DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.TLS.PeerCertificates[0].Subject.CommonName, nil
}

// grpcConn returns a gRPC connection over TLS to addr.
func grpcConn(t *testing.T, addr string, ca *tlstest.CA, client *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(ca, client))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// shouldRateLimit asks conn for one decision and returns the overall code
// and the name on the server's certificate.
func shouldRateLimit(conn *grpc.ClientConn) (rlsv3.RateLimitResponse_Code, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	var p peer.Peer
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("tls"), grpc.Peer(&p))
	if err != nil {
		return 0, "", err
	}
	info := p.AuthInfo.(credentials.TLSInfo)
	return resp.GetOverallCode(), info.State.PeerCertificates[0].Subject.CommonName, nil
}

func TestHTTPSAndGRPCOverTLSOnEveryListener(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	files := tlstest.Files(t, ca.Server(t, "server"), nil)
	l := serveListeners(t, "--tls-cert", files.Cert, "--tls-key", files.Key)

	for _, url := range []string{"https://" + l.public + "/healthz", "https://" + l.public + "/ping", "https://" + l.internal + "/metrics"} {
		status, name, err := httpsGet(t, url, ca, nil)
		require.NoError(t, err, url)
		assert.Equal(t, http.StatusOK, status, url)
		assert.Equal(t, "server", name, url)
	}
	plain := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	resp, err := plain.Get("http://" + l.public + "/healthz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to the TLS listener")

	conn := grpcConn(t, l.grpc, ca, nil)
	health, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, health.GetStatus())
	code, name, err := shouldRateLimit(conn)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, "server", name)

	insecureConn, err := grpc.NewClient(l.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer insecureConn.Close()
	_, _, err = shouldRateLimit(insecureConn)
	assert.Error(t, err, "plain gRPC to the TLS listener")

	samples := scrape(t, l.app.InternalHandler())
	assert.Equal(t, 1.0, samples[`tollgate_tls_handshake_errors_total{listener="addr"}`], "plain HTTP")
	assert.Equal(t, 0.0, samples[`tollgate_tls_handshake_errors_total{listener="internal_addr"}`])
}

func TestNoHandshakeSeriesWithoutTLS(t *testing.T) {
	a := newApp(t, load(t, "--store=memory", "--internal-addr=127.0.0.1:1"), limiter.SystemClock{})
	for series := range scrape(t, a.InternalHandler()) {
		assert.NotContains(t, series, "tollgate_tls_handshake_errors_total")
	}
}

func TestMutualTLSOnEveryListener(t *testing.T) {
	ca, clients := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "clients")
	files := tlstest.Files(t, ca.Server(t, "server"), clients)
	l := serveListeners(t, "--tls-cert", files.Cert, "--tls-key", files.Key, "--tls-client-ca", files.ClientCA)
	signed, unsigned := clients.Client(t, "envoy").TLS, tlstest.NewCA(t, "stranger").Client(t, "mallory").TLS

	for _, url := range []string{"https://" + l.public + "/healthz", "https://" + l.internal + "/metrics"} {
		_, _, err := httpsGet(t, url, ca, nil)
		require.Error(t, err, url+" without a client certificate")
		assert.Contains(t, err.Error(), "certificate required", url)
		_, _, err = httpsGet(t, url, ca, &unsigned)
		require.Error(t, err, url+" with a certificate another CA signed")
		assert.Contains(t, err.Error(), "unknown certificate authority", url)
		status, _, err := httpsGet(t, url, ca, &signed)
		require.NoError(t, err, url)
		assert.Equal(t, http.StatusOK, status, url)
	}
	_, _, err := shouldRateLimit(grpcConn(t, l.grpc, ca, nil))
	assert.Error(t, err, "gRPC without a client certificate")
	code, _, err := shouldRateLimit(grpcConn(t, l.grpc, ca, &signed))
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, code)

	// Refused handshakes are counted, and logged at DEBUG only: any client
	// can fail as many as it likes.
	samples := scrape(t, l.app.InternalHandler())
	assert.Equal(t, 2.0, samples[`tollgate_tls_handshake_errors_total{listener="addr"}`])
	assert.Equal(t, 2.0, samples[`tollgate_tls_handshake_errors_total{listener="internal_addr"}`])
	assert.GreaterOrEqual(t, samples[`tollgate_tls_handshake_errors_total{listener="grpc_addr"}`], 1.0, "the gRPC client retries")
	assert.Equal(t, 4, l.logs.Count(`"level":"DEBUG"`, "http: TLS handshake error"), l.logs.String())
	assert.Zero(t, l.logs.Count(`"level":"WARN"`), l.logs.String())
}

func TestGRPCOverridesItsCertificateAndAloneAsksForClients(t *testing.T) {
	ca, clients := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "clients")
	all, own := tlstest.Files(t, ca.Server(t, "all"), nil), tlstest.Files(t, ca.Server(t, "grpc"), clients)
	l := serveListeners(t, "--tls-cert", all.Cert, "--tls-key", all.Key,
		"--grpc-tls-cert", own.Cert, "--grpc-tls-key", own.Key, "--grpc-tls-client-ca", own.ClientCA)

	for _, url := range []string{"https://" + l.public + "/healthz", "https://" + l.internal + "/metrics"} {
		status, name, err := httpsGet(t, url, ca, nil)
		require.NoError(t, err, url)
		assert.Equal(t, http.StatusOK, status, url)
		assert.Equal(t, "all", name, url)
	}
	_, _, err := shouldRateLimit(grpcConn(t, l.grpc, ca, nil))
	assert.Error(t, err, "gRPC without a client certificate")
	signed := clients.Client(t, "envoy").TLS
	code, name, err := shouldRateLimit(grpcConn(t, l.grpc, ca, &signed))
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, "grpc", name)
}

// keepAlive is one HTTP/1.1 connection kept open across requests.
type keepAlive struct {
	conn *tls.Conn
	r    *bufio.Reader
}

func openKeepAlive(t *testing.T, addr string, ca *tlstest.CA) *keepAlive {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, clientTLS(ca, nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &keepAlive{conn: conn, r: bufio.NewReader(conn)}
}

// get sends GET path on the connection and returns the status.
func (k *keepAlive) get(t *testing.T, path string) int {
	t.Helper()
	require.NoError(t, k.conn.SetDeadline(time.Now().Add(30*time.Second))) // a hang guard
	_, err := fmt.Fprintf(k.conn, "GET %s HTTP/1.1\r\nHost: tollgate\r\n\r\n", path)
	require.NoError(t, err)
	resp, err := http.ReadResponse(k.r, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestReplacedCertificatesWhileServing replaces the certificate and key
// on disk while connections are open: the next connection to each
// listener gets the new pair, the open ones keep working on the old one;
// then a broken certificate leaves the last good pair served, with one
// WARN.
func TestReplacedCertificatesWhileServing(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	files := tlstest.Files(t, ca.Server(t, "one"), nil)
	l := serveListeners(t, "--tls-cert", files.Cert, "--tls-key", files.Key)
	httpOpen := openKeepAlive(t, l.public, ca)
	require.Equal(t, http.StatusOK, httpOpen.get(t, "/healthz"))
	grpcOpen := grpcConn(t, l.grpc, ca, nil)
	_, name, err := shouldRateLimit(grpcOpen)
	require.NoError(t, err)
	require.Equal(t, "one", name)

	two := ca.Server(t, "two")
	replace(t, files, two)
	for _, url := range []string{"https://" + l.public + "/healthz", "https://" + l.internal + "/metrics"} {
		_, name, err := httpsGet(t, url, ca, nil)
		require.NoError(t, err)
		assert.Equal(t, "two", name, url+": the next connection gets the new pair")
	}
	_, name, err = shouldRateLimit(grpcConn(t, l.grpc, ca, nil))
	require.NoError(t, err)
	assert.Equal(t, "two", name, "the next gRPC connection gets the new pair")
	assert.Equal(t, http.StatusOK, httpOpen.get(t, "/healthz"), "the open HTTPS connection still works")
	assert.Equal(t, "one", httpOpen.conn.ConnectionState().PeerCertificates[0].Subject.CommonName)
	_, name, err = shouldRateLimit(grpcOpen)
	require.NoError(t, err, "the open gRPC connection still works")
	assert.Equal(t, "one", name)
	assert.Equal(t, 1, l.logs.Count(`"level":"INFO"`, `"msg":"TLS files reloaded"`), "one reload for the three listeners: "+l.logs.String())

	tlstest.Replace(t, files.Cert, []byte("-----BEGIN CERTIFICATE-----\ncut short"))
	for range 2 {
		_, name, err = httpsGet(t, "https://"+l.public+"/healthz", ca, nil)
		require.NoError(t, err)
		assert.Equal(t, "two", name, "the last good pair")
	}
	_, name, err = shouldRateLimit(grpcConn(t, l.grpc, ca, nil))
	require.NoError(t, err)
	assert.Equal(t, "two", name, "the last good pair")
	assert.Equal(t, 1, l.logs.Count(`"level":"WARN"`, "TLS files changed but cannot be used", `holds no PEM certificate`), l.logs.String())
	samples := scrape(t, l.app.InternalHandler())
	for _, listener := range []string{listenerPublic, listenerInternal, listenerGRPC} {
		// The three listeners share their files, so each counts the change.
		assert.Equal(t, 1.0, samples[`tollgate_tls_reload_errors_total{listener="`+listener+`"}`], listener)
		assert.Equal(t, float64(two.TLS.Leaf.NotAfter.Unix()), samples[`tollgate_tls_certificate_not_after_seconds{listener="`+listener+`"}`], listener+": the last good pair's")
	}
}

// replace puts pair's certificate and key in place of files'.
func replace(t *testing.T, files tlsfiles.Files, pair tlstest.Pair) {
	t.Helper()
	tlstest.Replace(t, files.Cert, pair.CertPEM)
	tlstest.Replace(t, files.Key, pair.KeyPEM)
}

// TestRunServesTLSAndSaysSo runs the whole service with --tls-cert: the
// listening line says which listeners serve TLS, and HTTPS answers.
func TestRunServesTLSAndSaysSo(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	files := tlstest.Files(t, ca.Server(t, "server"), ca)
	l, _, stop := runLogged(t, load(t, "--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0", "--store=memory", "--log-format=json",
		"--envoy-config", envoyRules, "--tls-cert", files.Cert, "--tls-key", files.Key, "--grpc-tls-client-ca", files.ClientCA))
	assert.Equal(t, map[string]any{"addr": "tls", "grpc_addr": "mtls"}, l.Config["tls"])
	status, _, err := httpsGet(t, "https://"+l.Addr+"/healthz", ca, nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	client := ca.Client(t, "envoy").TLS
	conn := grpcConn(t, l.GRPCAddr, ca, &client)
	health, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, health.GetStatus())
	require.NoError(t, stop())
}

// TestReloadChecksTheTLSFilesAndNamesNewPaths: a SIGHUP reload checks the
// TLS files as a start does, so one made while a file is broken is refused
// naming it; new paths apply only after a restart, which the reload says.
func TestReloadChecksTheTLSFilesAndNamesNewPaths(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	files, moved := tlstest.Files(t, ca.Server(t, "one"), nil), tlstest.Files(t, ca.Server(t, "two"), nil)
	args := []string{"--store=memory", "--tls-cert", files.Cert, "--tls-key", files.Key}
	log, logs := tlstest.NewLog()
	a, err := New(context.Background(), load(t, args...), WithLogger(log), WithReload(func() (config.Config, error) {
		return config.Load(args, func(string) string { return "" })
	}, nil))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, a.Close()) })

	tlstest.Replace(t, files.Cert, []byte("not a certificate"))
	err = a.Reload(context.Background())
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Equal(t, `config: --tls-cert: "`+files.Cert+`" holds no PEM certificate (-----BEGIN CERTIFICATE-----)`, err.Error())

	args = []string{"--store=memory", "--tls-cert", moved.Cert, "--tls-key", moved.Key}
	require.NoError(t, a.Reload(context.Background()))
	assert.Equal(t, 1, logs.Count(`"level":"WARN"`, "apply only after a restart", `"settings":["TLS"]`), logs.String())
}
