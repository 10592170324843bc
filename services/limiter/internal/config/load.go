package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisurl"
	"github.com/tollgate/tollgate/services/limiter/internal/canon"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
)

// setting is one scalar option. Its flag is --name, its environment variable
// LIMITER_NAME and its YAML key name, with dashes turned into underscores.
type setting struct {
	name string
	def  string
	help string
	set  func(c *Config, v string) error
}

func (s setting) env() string {
	return "LIMITER_" + strings.ToUpper(snake(s.name))
}

// yamlGroups are the prefixes of the settings that nest in the YAML file
// under one key: --tls-cert is tls.cert, --grpc-tls-client-ca is
// grpc_tls.client_ca.
var yamlGroups = []string{"tls", "grpc-tls", "internal-tls", "redis-tls"}

// yamlKey is the setting's path in the YAML file.
func (s setting) yamlKey() string {
	for _, g := range yamlGroups {
		if rest, ok := strings.CutPrefix(s.name, g+"-"); ok {
			return snake(g) + "." + snake(rest)
		}
	}
	return snake(s.name)
}

func snake(name string) string { return strings.ReplaceAll(name, "-", "_") }

// source is where a setting's value came from.
type source int

const (
	fromDefault source = iota
	fromYAML
	fromEnv
	fromFlag
)

// field is the setting as the user wrote it in src: its YAML path, its
// environment variable or its flag.
func (s setting) field(src source) string {
	switch src {
	case fromYAML:
		return s.yamlKey()
	case fromEnv:
		return s.env()
	}
	return "--" + s.name
}

// configSetting names the YAML file; it is read from the flag or the
// environment only.
var configSetting = setting{
	name: "config",
	help: "YAML file with any of the settings below (keys in snake_case), plus policies and routes",
	set:  func(c *Config, v string) error { c.File = v; return nil },
}

