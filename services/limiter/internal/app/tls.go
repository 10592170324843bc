package app

import (
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
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

// warnPlainDecisions warns when a client certificate is asked for on one
// listener that decides (the internal one's decision APIs, or the public
// one's without --internal-addr; Envoy's gRPC) but not on another: a
// client reaching that one charges the same budgets without the
// certificate. It is not refused: Envoy Gateway runs envoyproxy/ratelimit
// with mutual TLS on gRPC beside a plain HTTP port that also serves POST
// /json, and Tollgate must start where it does.
func warnPlainDecisions(log *slog.Logger, cfg config.Config) {
	public, internal, grpc := cfg.ListenerTLS()
	deciding := map[string]tlsfiles.Files{listenerPublic: public}
	if cfg.InternalAddr != "" {
		deciding = map[string]tlsfiles.Files{listenerInternal: internal}
	}
	if cfg.GRPCAddr != "" {
		deciding[listenerGRPC] = grpc
	}
	var mtls, plain []string
	for _, name := range []string{listenerPublic, listenerInternal, listenerGRPC} {
		if files, ok := deciding[name]; ok && files.ClientCA != "" {
			mtls = append(mtls, name)
		} else if ok {
			plain = append(plain, name)
		}
	}
	if len(mtls) > 0 && len(plain) > 0 {
		log.Warn("decisions are served without a client certificate on a listener while another asks for one: a client reaching it charges the same budgets; set --tls-client-ca (or a client CA on each of them) to ask everywhere",
			"mtls", mtls, "plain", plain)
	}
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

var (
	tlsReloadErrorsDesc = prometheus.NewDesc("tollgate_tls_reload_errors_total",
		"Changes of a listener's TLS files that could not be used (each logged once): the last good certificate stays in use.", []string{"listener"}, nil)
	tlsNotAfterDesc = prometheus.NewDesc("tollgate_tls_certificate_not_after_seconds",
		"Expiry, in Unix seconds, of the certificate a listener serves: the last good one read.", []string{"listener"}, nil)
)

// tlsCollector reads the reload failures and the served certificate's
// expiry of each listener serving TLS (by name) at scrape time.
type tlsCollector map[string]*tlsfiles.Reloader

func (c tlsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tlsReloadErrorsDesc
	ch <- tlsNotAfterDesc
}

func (c tlsCollector) Collect(ch chan<- prometheus.Metric) {
	for name, r := range c {
		if r == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(tlsReloadErrorsDesc, prometheus.CounterValue, float64(r.Failures()), name)
		ch <- prometheus.MustNewConstMetric(tlsNotAfterDesc, prometheus.GaugeValue, float64(r.NotAfter().Unix()), name)
	}
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

// grpcCreds are a gRPC server's transport credentials (TLS, or none)
// counting the failed handshakes in handshakeErrors (nil: none counted).
type grpcCreds struct {
	credentials.TransportCredentials
	handshakeErrors prometheus.Counter
}

func (c grpcCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil && c.handshakeErrors != nil {
		c.handshakeErrors.Inc()
	}
	return conn, info, err
}
