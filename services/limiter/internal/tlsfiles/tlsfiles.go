// Package tlsfiles serves TLS from PEM files that may change on disk: a
// listener's certificate chain, its private key and, for mutual TLS, the CAs
// whose client certificates it accepts. The files are read at start and
// again on the first handshake after any of them changed (another size,
// modification time or file: a rename into place, a Kubernetes secret's
// symbolic link swapped), so certificates rotate without a restart; an open
// connection keeps the certificate it was made with. Files that change into
// something unusable (a key that does not match, a file cut short) are
// reported once and the last good ones stay in use.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MinVersion is the oldest TLS version served: TLS 1.2.
const MinVersion = tls.VersionTLS12

// cipherSuites are the TLS 1.2 suites served: forward secrecy (ECDHE) and
// authenticated encryption (AES-GCM, ChaCha20-Poly1305) only, no CBC mode
// (Go's defaults still offer ECDHE with AES-CBC and HMAC-SHA1). TLS 1.3
// suites are all of this kind and not configurable.
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Files names the PEM files of one listener's TLS.
type Files struct {
	Cert string // certificate chain, leaf first; empty: no TLS
	Key  string // the leaf's private key
	// ClientCA holds the CAs that must have signed a client's certificate
	// (mutual TLS); empty: no client certificate is asked for.
	ClientCA string
}

// Enabled reports whether f asks for TLS.
func (f Files) Enabled() bool { return f.Cert != "" }

// Part names one of the files of Files.
type Part string

// The parts of Files, as a *FileError names them.
const (
	PartCert     Part = "cert"
	PartKey      Part = "key"
	PartClientCA Part = "client_ca"
)

// FileError is a file of Files that cannot be used: which one, its path and
// why, in one line.
type FileError struct {
	Part   Part
	Path   string
	Reason string
}

// Error returns `tlsfiles: cert "path": reason`.
func (e *FileError) Error() string {
	return fmt.Sprintf("tlsfiles: %s %q: %s", e.Part, e.Path, e.Reason)
}

// Load reads f and returns the server configuration it makes: TLS 1.2 at
// least with cipherSuites, HTTP/2 and HTTP/1.1 offered by ALPN, and with a ClientCA a client
// certificate required and verified. Any problem is a *FileError.
func Load(f Files) (*tls.Config, error) {
	certPEM, err := read(PartCert, f.Cert)
	if err != nil {
		return nil, err
	}
	if err := checkCerts(certPEM); err != nil {
		return nil, &FileError{Part: PartCert, Path: f.Cert, Reason: err.Error()}
	}
	keyPEM, err := read(PartKey, f.Key)
	if err != nil {
		return nil, err
	}
	if !hasPEM(keyPEM, func(typ string) bool { return strings.HasSuffix(typ, "PRIVATE KEY") }) {
		return nil, &FileError{Part: PartKey, Path: f.Key, Reason: "holds no PEM private key (-----BEGIN PRIVATE KEY-----)"}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Part: PartKey, Path: f.Key, Reason: "is not the key of the certificate in " + f.Cert + ": " + err.Error()}
	}
	cfg := &tls.Config{
		MinVersion:   MinVersion,
		CipherSuites: cipherSuites,
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if f.ClientCA != "" {
		caPEM, err := read(PartClientCA, f.ClientCA)
		if err != nil {
			return nil, err
		}
		if err := checkCerts(caPEM); err != nil {
			return nil, &FileError{Part: PartClientCA, Path: f.ClientCA, Reason: err.Error()}
		}
		cfg.ClientCAs = x509.NewCertPool()
		cfg.ClientCAs.AppendCertsFromPEM(caPEM)
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// read returns the content of part's file.
func read(part Part, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		reason := err.Error()
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			reason = pe.Err.Error() // the path is in the FileError already
		}
		return nil, &FileError{Part: part, Path: path, Reason: "cannot be read: " + reason}
	}
	return data, nil
}

// checkCerts checks that data holds at least one PEM certificate and that
// every one parses.
func checkCerts(data []byte) error {
	n := 0
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		n++
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("certificate %d does not parse: %w", n, err)
		}
	}
	if n == 0 {
		return errors.New("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
	}
	return nil
}

// hasPEM reports whether data holds a PEM block whose type is wanted.
func hasPEM(data []byte, want func(typ string) bool) bool {
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return false
		}
		if want(block.Type) {
			return true
		}
	}
}

// Reloader serves the files last read successfully, and reads them again
// on the first handshake after one of them changed. Create it with New;
// it is safe for concurrent use.
type Reloader struct {
	files Files
	log   *slog.Logger
	cur   atomic.Pointer[tls.Config] // built from the last good files

	mu   sync.Mutex     // one check at a time
	seen [3]os.FileInfo // of the files when last read, good or not; nil: absent

	failures atomic.Uint64 // changes whose files could not be used
}

// New reads f (see Load) and returns its Reloader; reloads are logged to
// log (nil discards).
func New(f Files, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{files: f, log: log}
	r.seen = r.stat() // before the read: a change in between is read again
	cfg, err := Load(f)
	if err != nil {
		return nil, err
	}
	r.cur.Store(cfg)
	return r, nil
}

// Config returns the configuration a server is given: every handshake
// first calls Check, then uses the files last read successfully.
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			r.Check()
			return r.cur.Load(), nil
		},
	}
}

// Check reads the files again when one of them changed since it was last
// read: usable ones replace the served ones (logged at INFO); otherwise
// the served ones stay and a WARN says why, once per change.
func (r *Reloader) Check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.stat()
	if sameFiles(now, r.seen) {
		return
	}
	r.seen = now
	cfg, err := Load(r.files)
	if err != nil {
		r.failures.Add(1)
		r.log.Warn("TLS files changed but cannot be used; the previous certificate stays in use", "cert", r.files.Cert, "error", err.Error())
		return
	}
	r.cur.Store(cfg)
	r.log.Info("TLS files reloaded", "cert", r.files.Cert, "client_ca", r.files.ClientCA,
		"not_after", cfg.Certificates[0].Leaf.NotAfter.UTC())
}

// Failures returns how many changes of the files could not be used (each
// was logged once, and the last good files stayed in use).
func (r *Reloader) Failures() uint64 { return r.failures.Load() }

// NotAfter returns the expiry of the certificate served: the last good
// one read.
func (r *Reloader) NotAfter() time.Time {
	return r.cur.Load().Certificates[0].Leaf.NotAfter
}

// stat returns the state of the cert, key and client CA files; nil for a
// file that cannot be read (or is not configured).
func (r *Reloader) stat() [3]os.FileInfo {
	var out [3]os.FileInfo
	for i, path := range []string{r.files.Cert, r.files.Key, r.files.ClientCA} {
		if path != "" {
			out[i], _ = os.Stat(path) // an error is nil: Load says why
		}
	}
	return out
}

// sameFiles reports whether each file is the same, with the same size and
// modification time, in a and b.
func sameFiles(a, b [3]os.FileInfo) bool {
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) {
			return false
		}
		if a[i] != nil && (a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()) || !os.SameFile(a[i], b[i])) {
			return false
		}
	}
	return true
}