var settings = []setting{
	{"addr", "127.0.0.1:8080", "HTTP listen address, host:port", func(c *Config, v string) error {
		if err := checkHostPort(v); err != nil {
			return err
		}
		c.Addr = v
		return nil
	}},
	{"store", "sqlite", "storage backend: sqlite (embedded file), memory (one process), redis (shared)", func(c *Config, v string) error {
		switch s := Store(v); s {
		case StoreSQLite, StoreMemory, StoreRedis:
			c.Store = s
			return nil
		}
		return fmt.Errorf("%q is not one of sqlite, memory, redis", v)
	}},
	{"sqlite-path", "./data/limiter.db", "SQLite database file (store sqlite); its directory is created", func(c *Config, v string) error {
		if v == "" {
			return errors.New("must not be empty")
		}
		c.SQLitePath = v
		return nil
	}},
	{"redis-url", "redis://127.0.0.1:6379/0", "Redis URL (store redis): redis://host:port/db for one server, redis+cluster://host:port[,host:port...]/ for Redis Cluster, redis+sentinel://host:port[,host:port...]/MASTER[/db] for Sentinel; rediss... for TLS", func(c *Config, v string) error {
		// The store's own check, without the store: go-redis reads a single
		// server's query options when the store opens (a config.Error too).
		if _, err := redisurl.Parse(v); errors.Is(err, redisurl.ErrHash) {
			return fmt.Errorf("%q: %w", redactURL(v), err) // quotes nothing of the URL
		} else if err != nil {
			// err is left out: it could quote a part of the URL's password.
			return fmt.Errorf("%q is not a Redis URL: redis[s]://host:port[/db], redis[s]+cluster://host:port[,host:port...]/ or redis[s]+sentinel://host:port[,host:port...]/MASTER[/db]", redactURL(v))
		}
		c.RedisURL = v
		return nil
	}},
	{"redis-tls-ca", "", "store redis with a rediss URL: PEM file of the CA certificates that sign Redis' certificate; empty: the system's (REDIS_TLS_CACERT)", pathSetter(func(c *Config) *string { return &c.RedisTLSCA })},
	{"redis-tls-cert", "", "store redis with a rediss URL: PEM file of this instance's client certificate, for a Redis that asks for one (tls-auth-clients); needs --redis-tls-key; read at start (REDIS_TLS_CLIENT_CERT)", pathSetter(func(c *Config) *string { return &c.RedisTLSCert })},
	{"redis-tls-key", "", "with --redis-tls-cert: PEM file of its private key (REDIS_TLS_CLIENT_KEY)", pathSetter(func(c *Config) *string { return &c.RedisTLSKey })},
	{"redis-pool-size", "0", "store redis: connections to Redis per instance; 0 keeps go-redis's default, 10 per GOMAXPROCS", intSetter(0, 1<<16, func(c *Config) *int { return &c.RedisPoolSize })},
	{"redis-timeout", "500ms", "store redis: I/O timeout: how long Redis has to answer a call, counted from when the call is written to the connection (the wait for a turn before that is bounded by the request, not by this); a reply later than this is a Redis failure, and the policy's on_store_error decides", durationSetter(func(c *Config) *time.Duration { return &c.RedisTimeout })},
	{"decision-timeout", "2s", "time one request's decisions may take, the wait for a turn at the store included; a request that could not reach the store within it is shed: 503 with a problem of type overloaded and Retry-After (tollgate_overloaded_total), never counted as a store failure (SQLite and Redis; a memory decision never waits)", durationSetter(func(c *Config) *time.Duration { return &c.DecisionTimeout })},
	{"redis-breaker-cooldown", "1s", "store redis: when half or more of at least 5 round trips to Redis in the last 2s failed, the circuit breaker fails every call at once (no network wait) for this long, then lets 3 probes through with a 2s timeout; /readyz answers 503 meanwhile", durationSetter(func(c *Config) *time.Duration { return &c.RedisBreakerCooldown })},
	{"redis-client-time", "false", "store redis: decide with each instance's clock instead of Redis's TIME. Dangerous: instances whose clocks disagree count in different windows and together admit more than the limit; for tests and replays only", boolSetter(func(c *Config) *bool { return &c.RedisClientTime })},
	{"grpc-addr", "", "gRPC listen address, host:port, for Envoy's rate-limit API (envoy.service.ratelimit.v3); empty: no gRPC server", func(c *Config, v string) error {
		if v != "" {
			if err := checkHostPort(v); err != nil {
				return err
			}
		}
		c.GRPCAddr = v
		return nil
	}},
	{"envoy-config", "", "folder of envoyproxy/ratelimit YAML files (*.yaml, *.yml; one domain each), answered over --grpc-addr and POST /json; empty: none", func(c *Config, v string) error {
		if v != "" {
			if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
				return fmt.Errorf("%q is not a folder", v)
			}
		}
		c.EnvoyConfig = v
		return nil
	}},
	{"envoy-merge-domain-config", "false", "merge the descriptors of every --envoy-config file of one domain, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG; a descriptor defined in two files is still an error. Off: a domain in two files is an error", boolSetter(func(c *Config) *bool { return &c.EnvoyMergeDomainConfig })},
	{"envoy-response-dynamic-metadata", "false", "Envoy answers carry dynamic_metadata (the domain, the descriptors and the metadata of the matched descriptors that passed), as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA", boolSetter(func(c *Config) *bool { return &c.EnvoyResponseDynamicMetadata })},
	{"envoy-response-headers", "false", "Envoy answers (gRPC and POST /json) carry the IETF draft-10 RateLimit-Policy and RateLimit fields, and Retry-After when over the limit, in response_headers_to_add; off: no header fields, as envoyproxy/ratelimit's default", boolSetter(func(c *Config) *bool { return &c.EnvoyResponseHeaders })},
	{"envoy-stop-cache-key-increment-when-overlimit", "false", "when a descriptor of an Envoy request would go over its limit, count only the descriptors that do and check the others without counting, as envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", boolSetter(func(c *Config) *bool { return &c.EnvoyStopIncrementWhenOverLimit })},
	{"envoy-limit-headers", "false", "Envoy answers (gRPC and POST /json) carry envoyproxy/ratelimit's own header fields in response_headers_to_add, as its LIMIT_RESPONSE_HEADERS_ENABLED: the limit, the remaining and the seconds to reset of the descriptor closest to its limit (or over it), named by --envoy-limit-limit-header, --envoy-limit-remaining-header and --envoy-limit-reset-header", boolSetter(func(c *Config) *bool { return &c.EnvoyLimitHeaders })},
	{"envoy-limit-limit-header", "RateLimit-Limit", "with --envoy-limit-headers: the name of the limit's field (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER)", headerName(func(c *Config) *string { return &c.EnvoyLimitLimitHeader })},
	{"envoy-limit-remaining-header", "RateLimit-Remaining", "with --envoy-limit-headers: the name of the remaining's field (envoyproxy/ratelimit's LIMIT_REMAINING_HEADER)", headerName(func(c *Config) *string { return &c.EnvoyLimitRemainingHeader })},
	{"envoy-limit-reset-header", "RateLimit-Reset", "with --envoy-limit-headers: the name of the seconds-to-reset field (envoyproxy/ratelimit's LIMIT_RESET_HEADER)", headerName(func(c *Config) *string { return &c.EnvoyLimitResetHeader })},
	{"envoy-quota-mode", "false", "every Envoy descriptor is in quota mode, as envoyproxy/ratelimit's QUOTA_MODE: an over descriptor reports OVER_LIMIT, and the answer is OVER_LIMIT only when every quota descriptor is over (or a descriptor not in quota mode is); quota_mode: true on a descriptor does the same for that one", boolSetter(func(c *Config) *bool { return &c.EnvoyQuotaMode })},
	{"envoy-shadow-mode", "false", "every Envoy answer is OK overall, the descriptors' statuses as they are (over ones still counted and reported), as envoyproxy/ratelimit's SHADOW_MODE", boolSetter(func(c *Config) *bool { return &c.EnvoyShadowMode })},
	{"trusted-proxies", "", "comma-separated CIDRs or addresses whose X-Forwarded-For is believed; empty: none, the peer address is the client", func(c *Config, v string) error {
		var list []string
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			if _, err := netip.ParsePrefix(p); err != nil {
				if _, err := netip.ParseAddr(p); err != nil {
					return fmt.Errorf("%q is not a CIDR or an IP address", p)
				}
			}
			list = append(list, p)
		}
		c.TrustedProxies = list
		return nil
	}},
	{"internal-addr", "", "listen address, host:port, of the decision APIs (/v1/check, POST /json), /metrics and every admin route (DELETE /rate/reset, /admin/*); when set, --addr serves only the other seed routes and health. Empty: everything on --addr", func(c *Config, v string) error {
		if v != "" {
			if err := checkHostPort(v); err != nil {
				return err
			}
		}
		c.InternalAddr = v
		return nil
	}},
	{"identity-headers", "any", "who may assert an identity by header (X-Client-Key, X-User-Id): any (every client, as docs/seeds.md does: a client can choose its own budget) or trusted-proxies (only peers in --trusted-proxies; from others the headers are ignored)", func(c *Config, v string) error {
		t, err := identity.ParseTrust(v)
		c.IdentityHeaders = t
		return err
	}},
	{"ping-key", "header,peer", "/ping's key sources, comma-separated, first that applies wins: header (X-Client-Key), api_key (X-Api-Key, one of --api-keys-file), user (X-User-Id), peer (the client address). A source whose input is missing (api_key without --api-keys-file; header or user under --identity-headers trusted-proxies without --trusted-proxies) is refused at start and on reload", func(c *Config, v string) error {
		s, err := identity.ParseSources(splitList(v))
		c.PingKey = s
		return err
	}},
	{"rate-key", "user", "the key sources of /rate/check and /rate/status, comma-separated, first that applies wins: user (X-User-Id, a positive integer, as seed 001), api_key, header, peer (as --ping-key); /rate/reset/{userId} forgets user counters only", func(c *Config, v string) error {
		s, err := identity.ParseSources(splitList(v))
		c.RateKey = s
		return err
	}},
	{"api-keys-file", "", "file of the SHA-256 digests (hex, one per line) of the accepted X-Api-Key values; re-read on SIGHUP. Empty: no API key is accepted", func(c *Config, v string) error {
		if v != "" {
			if _, err := identity.LoadAPIKeys(v); err != nil {
				return err
			}
		}
		c.APIKeysFile = v
		return nil
	}},
	{"api-keys-allow-empty", "false", "--api-keys-file may hold no digest (empty, or comments only); without it such a file is refused at start and on reload, since every X-Api-Key would then be refused (401)", boolSetter(func(c *Config) *bool { return &c.APIKeysAllowEmpty })},
	{"ipv6-prefix", "64", "leading bits of an IPv6 address that name one client (a /64 is one subscriber); 128 keys every address apart", intSetter(1, 128, func(c *Config) *int { return &c.IPv6Prefix })},
	{"endpoint-fold", "", "foldings of /rate/* endpoints, comma-separated, beyond Unicode NFC (always): space, query, percent, slashes, dots, trailing_slash, case, or all. Empty: none", func(c *Config, v string) error {
		f, err := canon.ParseFold(splitList(v))
		c.EndpointFold = f
		return err
	}},
	{"max-conns", "0", "most open connections of each listener; over it an idle connection is closed to make room for a new one, or else the new one is closed at once. 0: a share of the descriptor limit (RLIMIT_NOFILE)", intSetter(0, 1<<24, func(c *Config) *int { return &c.MaxConns })},
	{"max-conns-per-client", "0", "most open connections of one client address (IPv6: its --ipv6-prefix) on each listener; addresses in --trusted-proxies are bounded by --max-conns only. 0: a sixteenth of --max-conns", intSetter(0, 1<<24, func(c *Config) *int { return &c.MaxConnsPerClient })},
	{"memory-refuse-when-full", "false", "store memory: when full, refuse new keys (429) instead of evicting keys whose state still matters (fail closed when full)", boolSetter(func(c *Config) *bool { return &c.MemoryRefuseWhenFull })},
	{"prune-interval", "1m", "how often expired windows and events are deleted", durationSetter(func(c *Config) *time.Duration { return &c.PruneInterval })},
	{"memory-max-keys", "1000000", "store memory: most keys held, each 16 sliding_log events counting as one key more; when full, a new key evicts, among sampled keys that are not exhausted, the one whose state expires first (an exhausted key goes last)", intSetter(1, 1<<31, func(c *Config) *int { return &c.MemoryMaxKeys })},
	{"audit-retention", "24h", "store sqlite: how long the api_calls audit rows (one per allowed /ping) are kept; the pruning job deletes older ones", durationSetter(func(c *Config) *time.Duration { return &c.AuditRetention })},
	{"sqlite-disk-reserve", "8388608", "store sqlite: bytes of a reserve file kept beside the database (its name + \"-reserve\") to recover from a full disk: when the disk fills, the store deletes it, refuses decisions (503, /readyz 503) and lets the pruning job free room, then writes it again and decides again; 0: no reserve", intSetter(0, 1<<40, func(c *Config) *int { return &c.SQLiteDiskReserve })},
	{"max-key-bytes", "256", fmt.Sprintf("longest key part (client key, user id, endpoint) stored as it is; a longer one is stored as its SHA-256 digest (%d bytes), in every store", limiter.MinKeyBytes), intSetter(limiter.MinKeyBytes, limiter.MaxKeyLen, func(c *Config) *int { return &c.MaxKeyBytes })},
	{"sliding-log-max-limit", "5000", "largest limit a sliding_log policy may have: it keeps one event per admitted request and counts them on every decision; for larger limits use sliding_window or token_bucket", intSetter(1, limiter.MaxLimit, func(c *Config) *int { return &c.SlidingLogMaxLimit })},
	{"envoy-allow-empty-reload", "false", "a reload (SIGHUP) may leave --envoy-config without any domain; without it such a reload is refused, since every descriptor would then be answered OK with no limit", boolSetter(func(c *Config) *bool { return &c.EnvoyAllowEmptyReload })},
	{"envoy-xds-server", "", "xDS management server, host:port, that pushes the Envoy rules (type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, State of the World over ADS) as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW: each version applied whole, a bad one refused (NACK) and the running rules kept; reconnects with backoff. Exclusive with --envoy-config; empty: none", func(c *Config, v string) error {
		if v != "" {
			if err := checkHostPort(v); err != nil {
				return err
			}
		}
		c.EnvoyXDSServer = v
		return nil
	}},
	{"envoy-xds-node-id", "default", "with --envoy-xds-server: the node id this instance subscribes as (envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_ID)", func(c *Config, v string) error {
		if v == "" {
			return errors.New("must not be empty")
		}
		c.EnvoyXDSNodeID = v
		return nil
	}},
	{"envoy-xds-tls", "false", "with --envoy-xds-server: connect over TLS (1.2 or later), verifying the server (envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_USE_TLS)", boolSetter(func(c *Config) *bool { return &c.EnvoyXDSTLS })},
	{"envoy-xds-tls-ca", "", "with --envoy-xds-tls: PEM file of the CA certificates that sign the management server's; empty: the system's (CONFIG_GRPC_XDS_SERVER_TLS_CACERT)", pathSetter(func(c *Config) *string { return &c.EnvoyXDSTLSCA })},
	{"envoy-xds-tls-cert", "", "with --envoy-xds-tls: PEM file of this instance's client certificate, for a server that asks for one (mTLS); needs --envoy-xds-tls-key (CONFIG_GRPC_XDS_CLIENT_TLS_CERT)", pathSetter(func(c *Config) *string { return &c.EnvoyXDSTLSCert })},
	{"envoy-xds-tls-key", "", "with --envoy-xds-tls-cert: PEM file of its private key (CONFIG_GRPC_XDS_CLIENT_TLS_KEY)", pathSetter(func(c *Config) *string { return &c.EnvoyXDSTLSKey })},
	{"envoy-xds-tls-server-name", "", "with --envoy-xds-tls: the name the server's certificate must carry; empty: the host of --envoy-xds-server (CONFIG_GRPC_XDS_SERVER_TLS_SAN)", func(c *Config, v string) error { c.EnvoyXDSTLSServerName = v; return nil }},
	{"max-header-bytes", "16384", "largest request header block, in bytes", intSetter(1024, 1<<20, func(c *Config) *int { return &c.MaxHeaderBytes })},
	{"read-header-timeout", "5s", "time allowed to read a request's headers", durationSetter(func(c *Config) *time.Duration { return &c.ReadHeaderTimeout })},
	{"read-timeout", "10s", "time allowed to read a whole request; also the most a gRPC call may last (but Health/Watch), so that one whose request never arrives ends", durationSetter(func(c *Config) *time.Duration { return &c.ReadTimeout })},
	{"write-timeout", "10s", "time allowed to write a response", durationSetter(func(c *Config) *time.Duration { return &c.WriteTimeout })},
	{"idle-timeout", "60s", "how long an idle keep-alive connection stays open", durationSetter(func(c *Config) *time.Duration { return &c.IdleTimeout })},
	{"shutdown-timeout", "15s", "on SIGINT/SIGTERM, how long in-flight requests may take to finish", durationSetter(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{"log-level", "info", "debug, info, warn or error", func(c *Config, v string) error {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf("%q is not one of debug, info, warn, error", v)
		}
		return nil
	}},
	{"access-log", "off", "which requests get an INFO line: off (none; errors and state changes are always logged), refusals (each 429, at most one line per client key a second, carrying how many were folded into it) or all (one per request)", func(c *Config, v string) error {
		switch AccessLog(v) {
		case AccessLogOff, AccessLogRefusals, AccessLogAll:
			c.AccessLog = AccessLog(v)
			return nil
		}
		return fmt.Errorf("%q is not off, refusals or all", v)
	}},
	{"log-format", "text", "text or json", func(c *Config, v string) error {
		if v != "text" && v != "json" {
			return fmt.Errorf("%q is not one of text, json", v)
		}
		c.LogFormat = v
		return nil
	}},
	{"tracing", "false", "export OpenTelemetry traces over OTLP: a span per request (W3C traceparent of the caller's span accepted on HTTP, forward-auth and gRPC), per policy decision and per store call. The exporter, its endpoint and protocol, the sampler and the resource are the standard OTEL_* variables (docs/tracing.md); off: no exporter, no span, nothing read from them", boolSetter(func(c *Config) *bool { return &c.Tracing })},
	{"tracing-client-key", "false", "with --tracing: put the client key on each decision span (tollgate.key), and the caller's address, the path and the user agent on the server spans. Keys are personal data (user ids, addresses, API keys): off, no span carries one", boolSetter(func(c *Config) *bool { return &c.TracingClientKey })},
	{"tls-cert", "", "PEM certificate chain (leaf first) served by every listener (--addr, --internal-addr, --grpc-addr): HTTPS and gRPC over TLS, 1.2 at least; re-read on the first handshake after the file changes. Empty: plain TCP", pathSetter(func(c *Config) *string { return &c.TLS.Cert })},
	{"tls-key", "", "PEM private key of --tls-cert, re-read with it", pathSetter(func(c *Config) *string { return &c.TLS.Key })},
	{"tls-client-ca", "", "PEM CA certificates for mutual TLS on every listener: a client must show a certificate one of them signed, or the handshake fails; re-read when the file changes. Empty: no client certificate asked for", pathSetter(func(c *Config) *string { return &c.TLS.ClientCA })},
	{"internal-tls-cert", "", "the --internal-addr listener's certificate, instead of --tls-cert (with --internal-tls-key)", pathSetter(func(c *Config) *string { return &c.InternalTLS.Cert })},
	{"internal-tls-key", "", "the private key of --internal-tls-cert", pathSetter(func(c *Config) *string { return &c.InternalTLS.Key })},
	{"internal-tls-client-ca", "", "the --internal-addr listener's client CAs, instead of --tls-client-ca: mutual TLS on the decision APIs, /metrics and /admin/* alone", pathSetter(func(c *Config) *string { return &c.InternalTLS.ClientCA })},
	{"grpc-tls-cert", "", "the --grpc-addr listener's certificate, instead of --tls-cert (with --grpc-tls-key)", pathSetter(func(c *Config) *string { return &c.GRPCTLS.Cert })},
	{"grpc-tls-key", "", "the private key of --grpc-tls-cert", pathSetter(func(c *Config) *string { return &c.GRPCTLS.Key })},
	{"grpc-tls-client-ca", "", "the --grpc-addr listener's client CAs, instead of --tls-client-ca: mutual TLS with Envoy alone", pathSetter(func(c *Config) *string { return &c.GRPCTLS.ClientCA })},
	{"offenders-window", "1m", "GET /admin/offenders lists the keys refused most in the current and the previous interval of this length", durationSetter(func(c *Config) *time.Duration { return &c.OffendersWindow })},
	{"offenders-raw-keys", "false", "GET /admin/offenders shows client keys as sent instead of their log hash. Keys can be API keys or user ids: enable only where the admin key is guarded as well as they are", boolSetter(func(c *Config) *bool { return &c.OffendersRawKeys })},
}

