package tlsfiles_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

// echo serves r's configuration on a loopback port: each connection's
// lines are written back. It returns the address.
func echo(t *testing.T, r *tlsfiles.Reloader) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tln := tls.NewListener(ln, r.Config())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = tln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	return ln.Addr().String()
}

// dial opens a TLS connection trusting ca, with the client certificate
// when not nil, and returns it after a line went there and back (which
// under TLS 1.3 is when a refused client certificate shows).
func dial(t *testing.T, addr string, ca *tlstest.CA, client *tls.Certificate) (*tls.Conn, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if client != nil { // sent whatever CAs the server names
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return client, nil }
	}
	d := tls.Dialer{Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := c.(*tls.Conn)
	if err := roundTrip(conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, nil
}

// roundTrip sends a line on c and reads it back.
func roundTrip(c *tls.Conn) error {
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil { // a hang guard
		return err
	}
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "hello\n" {
		return errors.New("echoed " + line)
	}
	return nil
}

// servedName is the common name of the certificate conn's server showed.
func servedName(conn *tls.Conn) string {
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func mustDial(t *testing.T, addr string, ca *tlstest.CA, client *tls.Certificate) *tls.Conn {
	t.Helper()
	conn, err := dial(t, addr, ca, client)
	require.NoError(t, err)
	return conn
}

func TestNewConnectionsGetTheReplacedCertificateOpenOnesKeepWorking(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	files := tlstest.Files(t, ca.Server(t, "one"), nil)
	log, logs := tlstest.NewLog()
	r, err := tlsfiles.New(files, log)
	require.NoError(t, err)
	addr := echo(t, r)

	open := mustDial(t, addr, ca, nil)
	assert.Equal(t, "one", servedName(open))

	two := ca.Server(t, "two")
	tlstest.Replace(t, files.Cert, two.CertPEM)
	tlstest.Replace(t, files.Key, two.KeyPEM)
	assert.Equal(t, "two", servedName(mustDial(t, addr, ca, nil)), "the next connection")
	require.NoError(t, roundTrip(open), "the open connection still works")
	assert.Equal(t, "one", servedName(open))
	assert.Equal(t, 1, logs.Count(`"level":"INFO"`, `"msg":"TLS files reloaded"`), logs.String())

	// Written in place rather than renamed: the size or the modification
	// time tells. (The test sets the time: two writes within one tick of
	// the kernel's coarse clock can share one; a rotation never does.)
	three := ca.Server(t, "three")
	require.NoError(t, os.WriteFile(files.Cert, three.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(files.Key, three.KeyPEM, 0o600))
	later := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(files.Cert, later, later))
	assert.Equal(t, "three", servedName(mustDial(t, addr, ca, nil)))
}

func TestBrokenNewFilesKeepTheLastGoodPairAndWarnOnce(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	good := ca.Server(t, "good")
	files := tlstest.Files(t, good, nil)
	log, logs := tlstest.NewLog()
	r, err := tlsfiles.New(files, log)
	require.NoError(t, err)
	addr := echo(t, r)
	other := ca.Server(t, "other")

	steps := []struct {
		name   string
		change func()
		reason string
	}{
		{"certificate cut short", func() { tlstest.Replace(t, files.Cert, other.CertPEM[:40]) }, `holds no PEM certificate`},
		{"key of another certificate", func() {
			tlstest.Replace(t, files.Cert, other.CertPEM)
			tlstest.Replace(t, files.Key, ca.Server(t, "third").KeyPEM)
		}, `private key does not match public key`},
		{"key removed", func() { require.NoError(t, os.Remove(files.Key)) }, `cannot be read: no such file or directory`},
	}
	for i, step := range steps {
		step.change()
		for range 3 { // one WARN per change, not per handshake
			assert.Equal(t, "good", servedName(mustDial(t, addr, ca, nil)), step.name)
		}
		assert.Equal(t, i+1, logs.Count(`"level":"WARN"`, "previous certificate stays in use"), step.name)
		assert.Equal(t, uint64(i+1), r.Failures(), step.name+": counted once per change")
		assert.Equal(t, good.TLS.Leaf.NotAfter, r.NotAfter(), step.name+": the good pair's expiry")
		assert.Equal(t, 1, logs.Count(`"level":"WARN"`, step.reason), step.name+": "+logs.String())
	}
	tlstest.Replace(t, files.Key, other.KeyPEM)
	assert.Equal(t, "other", servedName(mustDial(t, addr, ca, nil)), "mended: the new pair is served")
	assert.Equal(t, other.TLS.Leaf.NotAfter, r.NotAfter(), "the new pair's expiry")
	assert.Equal(t, uint64(len(steps)), r.Failures(), "a good change is no failure")
}

func TestMutualTLS(t *testing.T) {
	ca, clients, stranger := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "clients"), tlstest.NewCA(t, "stranger")
	files := tlstest.Files(t, ca.Server(t, "server"), clients)
	r, err := tlsfiles.New(files, nil)
	require.NoError(t, err)
	addr := echo(t, r)

	signed := clients.Client(t, "alice").TLS
	mustDial(t, addr, ca, &signed)
	_, err = dial(t, addr, ca, nil)
	require.Error(t, err, "no client certificate")
	assert.Contains(t, err.Error(), "certificate required")
	unknown := stranger.Client(t, "mallory").TLS
	_, err = dial(t, addr, ca, &unknown)
	require.Error(t, err, "a certificate another CA signed")
	assert.Contains(t, err.Error(), "unknown certificate authority")

	// The client CA rotates like the certificate.
	tlstest.Replace(t, files.ClientCA, stranger.PEM)
	mustDial(t, addr, ca, &unknown)
	_, err = dial(t, addr, ca, &signed)
	assert.Error(t, err, "the old CA's clients are refused once it is replaced")
}

func TestTLS11IsRefused(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	r, err := tlsfiles.New(tlstest.Files(t, ca.Server(t, "server"), nil), nil)
	require.NoError(t, err)
	addr := echo(t, r)
	_, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "protocol version")
	conn := mustDial(t, addr, ca, nil)
	assert.GreaterOrEqual(t, conn.ConnectionState().Version, uint16(tls.VersionTLS12))
}

