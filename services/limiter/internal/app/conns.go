package app

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/connlimit"
)

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

// bound wraps each listener, named in names, with cfg's connection bounds.
// Addresses in the trusted proxies (the process's: a reload does not
// change them) are bounded by the listener's total only. The gRPC
// listener's connections are reclaimable but while a call is in flight on
// them (see keepBusy).
func (a *App) bound(names []string, lns []net.Listener) []net.Listener {
	perListener, perClient := connBounds(a.cfg, len(lns))
	out := make([]net.Listener, len(lns))
	for i, ln := range lns {
		out[i] = connlimit.Wrap(ln, connlimit.Options{
			Max: perListener, PerClient: perClient, IPv6Prefix: a.cfg.IPv6Prefix,
			Exempt:           func(ip netip.Addr) bool { return a.current.Load().Identity.ClientRules().AddrTrusted(ip) },
			IdleBetweenCalls: names[i] == listenerGRPC,
		})
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
		"Connections open on a listener and idle (silent since accepted, HTTP between keep-alive requests, or gRPC with no call in flight): reclaimed first when slots run short.", []string{"listener"}, nil)
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

// serveAll runs serve[i] on lns[i], each in its goroutine, until ctx is
// done or one fails, which stops the others.
func (a *App) serveAll(ctx context.Context, lns []net.Listener, serve []func(context.Context, net.Listener) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(lns))
	var wg sync.WaitGroup
	for i := range lns {
		wg.Go(func() {
			errs[i] = serve[i](ctx, lns[i])
			cancel()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
