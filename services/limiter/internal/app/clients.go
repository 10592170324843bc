package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/connlimit"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
)

// resolver builds the identity rules of cfg: whose headers are believed,
// the IPv6 grouping and the API keys, read from their file now (at start
// and on every reload). A file without any key is refused unless
// cfg.APIKeysAllowEmpty: a reload keeps the running keys. trustedProxies
// are the process's, which the connection bounds are also built with at
// start: a reload does not change them.
func resolver(cfg config.Live, trustedProxies []string) (*identity.Resolver, error) {
	proxies, err := httplimit.ParsePrefixes(trustedProxies)
	if err != nil {
		return nil, &config.Error{Field: "trusted_proxies", Reason: err.Error()}
	}
	clients, err := httplimit.NewClients(httplimit.TrustProxies(proxies...), httplimit.IPv6Prefix(cfg.IPv6Prefix))
	if err != nil {
		return nil, &config.Error{Field: "ipv6_prefix", Reason: err.Error()}
	}
	r := &identity.Resolver{Trust: cfg.IdentityHeaders, Clients: clients}
	if cfg.APIKeysFile != "" {
		keys, err := identity.LoadAPIKeys(cfg.APIKeysFile)
		if err != nil {
			return nil, &config.Error{Field: "api_keys_file", Reason: err.Error()}
		}
		if keys.Len() == 0 && !cfg.APIKeysAllowEmpty {
			return nil, &config.Error{Field: "api_keys_file", Reason: cfg.APIKeysFile + " holds no key: every X-Api-Key would be refused (401); add digests, or set --api-keys-allow-empty to mean it"}
		}
		r.APIKeys = keys
	}
	return r, nil
}

// decisionAPI lists the policies cfg opens to /v1/check although a seed
// route uses them, sorted.
func decisionAPI(cfg config.Live) []string {
	var names []string
	for n, open := range cfg.DecisionAPI {
		if open {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// warnCatchAll logs a WARN for each trusted-proxy range that covers every
// address: then any client's X-Forwarded-For (and, with --identity-headers
// trusted-proxies, its X-Client-Key and X-User-Id) is believed.
func warnCatchAll(log *slog.Logger, proxies []string) {
	for _, p := range proxies {
		if prefix, err := netip.ParsePrefix(p); err == nil && prefix.Bits() == 0 {
			log.Warn("a trusted proxy range covers every address: any client can choose the address (and identity headers) the service believes", "trusted_proxy", p)
		}
	}
}

// reservedFDs are the descriptors kept out of the connection bounds: the
// store's files and connections, the log, the runtime.
const reservedFDs = 64

// clientShare is the default per-client bound's share of a listener's
// connections: a sixteenth, so that it takes sixteen addresses, not four,
// to hold every slot, and those idle are reclaimed for newcomers anyway.
const clientShare = 16

// connBounds returns the bounds of each of n listeners: cfg's, or when 0,
// three quarters of the descriptor limit (less a reserve) shared by the
// listeners, and a sixteenth of that per client.
func connBounds(cfg config.Config, n int) (perListener, perClient int) {
	perListener, perClient = cfg.MaxConns, cfg.MaxConnsPerClient
	if perListener == 0 {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 1<<30 {
			perListener = max(16, (int(lim.Cur)*3/4-reservedFDs)/max(n, 1))
		}
	}
	if perClient == 0 && perListener > 0 {
		perClient = max(1, perListener/clientShare)
	}
	return perListener, perClient
}

// bound wraps each listener with cfg's connection bounds. Addresses in the
// trusted proxies (the process's: a reload does not change them) are
// bounded by the listener's total only.
func (a *App) bound(lns ...net.Listener) []net.Listener {
	perListener, perClient := connBounds(a.cfg, len(lns))
	opts := connlimit.Options{
		Max: perListener, PerClient: perClient, IPv6Prefix: a.cfg.IPv6Prefix,
		Exempt: func(ip netip.Addr) bool { return a.current.Load().Identity.ClientRules().AddrTrusted(ip) },
	}
	out := make([]net.Listener, len(lns))
	for i, ln := range lns {
		out[i] = connlimit.Wrap(ln, opts)
	}
	return out
}

// closeAll closes lns.
func closeAll(lns []net.Listener) error {
	var errs []error
	for _, ln := range lns {
		errs = append(errs, ln.Close())
	}
	return errors.Join(errs...)
}

var (
	connOpenDesc = prometheus.NewDesc("tollgate_connections_open",
		"Connections open on a listener; bounded by --max-conns.", []string{"listener"}, nil)
	connIdleDesc = prometheus.NewDesc("tollgate_connections_idle",
		"HTTP connections open on a listener and idle (silent since accepted, or between keep-alive requests): reclaimed first when slots run short.", []string{"listener"}, nil)
	connRefusedDesc = prometheus.NewDesc("tollgate_connections_refused_total",
		"Connections closed on arrival: over --max-conns-per-client, or over --max-conns with nothing idle to reclaim.", []string{"listener"}, nil)
	connReclaimedDesc = prometheus.NewDesc("tollgate_connections_reclaimed_total",
		"Idle connections closed to make room for a new one.", []string{"listener"}, nil)
)

// connCollector reads the bounded listeners' counts at scrape time; names
// label them (addr, internal_addr, grpc_addr).
type connCollector struct {
	names []string
	lns   []net.Listener
}

func (c connCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connOpenDesc, connIdleDesc, connRefusedDesc, connReclaimedDesc} {
		ch <- d
	}
}

func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	for i, ln := range c.lns {
		l, ok := ln.(*connlimit.Listener)
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(connOpenDesc, prometheus.GaugeValue, float64(l.Open()), c.names[i])
		ch <- prometheus.MustNewConstMetric(connIdleDesc, prometheus.GaugeValue, float64(l.Idle()), c.names[i])
		ch <- prometheus.MustNewConstMetric(connRefusedDesc, prometheus.CounterValue, float64(l.Refused()), c.names[i])
		ch <- prometheus.MustNewConstMetric(connReclaimedDesc, prometheus.CounterValue, float64(l.Reclaimed()), c.names[i])
	}
}

// grpcOptions bound what one gRPC client can hold: a connection must finish
// its HTTP/2 handshake within the read-header timeout, an idle one is closed
// after the idle timeout, pings more often than every 10 s (or with no call
// in flight) are refused, a connection carries at most 256 concurrent
// calls, and a call must end within the read timeout (see callDeadline).
func grpcOptions(cfg config.Config) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(cfg.ReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second}),
		grpc.MaxConcurrentStreams(256),
		grpc.InTapHandle(callDeadline(cfg.ReadTimeout)),
	}
}

// callDeadline bounds every call but grpc.health.v1.Health/Watch (a stream
// meant to stay open) by d from the arrival of its headers: a call whose
// request message never arrives ends with DeadlineExceeded instead of
// holding its goroutine until the client leaves. A client's own shorter
// deadline still applies; d <= 0 bounds nothing.
func callDeadline(d time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if d <= 0 || info.FullMethodName == healthpb.Health_Watch_FullMethodName {
			return ctx, nil
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		// The stream's own context, this one's parent, is cancelled when
		// the call ends, which releases the timer: nothing to call here.
		_ = cancel
		return ctx, nil
	}
}