// TestCipherFloor: a TLS 1.2 client that offers only CBC suites (SHA-1
// or SHA-256 MACs), RC4 or 3DES is refused in the handshake; one offering
// an AEAD suite with ECDHE is served.
func TestCipherFloor(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	r, err := tlsfiles.New(tlstest.Files(t, ca.Server(t, "server"), nil), nil)
	require.NoError(t, err)
	addr := echo(t, r)
	weak := tls.InsecureCipherSuites()
	for _, suite := range tls.CipherSuites() {
		if strings.Contains(suite.Name, "_CBC_") && slices.Contains(suite.SupportedVersions, tls.VersionTLS12) {
			weak = append(weak, suite)
		}
	}
	for _, suite := range weak {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite.ID}})
		if !assert.Error(t, err, "%s is refused", suite.Name) {
			_ = conn.Close()
		}
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}})
		if assert.NoError(t, err, tls.CipherSuiteName(suite)) {
			assert.Equal(t, suite, conn.ConnectionState().CipherSuite)
			_ = conn.Close()
		}
	}
}

// TestRotationUnderConcurrentHandshakes: 8 clients connect 5 times each
// while the certificate alternates between two pairs; every one of the 40
// handshakes succeeds and shows one of the two; once the rotations stop,
// the next handshake shows the pair last written.
func TestRotationUnderConcurrentHandshakes(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	pairs := []tlstest.Pair{ca.Server(t, "a"), ca.Server(t, "b")}
	files := tlstest.Files(t, pairs[0], nil)
	r, err := tlsfiles.New(files, nil)
	require.NoError(t, err)
	addr := echo(t, r)

	const clients, each = 8, 5
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		served = map[string]int{}
		errs   []error
	)
	// Each handshake done asks for a rotation; the rotator swaps cert and
	// key (two renames: a handshake in between may see a mismatched pair,
	// which must keep the last good one) as often as it gets to run.
	rotate := make(chan struct{}, 1)
	var rotator sync.WaitGroup
	last := "a"
	rotator.Go(func() {
		for i := 1; ; i++ {
			if _, ok := <-rotate; !ok {
				return
			}
			p := pairs[i%2]
			last = p.TLS.Leaf.Subject.CommonName
			tlstest.Replace(t, files.Cert, p.CertPEM)
			tlstest.Replace(t, files.Key, p.KeyPEM)
		}
	})
	for range clients {
		wg.Go(func() {
			for range each {
				conn, err := dial(t, addr, ca, nil)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					served[servedName(conn)]++
					_ = conn.Close()
				}
				mu.Unlock()
				select {
				case rotate <- struct{}{}:
				default:
				}
			}
		})
	}
	wg.Wait()
	close(rotate)
	rotator.Wait()
	require.Empty(t, errs)
	assert.Equal(t, clients*each, served["a"]+served["b"])
	assert.Equal(t, last, servedName(mustDial(t, addr, ca, nil)), "the files as last written")
}

