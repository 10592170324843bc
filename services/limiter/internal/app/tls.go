package app

import (
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
)

// The listeners, as the listening line and tollgate_tls_handshake_errors_total
// name them.
const (
	listenerPublic   = "addr"
	listenerInternal = "internal_addr"
	listenerGRPC     = "grpc_addr"
)

// loadTLS reads the TLS files of each listener that is on: one Reloader
// for each set of files, so that listeners sharing their files share their
// reloads and their log lines.
func (a *App) loadTLS() error {
	public, internal, grpc := a.cfg.ListenerTLS()
	loaded := map[tlsfiles.Files]*tlsfiles.Reloader{}
	for _, l := range []struct {
		on    bool
		files tlsfiles.Files
		to    **tlsfiles.Reloader
	}{{true, public, &a.publicTLS}, {a.cfg.InternalAddr != "", internal, &a.internalTLS}, {a.cfg.GRPCAddr != "", grpc, &a.grpcTLS}} {
		if !l.on || !l.files.Enabled() {
			continue
		}
		r, ok := loaded[l.files]
		if !ok {
			var err error
			if r, err = tlsfiles.New(l.files, a.log); err != nil {
				return fmt.Errorf("app: %w", err)
			}
			loaded[l.files] = r
		}
		*l.to = r
	}
	return nil
}

// newHandshakeErrors creates tollgate_tls_handshake_errors_total{listener},
// with a series for each listener serving TLS (nil: not).
func newHandshakeErrors(public, internal, grpc *tlsfiles.Reloader) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_tls_handshake_errors_total",
		Help: "TLS handshakes that failed, by listener: no client certificate or one no --tls-client-ca signed, an old TLS version, plain HTTP, a client that left.",
	}, []string{"listener"})
	for name, r := range map[string]*tlsfiles.Reloader{listenerPublic: public, listenerInternal: internal, listenerGRPC: grpc} {
		if r != nil {
			c.WithLabelValues(name)
		}
	}
	return c
}

// httpErrorLog writes an http.Server's log lines at WARN, except its failed
// TLS handshakes: any client can cause those at will, so they are counted
// in handshakeErrors (nil on a plain listener, which has none) and logged
// at DEBUG only.
type httpErrorLog struct {
	log             *slog.Logger
	handshakeErrors prometheus.Counter
}

func (w httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	if w.handshakeErrors != nil && strings.HasPrefix(msg, "http: TLS handshake error") {
		w.handshakeErrors.Inc()
		w.log.Debug(msg)
	} else {
		w.log.Warn(msg)
	}
	return len(p), nil
}

// countedCreds are a gRPC server's TLS credentials counting the failed
// handshakes in handshakeErrors.
type countedCreds struct {
	credentials.TransportCredentials
	handshakeErrors prometheus.Counter
}

func (c countedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.handshakeErrors.Inc()
	}
	return out, info, err
}
