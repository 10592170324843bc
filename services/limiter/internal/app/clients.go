package app

import (
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/connlimit"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
)

// resolver builds the identity rules of cfg: whose headers are believed,
// the IPv6 grouping and the API keys, read from their file now (at start
// and on every reload).
func resolver(cfg config.Config) (*identity.Resolver, error) {
	proxies, err := httplimit.ParsePrefixes(cfg.TrustedProxies)
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
		r.APIKeys = keys
	}
	return r, nil
}

// decisionAPI lists the policies cfg opens to /v1/check although a seed
// route uses them, sorted.
func decisionAPI(cfg config.Config) []string {
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

// evictionWarner returns a memstore eviction hook that logs a WARN when an
// exhausted key had to be evicted (its holder gets a fresh budget), at most
// once a minute, with the number since the last line.
func evictionWarner(log *slog.Logger) func(memstore.Eviction) {
	var pending atomic.Int64
	var last atomic.Int64 // Unix ns of the last line
	return func(ev memstore.Eviction) {
		if !ev.Refused {
			return
		}
		n := pending.Add(1)
		now := time.Now().UnixNano()
		if prev := last.Load(); now-prev < int64(time.Minute) || !last.CompareAndSwap(prev, now) {
			return
		}
		pending.Add(-n)
		log.Warn("the memory store evicted exhausted keys, whose holders get a fresh budget: raise --memory-max-keys or set --memory-refuse-when-full",
			"evicted", n, "policy", ev.Policy)
	}
}

// memoryOptions are the memory store's options for cfg.
func memoryOptions(cfg config.Config, log *slog.Logger) []memstore.Option {
	opts := []memstore.Option{memstore.WithMaxKeys(cfg.MemoryMaxKeys), memstore.WithEvictionHook(evictionWarner(log))}
	if cfg.MemoryRefuseWhenFull {
		opts = append(opts, memstore.WithRefuseWhenFull())
	}
	for name, n := range cfg.MemoryPolicyMaxKeys {
		opts = append(opts, memstore.WithPolicyMaxKeys(name, n))
	}
	return opts
}

// reservedFDs are the descriptors kept out of the connection bounds: the
// store's files and connections, the log, the runtime.
const reservedFDs = 64

// connBounds returns the bounds of each of n listeners: cfg's, or when 0,
// three quarters of the descriptor limit (less a reserve) shared by the
// listeners, and a quarter of that per client.
func connBounds(cfg config.Config, n int) (perListener, perClient int) {
	perListener, perClient = cfg.MaxConns, cfg.MaxConnsPerClient
	if perListener == 0 {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 1<<30 {
			perListener = max(16, (int(lim.Cur)*3/4-reservedFDs)/max(n, 1))
		}
	}
	if perClient == 0 && perListener > 0 {
		perClient = max(1, perListener/4)
	}
	return perListener, perClient
}

// bound wraps each listener with cfg's connection bounds.
func bound(cfg config.Config, lns ...net.Listener) []net.Listener {
	perListener, perClient := connBounds(cfg, len(lns))
	out := make([]net.Listener, len(lns))
	for i, ln := range lns {
		out[i] = connlimit.Wrap(ln, perListener, perClient)
	}
	return out
}

// grpcOptions bound what one gRPC client can hold: a connection must finish
// its HTTP/2 handshake within the read-header timeout, an idle one is closed
// after the idle timeout, pings more often than every 10 s are refused, and
// a connection carries at most 256 concurrent calls.
func grpcOptions(cfg config.Config) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(cfg.ReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second}),
		grpc.MaxConcurrentStreams(256),
	}
}