func TestLoadNamesTheFileAndWhy(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	good := tlstest.Files(t, ca.Server(t, "server"), ca)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello\n"), 0o600))
	missing := filepath.Join(dir, "missing.pem")
	other := tlstest.Files(t, ca.Server(t, "other"), nil)

	tests := []struct {
		name   string
		files  tlsfiles.Files
		part   tlsfiles.Part
		path   string
		reason string
	}{
		{"cert missing", tlsfiles.Files{Cert: missing, Key: good.Key}, tlsfiles.PartCert, missing, "cannot be read: no such file or directory"},
		{"cert not PEM", tlsfiles.Files{Cert: notPEM, Key: good.Key}, tlsfiles.PartCert, notPEM, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"},
		{"key given as cert", tlsfiles.Files{Cert: good.Key, Key: good.Key}, tlsfiles.PartCert, good.Key, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"},
		{"key missing", tlsfiles.Files{Cert: good.Cert, Key: missing}, tlsfiles.PartKey, missing, "cannot be read: no such file or directory"},
		{"key not PEM", tlsfiles.Files{Cert: good.Cert, Key: notPEM}, tlsfiles.PartKey, notPEM, "holds no PEM private key (-----BEGIN PRIVATE KEY-----)"},
		{"key of another cert", tlsfiles.Files{Cert: good.Cert, Key: other.Key}, tlsfiles.PartKey, other.Key,
			"is not the key of the certificate in " + good.Cert + ": tls: private key does not match public key"},
		{"client CA not PEM", tlsfiles.Files{Cert: good.Cert, Key: good.Key, ClientCA: notPEM}, tlsfiles.PartClientCA, notPEM, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"},
		{"client CA missing", tlsfiles.Files{Cert: good.Cert, Key: good.Key, ClientCA: missing}, tlsfiles.PartClientCA, missing, "cannot be read: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tlsfiles.Load(tt.files)
			var fe *tlsfiles.FileError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tlsfiles.FileError{Part: tt.part, Path: tt.path, Reason: tt.reason}, *fe)
			_, err = tlsfiles.New(tt.files, nil)
			assert.ErrorAs(t, err, &fe, "New refuses what Load refuses")
		})
	}
	cfg, err := tlsfiles.Load(good)
	require.NoError(t, err)
	assert.Equal(t, tls.RequireAndVerifyClientCert, cfg.ClientAuth)
	assert.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
}

// BenchmarkCheckUnchanged is what every handshake pays to notice a change:
// a stat of each file.
func BenchmarkCheckUnchanged(b *testing.B) {
	ca := tlstest.NewCA(b, "ca")
	r, err := tlsfiles.New(tlstest.Files(b, ca.Server(b, "server"), ca), nil)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		r.Check()
	}
}
