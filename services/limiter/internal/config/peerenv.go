package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// compatSetting turns on envoyproxy/ratelimit's environment (peerVars);
// the binary run under the name ratelimit (the image's /bin/ratelimit)
// turns it on by itself. Like --config it is read from the flag or the
// environment only.
var compatSetting = setting{
	name: "envoy-compat-env",
	def:  "false",
	help: "read envoyproxy/ratelimit's environment variables (REDIS_URL, CONFIG_TYPE, PORT, …) with its meanings and defaults, as docs/envoy.md lists them; on when the binary runs as ratelimit. A setting the peer has is then set by its variable or its default, never by LIMITER_* or the YAML file; only a flag overrides it",
	set:  func(*Config, string) error { return nil },
}

// PeerProgram is the program name under which the binary starts with
// --envoy-compat-env: envoyproxy/ratelimit's /bin/ratelimit.
const PeerProgram = "ratelimit"

// peerVar is one of envoyproxy/ratelimit's environment variables
// (src/settings/settings.go) and what Tollgate does with it: exactly one
// of to (the Tollgate settings it sets), ignored or refused says why.
type peerVar struct {
	name, def string
	to        string // the Tollgate setting(s), as docs/envoy.md shows them
	ignored   string // why it may be set and changes nothing
	refused   string // why a value other than def stops the start
}

// Why each group is ignored or refused, where rows share a reason.
const (
	noStatsD      = "Tollgate has no StatsD sink: its metrics are Prometheus on `/metrics`"
	noDebug       = "Tollgate has no debug listener (the peer's `/rlconfig`, pprof); `/metrics` is on `PORT`, or `PROMETHEUS_ADDR`"
	noMemcache    = "read only with `BACKEND_TYPE=memcache`, which is refused"
	noPerSecond   = "read only with `REDIS_PERSECOND=true`, which is refused"
	backoff       = "Tollgate reconnects to the xDS server with its own backoff; the running rules stay meanwhile"
	pipelining    = "batching only: Tollgate sends each decision as one script call, so decisions are the same"
	startDegraded = "Tollgate starts while Redis is down, answering each policy's `on_store_error` and `/readyz` 503 until Redis answers"
)

