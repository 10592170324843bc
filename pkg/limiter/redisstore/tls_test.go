package redisstore

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestTLSConfigShowsTheClientCertificate: a Redis that asks every client
// for a certificate (tls-auth-clients yes) answers a store opened with
// WithTLSConfig (the test's CA, a client certificate it signed) and refuses
// one opened without; a plain redis:// URL refuses a TLS configuration.
func TestTLSConfigShowsTheClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}
	serverCert, serverKey := ca.sign(t, x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.sign(t, x509.ExtKeyUsageClientAuth)
	srv := redistest.StartTLS(t, redistest.TLS{
		Cert: write("server.crt", serverCert), Key: write("server.key", serverKey),
		ClientCA: write("ca.crt", ca.pem), Password: "pw",
	})
	if srv == nil {
		return // skipped: no redis-server
	}
	pair, err := tls.X509KeyPair(clientCert, clientKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca.pem))
	url := "rediss://:pw@" + srv.TLSAddr() + "/0"
	p := policy("tls", limiter.FixedWindow, 5, time.Minute)

	s, err := Open(url, WithTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}), WithTimeout(testTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	d := allow(t, s, p, limiter.Key{Subject: "a"}, 1, base)
	assert.True(t, d.Allowed)
	assert.EqualValues(t, 4, d.Remaining)

	anonymous, err := Open(url, WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), WithTimeout(testTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = anonymous.Close() })
	_, err = anonymous.Allow(context.Background(), p, limiter.Request{Key: limiter.Key{Subject: "a"}, Cost: 1, Now: base})
	assert.Error(t, err, "Redis asks for a client certificate")

	_, err = Open("redis://"+srv.Addr()+"/0", WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

// testCA is a certificate authority for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redis test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// sign returns a certificate for 127.0.0.1 for usage, and its key, in PEM.
func (ca *testCA) sign(t *testing.T, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "redis test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}
