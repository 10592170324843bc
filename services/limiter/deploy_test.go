package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// deployDir holds the example configurations operators start from.
var deployDir = filepath.Join("..", "..", "deploy", "config")

// TestDeployConfigsStart starts the service on every example configuration
// under deploy/config/ as it is shipped, with only what cannot be shipped
// given by LIMITER_* variables (which beat the file): listen addresses on
// free loopback ports, the SQLite file in a temporary folder, a Redis the
// test starts of the kind the file's redis_url names (one server, Cluster or
// Sentinel), the example Envoy rules of deploy/config/ratelimit, and
// certificates generated here when the file turns TLS on. Each must become
// ready (/readyz 200 on every HTTP listener, gRPC health SERVING) and stop
// cleanly.
func TestDeployConfigsStart(t *testing.T) {
	skipShort(t)
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			env, tlsOn := deployEnv(t, file)
			var logs listeningLog
			logs.listening = make(chan listeningAddrs, 1)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"--config", file}, func(k string) string { return env[k] }, io.Discard, &logs)
			}()
			var addrs listeningAddrs
			select {
			case addrs = <-logs.listening:
			case err := <-done:
				cancel()
				t.Fatalf("the service stopped before listening: %v\n%s", err, logs.String())
			case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
				cancel()
				t.Fatalf("the service did not start listening\n%s", logs.String())
			}
			hc := client
			scheme := "http://"
			if tlsOn != nil {
				hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsOn}}
				scheme = "https://"
			}
			for _, addr := range []string{addrs.Addr, addrs.InternalAddr} {
				if addr != "" {
					assert.Equal(t, http.StatusOK, readyWithin(t, hc, scheme+addr+"/readyz"), "%s/readyz\n%s", addr, logs.String())
				}
			}
			if addrs.GRPCAddr != "" {
				creds := insecure.NewCredentials()
				if tlsOn != nil {
					creds = credentials.NewTLS(tlsOn)
				}
				conn, err := grpc.NewClient(addrs.GRPCAddr, grpc.WithTransportCredentials(creds))
				require.NoError(t, err)
				resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
				require.NoError(t, err)
				assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
				require.NoError(t, conn.Close())
			}
			hc.CloseIdleConnections()
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err, logs.String())
			case <-time.After(30 * time.Second): // a hang guard
				t.Fatalf("the service did not stop\n%s", logs.String())
			}
		})
	}
}

// deployEnv returns the LIMITER_* variables that let the example file run
// here, and the client's TLS configuration when the file turns TLS on (nil
// otherwise). A file that names another file the test does not know how
// to provide fails the test, naming the key.
func deployEnv(t *testing.T, file string) (map[string]string, *tls.Config) {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var keys map[string]any
	require.NoError(t, yaml.Unmarshal(data, &keys))
	tmp := t.TempDir()
	env := map[string]string{
		"LIMITER_ADDR":        "127.0.0.1:0",
		"LIMITER_SQLITE_PATH": filepath.Join(tmp, "limiter.db"),
		"LIMITER_LOG_FORMAT":  "json",
	}
	var tlsOn *tls.Config
	for key, value := range keys {
		switch {
		case key == "internal_addr":
			env["LIMITER_INTERNAL_ADDR"] = "localhost:0" // must differ from the addr as written
		case key == "grpc_addr":
			env["LIMITER_GRPC_ADDR"] = "127.0.0.1:0"
		case key == "envoy_config":
			env["LIMITER_ENVOY_CONFIG"] = filepath.Join(deployDir, "ratelimit")
		case key == "redis_url" && keys["store"] == "redis":
			env["LIMITER_REDIS_URL"] = startRedisLike(t, value.(string))
		case key == "tls" || strings.HasSuffix(key, "_tls"):
			// tls: {cert, key, client_ca}, and its per-listener overrides.
			prefix := "LIMITER_" + strings.ToUpper(key) + "_"
			var cert, keyFile string
			cert, keyFile, tlsOn = selfSigned(t, tmp)
			env[prefix+"CERT"], env[prefix+"KEY"], env[prefix+"CLIENT_CA"] = cert, keyFile, cert
		case strings.HasSuffix(key, "_file"):
			t.Fatalf("%s sets %s: TestDeployConfigsStart does not know how to provide that file yet", file, key)
		}
	}
	return env, tlsOn
}

// startRedisLike starts a private Redis of the kind url names and returns
// its URL.
func startRedisLike(t *testing.T, url string) string {
	t.Helper()
	switch {
	case strings.Contains(url, "+cluster://"):
		return redistest.StartCluster(t).URL()
	case strings.Contains(url, "+sentinel://"):
		return redistest.StartSentinel(t).URL()
	}
	return redistest.Start(t).URL()
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and localhost,
// usable as the server's and as the client's (and so as the client CA), and
// returns its files and a client configuration that trusts it and presents
// it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "tollgate-deploy-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IsCA:         true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	return certFile, keyFile, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

// readyWithin polls url until it answers 200, at most 30 s (a hang guard:
// a Redis-backed instance is ready once its first PING succeeds), and
// returns the last status.
func readyWithin(t *testing.T, hc *http.Client, url string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(url)
		require.NoError(t, err)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK || time.Now().After(deadline) {
			return resp.StatusCode
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listeningAddrs are the addresses of the service's "listening" log line.
type listeningAddrs struct {
	Addr         string
	InternalAddr string `json:"internal_addr"`
	GRPCAddr     string `json:"grpc_addr"`
}

// listeningLog collects the service's JSON log lines and sends the
// addresses of the first "listening" line on listening.
type listeningLog struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	listening chan listeningAddrs
	sent      bool
}

func (l *listeningLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for line := range bytes.SplitSeq(p, []byte("\n")) {
		var m struct {
			Msg string
			listeningAddrs
		}
		if !l.sent && json.Unmarshal(line, &m) == nil && m.Msg == "listening" {
			l.listening <- m.listeningAddrs
			l.sent = true
		}
	}
	return len(p), nil
}

func (l *listeningLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