// peerVars is the mapping from envoyproxy/ratelimit's environment to
// Tollgate's, taken from envoyproxy/ratelimit f2fb157
// (src/settings/settings.go).
var peerVars = []peerVar{
	{name: "HOST", def: "0.0.0.0", to: "`--addr` (HOST:PORT); `/healthcheck` answers as `/readyz`"},
	{name: "PORT", def: "8080", to: "`--addr` (HOST:PORT)"},
	{name: "GRPC_HOST", def: "0.0.0.0", to: "`--grpc-addr` (GRPC_HOST:GRPC_PORT)"},
	{name: "GRPC_PORT", def: "8081", to: "`--grpc-addr` (GRPC_HOST:GRPC_PORT)"},
	{name: "GRPC_UDS", refused: "Tollgate serves gRPC on TCP only"},
	{name: "DEBUG_HOST", def: "0.0.0.0", ignored: noDebug},
	{name: "DEBUG_PORT", def: "6070", ignored: noDebug},
	{name: "GRPC_MAX_CONNECTION_AGE", def: "24h", ignored: "Tollgate does not age gRPC connections out; Envoy's own connection settings rebalance"},
	{name: "GRPC_MAX_CONNECTION_AGE_GRACE", def: "1h", ignored: "Tollgate does not age gRPC connections out"},
	{name: "GRPC_SERVER_USE_TLS", def: "false", to: "with `true`: `--grpc-tls-cert`, `--grpc-tls-key`"},
	{name: "GRPC_SERVER_TLS_CERT", to: "`--grpc-tls-cert` (with `GRPC_SERVER_USE_TLS=true`)"},
	{name: "GRPC_SERVER_TLS_KEY", to: "`--grpc-tls-key` (with `GRPC_SERVER_USE_TLS=true`)"},
	{name: "GRPC_CLIENT_TLS_CACERT", to: "`--grpc-tls-client-ca` (mTLS, with `GRPC_SERVER_USE_TLS=true`)"},
	{name: "GRPC_SERVER_TLS_CA_CERT", ignored: "the peer reads no such variable (Envoy Gateway sets it beside `GRPC_CLIENT_TLS_CACERT`)"},
	{name: "GRPC_CLIENT_TLS_SAN", refused: "Tollgate checks no client certificate name beyond its CA"},
	{name: "LOG_LEVEL", def: "WARN", to: "`--log-level` (lower-cased)"},
	{name: "LOG_FORMAT", def: "text", to: "`--log-format`"},
	{name: "CONFIG_TYPE", def: "FILE", to: "`FILE`: `--envoy-config`; `GRPC_XDS_SOTW`: `--envoy-xds-server`; another is refused"},
	{name: "FORCE_START_WITHOUT_INITIAL_CONFIG", def: "false", ignored: "Tollgate always starts without waiting for the first xDS version, answering OK until it comes, as the peer does with `true`"},
	{name: "CONFIG_GRPC_XDS_NODE_ID", def: "default", to: "`--envoy-xds-node-id`"},
	{name: "CONFIG_GRPC_XDS_NODE_METADATA", refused: "Tollgate sends no node metadata, on which a server may choose the rules"},
	{name: "CONFIG_GRPC_XDS_SERVER_URL", def: "localhost:18000", to: "`--envoy-xds-server` (with `CONFIG_TYPE=GRPC_XDS_SOTW`)"},
	{name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", def: "3s", ignored: backoff},
	{name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", refused: "Tollgate sends no extra headers, which a server may need to authorize it"},
	{name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", def: "false", to: "`--envoy-xds-tls`"},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", to: "`--envoy-xds-tls-cert`"},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", to: "`--envoy-xds-tls-key`"},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", to: "`--envoy-xds-tls-ca`"},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", to: "`--envoy-xds-tls-server-name`"},
	{name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", def: "10s", ignored: backoff},
	{name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", def: "60s", ignored: backoff},
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", def: "0.5", ignored: backoff},
	{name: "XDS_CLIENT_BACKOFF_JITTER", def: "true", ignored: backoff},
	{name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", ignored: "Tollgate's xDS client applies its own bound on a push"},
	{name: "USE_DOG_STATSD", def: "false", ignored: noStatsD},
	{name: "USE_DOG_STATSD_MOGRIFIERS", ignored: noStatsD},
	{name: "USE_STATSD", def: "true", ignored: noStatsD},
	{name: "STATSD_HOST", def: "localhost", ignored: noStatsD},
	{name: "STATSD_PORT", def: "8125", ignored: noStatsD},
	{name: "EXTRA_TAGS", ignored: noStatsD},
	{name: "STATS_FLUSH_INTERVAL", def: "10s", ignored: noStatsD},
	{name: "DISABLE_STATS", def: "false", ignored: noStatsD},
	{name: "USE_PROMETHEUS", def: "false", to: "with `true`: `--internal-addr` = `PROMETHEUS_ADDR`, where `/metrics` is served (with `/json` and the admin routes)"},
	{name: "PROMETHEUS_ADDR", def: ":9090", to: "`--internal-addr` (with `USE_PROMETHEUS=true`; an empty host is `0.0.0.0`)"},
	{name: "PROMETHEUS_PATH", def: "/metrics", refused: "Tollgate serves its metrics at `/metrics` only"},
	{name: "PROMETHEUS_MAPPER_YAML", ignored: "it renames the peer's StatsD names; Tollgate's metrics have their own Prometheus names (docs/operating.md)"},
	{name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", def: "false", ignored: "Tollgate's latency histograms are in seconds, as Prometheus names them"},
	{name: "RUNTIME_ROOT", def: "/srv/runtime_data/current", to: "`--envoy-config` = RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (with `CONFIG_TYPE=FILE`)"},
	{name: "RUNTIME_SUBDIRECTORY", to: "`--envoy-config` (see `RUNTIME_ROOT`)"},
	{name: "RUNTIME_APPDIRECTORY", def: "config", to: "`--envoy-config` (see `RUNTIME_ROOT`)"},
	{name: "RUNTIME_IGNOREDOTFILES", def: "false", ignored: "Tollgate always skips dot files, subfolders and files other than `*.yaml`/`*.yml`"},
	{name: "RUNTIME_WATCH_ROOT", def: "true", ignored: "either way, Tollgate watches the folder and follows every symbolic link on its path"},
	{name: "EXPIRATION_JITTER_MAX_SECONDS", def: "300", ignored: "it spreads the peer's Redis key expiries; Tollgate's keys expire with their window, decisions are the same"},
	{name: "LOCAL_CACHE_SIZE_IN_BYTES", def: "0", ignored: "the peer's cache of keys already over saves Redis calls; Tollgate asks Redis each time, the answer is the same"},
	{name: "NEAR_LIMIT_RATIO", def: "0.8", ignored: "only the peer's near-limit StatsD counter reads it"},
	{name: "CACHE_KEY_PREFIX", refused: "Tollgate names its Redis keys itself; sharing one Redis under prefixes is not supported"},
	{name: "BACKEND_TYPE", def: "redis", to: "`redis`: `--store redis`; `memcache` is refused"},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", def: "false", to: "`--envoy-stop-cache-key-increment-when-overlimit`"},
	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", def: "false", to: "`--envoy-limit-headers`"},
	{name: "LIMIT_LIMIT_HEADER", def: "RateLimit-Limit", to: "`--envoy-limit-limit-header`"},
	{name: "LIMIT_REMAINING_HEADER", def: "RateLimit-Remaining", to: "`--envoy-limit-remaining-header`"},
	{name: "LIMIT_RESET_HEADER", def: "RateLimit-Reset", to: "`--envoy-limit-reset-header`"},
	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", def: "false", refused: "Tollgate's readiness follows the store, not the rules"},
	{name: "REDIS_SOCKET_TYPE", def: "unix", to: "`tcp`: `--redis-url` from `REDIS_URL`; `unix` is refused (set `tcp`)"},
	{name: "REDIS_TYPE", def: "SINGLE", to: "`--redis-url`: `SINGLE` `redis://`, `CLUSTER` `redis+cluster://`, `SENTINEL` `redis+sentinel://`"},
	{name: "REDIS_URL", def: "/var/run/nutcracker/ratelimit.sock", to: "`--redis-url`: `host:port`; `host:port,host:port` (cluster); `master,host:port,…` (sentinel)"},
	{name: "REDIS_POOL_SIZE", def: "10", to: "`--redis-pool-size`"},
	{name: "REDIS_AUTH", to: "`--redis-url`'s `password` or `user:password`"},
	{name: "REDIS_TLS", def: "false", to: "`--redis-url` `rediss://`"},
	{name: "REDIS_TLS_CLIENT_CERT", to: "`--redis-tls-cert` (with `REDIS_TLS=true`)"},
	{name: "REDIS_TLS_CLIENT_KEY", to: "`--redis-tls-key` (with `REDIS_TLS=true`)"},
	{name: "REDIS_TLS_CACERT", to: "`--redis-tls-ca` (with `REDIS_TLS=true`)"},
	{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", def: "false", refused: "Tollgate always verifies Redis' certificate"},
	{name: "REDIS_PIPELINE_WINDOW", def: "0", ignored: pipelining},
	{name: "REDIS_PIPELINE_LIMIT", def: "0", ignored: pipelining},
	{name: "REDIS_CLUSTER_PIPELINE_PARALLELISM", def: "1", ignored: pipelining},
	{name: "REDIS_PERSECOND", def: "false", refused: "Tollgate keeps every counter in one Redis"},
	{name: "REDIS_PERSECOND_SOCKET_TYPE", def: "unix", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_TYPE", def: "SINGLE", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_URL", def: "/var/run/nutcracker/ratelimitpersecond.sock", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_POOL_SIZE", def: "10", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_AUTH", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_TLS", def: "false", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_SENTINEL_AUTH", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_PIPELINE_WINDOW", def: "0", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_PIPELINE_LIMIT", def: "0", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", def: "1", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_TIMEOUT", def: "10s", ignored: noPerSecond},
	{name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", def: "WAIT", ignored: noPerSecond},
	{name: "REDIS_SENTINEL_AUTH", refused: "Tollgate authenticates to the Sentinels with `REDIS_AUTH`'s password only"},
	{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", def: "false", ignored: "Tollgate's `/readyz` and `/healthcheck` always ask the store"},
	{name: "REDIS_TIMEOUT", def: "10s", to: "`--redis-timeout`"},
	{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", def: "WAIT", refused: "Tollgate's pool waits for a connection, as with `WAIT`"},
	{name: "REDIS_STARTUP_INITIAL_INTERVAL", def: "1s", ignored: startDegraded},
	{name: "REDIS_STARTUP_MAX_INTERVAL", def: "30s", ignored: startDegraded},
	{name: "REDIS_STARTUP_MAX_ELAPSED_TIME", def: "0", ignored: startDegraded},
	{name: "MEMCACHE_HOST_PORT", ignored: noMemcache},
	{name: "MEMCACHE_MAX_IDLE_CONNS", def: "2", ignored: noMemcache},
	{name: "MEMCACHE_SRV", ignored: noMemcache},
	{name: "MEMCACHE_SRV_REFRESH", def: "0", ignored: noMemcache},
	{name: "MEMCACHE_TLS", def: "false", ignored: noMemcache},
	{name: "MEMCACHE_TLS_CLIENT_CERT", ignored: noMemcache},
	{name: "MEMCACHE_TLS_CLIENT_KEY", ignored: noMemcache},
	{name: "MEMCACHE_TLS_CACERT", ignored: noMemcache},
	{name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", def: "false", ignored: noMemcache},
	{name: "SHADOW_MODE", def: "false", to: "`--envoy-shadow-mode`"},
	{name: "QUOTA_MODE", def: "false", to: "`--envoy-quota-mode`"},
	{name: "RESPONSE_DYNAMIC_METADATA", def: "false", to: "`--envoy-response-dynamic-metadata`"},
	{name: "MERGE_DOMAIN_CONFIG", def: "false", to: "`--envoy-merge-domain-config`"},
	{name: "TRACING_ENABLED", def: "false", to: "`--tracing`"},
	{name: "TRACING_SERVICE_NAME", def: "RateLimit", to: "the resource's `service.name`, over `OTEL_SERVICE_NAME`"},
	{name: "TRACING_SERVICE_NAMESPACE", to: "the resource's `service.namespace`, over `OTEL_RESOURCE_ATTRIBUTES`"},
	{name: "TRACING_SERVICE_INSTANCE_ID", to: "the resource's `service.instance.id`, over `OTEL_RESOURCE_ATTRIBUTES`; unset: a random UUID per process"},
	{name: "TRACING_EXPORTER_PROTOCOL", def: "http", to: "`http`: OTLP `http/protobuf`, `grpc`: OTLP `grpc`, over `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`; another is refused"},
	{name: "TRACING_SAMPLING_RATE", def: "1", to: "the sampler `parentbased_traceidratio` with this ratio (1 or more: every trace, 0 or less: none), over `OTEL_TRACES_SAMPLER(_ARG)`"},
}

// PeerTracing is what envoyproxy/ratelimit's TRACING_* variables say:
// the resource, the exporter's protocol and the sampler, each over the
// OTEL_* variables that would say it otherwise.
type PeerTracing struct {
	// ServiceName, ServiceNamespace and ServiceInstanceID are the
	// resource's service.name, service.namespace (empty: none) and
	// service.instance.id (empty: a random UUID per process).
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// Protocol is the OTLP protocol: "grpc" or "http/protobuf".
	Protocol string
	// SamplingRate is the ratio of the sampler parentbased_traceidratio,
	// in [0, 1].
	SamplingRate float64
}

// tracing reads the TRACING_* variables but TRACING_ENABLED.
func (p peerEnv) tracing() (*PeerTracing, error) {
	t := &PeerTracing{ServiceName: p.get("TRACING_SERVICE_NAME"), ServiceNamespace: p.get("TRACING_SERVICE_NAMESPACE"), ServiceInstanceID: p.get("TRACING_SERVICE_INSTANCE_ID")}
	switch v := p.get("TRACING_EXPORTER_PROTOCOL"); v {
	case "http":
		t.Protocol = "http/protobuf"
	case "grpc":
		t.Protocol = "grpc"
	default:
		return nil, &Error{Field: "TRACING_EXPORTER_PROTOCOL", Reason: fmt.Sprintf("%q is not http or grpc", v)}
	}
	rate, err := strconv.ParseFloat(p.get("TRACING_SAMPLING_RATE"), 64)
	if err != nil || math.IsNaN(rate) {
		return nil, &Error{Field: "TRACING_SAMPLING_RATE", Reason: fmt.Sprintf("%q is not a number", p.get("TRACING_SAMPLING_RATE"))}
	}
	t.SamplingRate = min(max(rate, 0), 1) // as the peer's sampler takes it
	return t, nil
}

// peerEnv is envoyproxy/ratelimit's environment read through getenv: a
// variable's value, or the peer's default when it is unset or empty.
type peerEnv struct {
	getenv func(string) string
	defs   map[string]string
}

func (p peerEnv) get(name string) string {
	if v := p.getenv(name); v != "" {
		return v
	}
	return p.defs[name]
}

func (p peerEnv) bool(name string) (bool, error) {
	b, err := strconv.ParseBool(p.get(name))
	if err != nil {
		return false, &Error{Field: name, Reason: fmt.Sprintf("%q is not a boolean", p.get(name))}
	}
	return b, nil
}

// peerSettings reads envoyproxy/ratelimit's environment through getenv
// and returns the Tollgate settings it stands for, by LIMITER_* variable,
// each checked as Tollgate checks it, an error naming the peer's variable
// otherwise, and what its TRACING_* variables say. A refused variable set
// to anything but its default is an error naming it.
func peerSettings(getenv func(string) string) (map[string]string, *PeerTracing, error) {
	p := peerEnv{getenv: getenv, defs: map[string]string{}}
	for _, v := range peerVars {
		p.defs[v.name] = v.def
		if val := getenv(v.name); v.refused != "" && val != "" && val != v.def {
			return nil, nil, &Error{Field: v.name, Reason: "refused (envoyproxy/ratelimit compatibility): " + v.refused}
		}
	}
	out := map[string]string{}
	var fail error
	put := func(name, value string, from ...string) {
		if fail != nil {
			return
		}
		for _, s := range settings {
			if s.name == name {
				if err := s.set(&Config{}, value); err != nil {
					fail = &Error{Field: strings.Join(from, ", "), Reason: err.Error()}
				}
				out[s.env()] = value
				return
			}
		}
		panic("peerenv: no setting --" + name)
	}
	flag := func(name, peer string) {
		if b, err := p.bool(peer); err != nil {
			fail = err
		} else {
			put(name, strconv.FormatBool(b), peer)
		}
	}
	put("addr", net.JoinHostPort(p.get("HOST"), p.get("PORT")), "HOST", "PORT")
	put("grpc-addr", net.JoinHostPort(p.get("GRPC_HOST"), p.get("GRPC_PORT")), "GRPC_HOST", "GRPC_PORT")
	put("log-level", strings.ToLower(p.get("LOG_LEVEL")), "LOG_LEVEL")
	put("log-format", p.get("LOG_FORMAT"), "LOG_FORMAT")
	for name, peer := range map[string]string{
		"envoy-stop-cache-key-increment-when-overlimit": "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
		"envoy-limit-headers":                           "LIMIT_RESPONSE_HEADERS_ENABLED",
		"envoy-shadow-mode":                             "SHADOW_MODE",
		"envoy-quota-mode":                              "QUOTA_MODE",
		"envoy-response-dynamic-metadata":               "RESPONSE_DYNAMIC_METADATA",
		"envoy-merge-domain-config":                     "MERGE_DOMAIN_CONFIG",
	} {
		flag(name, peer)
	}
	put("envoy-limit-limit-header", p.get("LIMIT_LIMIT_HEADER"), "LIMIT_LIMIT_HEADER")
	put("envoy-limit-remaining-header", p.get("LIMIT_REMAINING_HEADER"), "LIMIT_REMAINING_HEADER")
	put("envoy-limit-reset-header", p.get("LIMIT_RESET_HEADER"), "LIMIT_RESET_HEADER")

	switch t := strings.ToUpper(p.get("CONFIG_TYPE")); t {
	case "FILE":
		put("envoy-config", filepath.Join(p.get("RUNTIME_ROOT"), p.get("RUNTIME_SUBDIRECTORY"), p.get("RUNTIME_APPDIRECTORY")),
			"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
	case "GRPC_XDS_SOTW":
		put("envoy-xds-server", p.get("CONFIG_GRPC_XDS_SERVER_URL"), "CONFIG_GRPC_XDS_SERVER_URL")
		put("envoy-xds-node-id", p.get("CONFIG_GRPC_XDS_NODE_ID"), "CONFIG_GRPC_XDS_NODE_ID")
		if tls, err := p.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS"); err != nil || tls {
			fail = errors.Join(fail, err)
			put("envoy-xds-tls", "true", "CONFIG_GRPC_XDS_SERVER_USE_TLS")
			put("envoy-xds-tls-ca", p.get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")
			put("envoy-xds-tls-cert", p.get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
			put("envoy-xds-tls-key", p.get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
			put("envoy-xds-tls-server-name", p.get("CONFIG_GRPC_XDS_SERVER_TLS_SAN"), "CONFIG_GRPC_XDS_SERVER_TLS_SAN")
		}
	default:
		return nil, nil, &Error{Field: "CONFIG_TYPE", Reason: fmt.Sprintf("%q is refused (envoyproxy/ratelimit compatibility): Tollgate reads FILE or GRPC_XDS_SOTW", t)}
	}
	if tls, err := p.bool("GRPC_SERVER_USE_TLS"); err != nil || tls {
		fail = errors.Join(fail, err)
		put("grpc-tls-cert", p.get("GRPC_SERVER_TLS_CERT"), "GRPC_SERVER_TLS_CERT")
		put("grpc-tls-key", p.get("GRPC_SERVER_TLS_KEY"), "GRPC_SERVER_TLS_KEY")
		put("grpc-tls-client-ca", p.get("GRPC_CLIENT_TLS_CACERT"), "GRPC_CLIENT_TLS_CACERT")
	}
	if prom, err := p.bool("USE_PROMETHEUS"); err != nil || prom {
		fail = errors.Join(fail, err)
		addr := p.get("PROMETHEUS_ADDR")
		if strings.HasPrefix(addr, ":") {
			addr = "0.0.0.0" + addr
		}
		put("internal-addr", addr, "PROMETHEUS_ADDR")
	}
	if b := p.get("BACKEND_TYPE"); b != "redis" {
		return nil, nil, &Error{Field: "BACKEND_TYPE", Reason: fmt.Sprintf("%q is refused (envoyproxy/ratelimit compatibility): Tollgate's shared store is Redis", b)}
	}
	put("store", "redis", "BACKEND_TYPE")
	redisURL, err := p.redisURL()
	if err != nil {
		return nil, nil, err
	}
	put("redis-url", redisURL, "REDIS_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS")
	if tls, err := p.bool("REDIS_TLS"); err == nil && tls {
		put("redis-tls-ca", p.get("REDIS_TLS_CACERT"), "REDIS_TLS_CACERT")
		put("redis-tls-cert", p.get("REDIS_TLS_CLIENT_CERT"), "REDIS_TLS_CLIENT_CERT")
		put("redis-tls-key", p.get("REDIS_TLS_CLIENT_KEY"), "REDIS_TLS_CLIENT_KEY")
	}
	put("redis-pool-size", p.get("REDIS_POOL_SIZE"), "REDIS_POOL_SIZE")
	put("redis-timeout", p.get("REDIS_TIMEOUT"), "REDIS_TIMEOUT")
	flag("tracing", "TRACING_ENABLED")
	tracing, err := p.tracing()
	if err != nil {
		return nil, nil, err
	}
	return out, tracing, fail
}

// redisURL is Tollgate's --redis-url for the peer's REDIS_SOCKET_TYPE,
// REDIS_TYPE, REDIS_URL, REDIS_AUTH and REDIS_TLS.
func (p peerEnv) redisURL() (string, error) {
	if s := strings.ToLower(p.get("REDIS_SOCKET_TYPE")); s != "tcp" {
		return "", &Error{Field: "REDIS_SOCKET_TYPE", Reason: fmt.Sprintf("%q is refused (envoyproxy/ratelimit compatibility): Tollgate reaches Redis over TCP; set tcp and REDIS_URL host:port", s)}
	}
	tls, err := p.bool("REDIS_TLS")
	if err != nil {
		return "", err
	}
	scheme := "redis"
	if tls {
		scheme = "rediss"
	}
	u := url.URL{Path: "/"}
	if auth := p.get("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			u.User = url.UserPassword(user, pass)
		} else {
			u.User = url.UserPassword("", auth)
		}
	}
	hosts := p.get("REDIS_URL")
	switch t := strings.ToUpper(p.get("REDIS_TYPE")); t {
	case "SINGLE":
		u.Scheme, u.Path = scheme, "/0"
	case "CLUSTER":
		u.Scheme = scheme + "+cluster"
	case "SENTINEL":
		master, rest, ok := strings.Cut(hosts, ",")
		if !ok {
			return "", &Error{Field: "REDIS_URL", Reason: "REDIS_TYPE=SENTINEL needs master,host:port[,host:port…]"}
		}
		u.Scheme, u.Path, hosts = scheme+"+sentinel", "/"+master, rest
	default:
		return "", &Error{Field: "REDIS_TYPE", Reason: fmt.Sprintf("%q is not SINGLE, CLUSTER or SENTINEL", t)}
	}
	u.Host = hosts
	return u.String(), nil
}

// compatGetenv is getenv as Load reads it with --envoy-compat-env: a
// LIMITER_* variable of a setting the peer has reads the peer's value. It
// also returns what the peer's TRACING_* variables say.
func compatGetenv(getenv func(string) string) (func(string) string, *PeerTracing, error) {
	peer, tracing, err := peerSettings(getenv)
	if err != nil {
		return nil, nil, err
	}
	return func(name string) string {
		if v, ok := peer[name]; ok {
			return v
		}
		return getenv(name)
	}, tracing, nil
}
