package app

import (
	"log/slog"
	"net/netip"
	"sort"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
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