// headerName sets a string that must be an HTTP header field name.
func headerName(field func(c *Config) *string) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		if !httpguts.ValidHeaderFieldName(v) {
			return fmt.Errorf("%q is not an HTTP header field name", v)
		}
		*field(c) = v
		return nil
	}
}

// pathSetter sets a file path; the files are checked once every source is
// applied (see checkTLS).
func pathSetter(field func(c *Config) *string) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		*field(c) = v
		return nil
	}
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// checkHostPort accepts a listen address host:port (the host may be empty).
func checkHostPort(v string) error {
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		return fmt.Errorf("%q is not host:port", v)
	}
	return nil
}

func durationSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration such as 500ms, 10s or 1m", v)
		}
		*field(c) = d
		return nil
	}
}

func intSetter(lo, hi int, field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("%q is not an integer in %d..%d", v, lo, hi)
		}
		*field(c) = n
		return nil
	}
}

// redactURL hides a password in a URL echoed in an error.
func redactURL(v string) string {
	if u, err := url.Parse(v); err == nil {
		u.Fragment, u.RawFragment = "", "" // may hold the rest of a password cut at a '#'
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// Load builds the configuration from command-line args (without the program
// name), the environment read through getenv, the YAML file named by
// --config or LIMITER_CONFIG, and the defaults, in that order of precedence.
// An empty environment variable counts as unset. It returns ErrHelp for
// -h/--help, and otherwise any error as an *Error (one line, naming the
// field). Load is safe for concurrent use: it touches no global state.
func Load(args []string, getenv func(string) string) (Config, error) {
	fs := flag.NewFlagSet("limiter", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	flags := make(map[string]*string, len(settings)+1)
	for _, s := range append([]setting{configSetting, compatSetting}, settings...) {
		flags[s.name] = fs.String(s.name, "", s.help)
		if s.def == "false" { // a switch: --name alone means true
			fs.Lookup(s.name).Value = switchFlag{flags[s.name]}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, ErrHelp
		}
		return Config{}, &Error{Field: "arguments", Reason: err.Error()}
	}
	if fs.NArg() > 0 {
		return Config{}, &Error{Field: "arguments", Reason: fmt.Sprintf("unexpected argument %q (every option is a --flag)", fs.Arg(0))}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var peerTracing *PeerTracing
	if compat := getenv(compatSetting.env()); given[compatSetting.name] && *flags[compatSetting.name] != "false" || compat != "" && compat != "false" {
		var err error
		if getenv, peerTracing, err = compatGetenv(getenv); err != nil {
			return Config{}, err
		}
	}
	from := map[string]source{} // setting name -> the source of its value

	c := Config{Live: Live{Policies: defaultPolicies(), RoutePolicies: defaultRoutes()}, TracingPeer: peerTracing}
	for _, s := range settings {
		if err := s.set(&c, s.def); err != nil {
			return Config{}, fmt.Errorf("config: default of --%s: %w", s.name, err)
		}
	}
	// The file named by the flag, else by the environment.
	fileField := configSetting.env()
	c.File = getenv(fileField)
	if given[configSetting.name] {
		fileField, c.File = "--"+configSetting.name, *flags[configSetting.name]
	}
	if c.File != "" {
		data, err := os.ReadFile(c.File)
		if err != nil {
			return Config{}, fieldError(fileField, err)
		}
		overridden := func(s setting) bool { return given[s.name] || getenv(s.env()) != "" }
		if err := c.applyYAML(data, from, overridden); err != nil {
			return Config{}, err
		}
	}
	for _, s := range settings {
		if v := getenv(s.env()); v != "" {
			if err := s.set(&c, v); err != nil {
				return Config{}, fieldError(s.env(), err)
			}
			from[s.name] = fromEnv
		}
	}
	for _, s := range settings {
		if given[s.name] {
			if err := s.set(&c, *flags[s.name]); err != nil {
				return Config{}, fieldError("--"+s.name, err)
			}
			from[s.name] = fromFlag
		}
	}
	c.AdminKey = getenv(AdminKeyEnv)
	if c.AdminKey != "" && len(c.AdminKey) < MinAdminKeyLen {
		return Config{}, &Error{Field: AdminKeyEnv, Reason: fmt.Sprintf("must be at least %d characters (it has %d); unset it to turn the admin routes off", MinAdminKeyLen, len(c.AdminKey))}
	}
	c.HashSecret = getenv(HashSecretEnv)
	if c.HashSecret != "" && len(c.HashSecret) < MinAdminKeyLen {
		return Config{}, &Error{Field: HashSecretEnv, Reason: fmt.Sprintf("must be at least %d characters", MinAdminKeyLen)}
	}
	if c.InternalAddr != "" && c.InternalAddr == c.Addr {
		return Config{}, &Error{Field: "internal-addr", Reason: "must differ from --addr"}
	}
	if err := c.checkSlidingLog(); err != nil {
		return Config{}, err
	}
	if err := c.checkGateway(); err != nil {
		return Config{}, err
	}
	if err := c.checkKeySources(from); err != nil {
		return Config{}, err
	}
	if err := c.checkTLS(from); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Usage writes the --help text: every flag with what it does, its
// environment variable and its default.
func Usage(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`Usage: limiter [flags]

Serves the Tollgate rate limiter over HTTP. Every setting comes, in this order
of precedence, from its flag, its environment variable, the YAML file given
with --config, or its default (the defaults reproduce the seed notes: /ping 3 per
60s fixed window, /rate/check 10 per 60s sliding log).

Flags:
`)
	for _, s := range append([]setting{configSetting, compatSetting}, settings...) {
		def := s.def
		if def == "" {
			def = "none"
		}
		fmt.Fprintf(&b, "  --%s\n      %s\n      env %s, default %s\n", s.name, s.help, s.env(), def)
	}
	fmt.Fprintf(&b, `
Environment only:
  %s
      key that DELETE /rate/reset and GET /admin/offenders require in
      X-Admin-Key, at least 16 characters; never a flag, never logged;
      default empty: admin routes always answer 403
  %s
      secret (at least 16 characters) of the keyed hash naming clients in
      logs and /admin/offenders; give every instance the same one; default
      empty: a random secret per process

YAML file (every key optional; unknown keys are an error):
  tls:        # --tls-cert, --tls-key, --tls-client-ca; grpc_tls and internal_tls likewise
    { cert: server.pem, key: server-key.pem, client_ca: clients-ca.pem }
  policies:   # name -> {algorithm, limit, window, shadow, on_store_error, decision_api, memory_max_keys, near_cache}; window is whole seconds
    ping:  { algorithm: fixed_window, limit: 3,  window: 60s }
    check: { algorithm: sliding_log,  limit: 10, window: 60s }
  routes:     # seed route -> its policies, evaluated in order
    ping:  [ping]
    check: [check]
  Algorithms: fixed_window, sliding_log, sliding_window, token_bucket,
  sliding_log_unsafe (a race demonstration; never protects anything).
  on_store_error: what a policy's decisions become while the store cannot
  decide (Redis down or slower than --redis-timeout, breaker open):
    fail_closed  refuse with 503 (the default)
    fail_open    allow without counting (tollgate_store_fallback_total)
    local        decide with an in-process memory store: each instance then
                 limits on its own, so N instances admit up to N x limit
  The sqlite and memory stores accept it; it only matters with redis.
  near_cache: with redis, once Redis refuses a key until a known time, this
  instance refuses further attempts of the same cost on it until then
  without asking Redis. Default: on, except for fixed_window (whose count
  includes refused attempts, which a cached refusal would not count).
`, AdminKeyEnv, HashSecretEnv)
	_, err := io.WriteString(w, b.String())
	return err
}
