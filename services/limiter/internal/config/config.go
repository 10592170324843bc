// Package config loads the limiter service's configuration from flags,
// LIMITER_* environment variables, a YAML file and defaults, in that order of
// precedence, and validates every field before the service starts.
//
// Every problem is reported as one line naming the field as the user wrote
// it: a flag (--store), an environment variable (LIMITER_STORE) or a YAML
// path (policies.ping.limit).
package config

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/pkg/limiter/policyfile"
	"github.com/tollgate/tollgate/services/limiter/internal/canon"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
)

// Store names a storage backend.
type Store string

// The storage backends.
const (
	StoreSQLite Store = "sqlite"
	StoreMemory Store = "memory"
	StoreRedis  Store = "redis"
)

// The seed routes whose policies the configuration chooses.
const (
	RoutePing  = policyfile.RoutePing  // GET /ping and GET /status
	RouteCheck = policyfile.RouteCheck // POST /rate/check, GET /rate/status, DELETE /rate/reset
)

// Routes lists the seed routes in a stable order.
var Routes = policyfile.Routes

// AdminKeyEnv is the only way to set the admin key: never a flag (it would
// show in the process list) and never in the YAML file.
const AdminKeyEnv = "LIMITER_ADMIN_KEY"

// MinAdminKeyLen is the shortest admin key the service starts with: a key
// any shorter falls to guessing even when failed attempts are throttled.
const MinAdminKeyLen = 16

// HashSecretEnv is the only way to set the secret of the keyed hash that
// names clients in logs and in /admin/offenders: give every instance of a
// deployment the same one so that their logs agree. Unset: a random secret
// per process.
const HashSecretEnv = "LIMITER_HASH_SECRET"

// AccessLog says which requests get an access-log line.
type AccessLog string

// The access-log modes.
const (
	AccessLogOff      AccessLog = "off"
	AccessLogRefusals AccessLog = "refusals"
	AccessLogAll      AccessLog = "all"
)

// Config is the service's configuration after every source has been applied.
// A Config returned by Load is valid; it is a plain value, safe to copy.
type Config struct {
	// Live holds the settings a reload applies; every other one applies
	// only after a restart.
	Live
	Addr        string // listen address, host:port
	File        string // YAML file read, empty when none
	Store       Store
	SQLitePath  string // SQLite database file; its parent directory is created
	RedisURL    string
	GRPCAddr    string // gRPC listen address for Envoy's rate-limit API; empty: none
	EnvoyConfig string // folder of envoyproxy/ratelimit YAML files; empty: none
	// EnvoyMergeDomainConfig merges the files of one domain in EnvoyConfig
	// (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG).
	EnvoyMergeDomainConfig bool
	// EnvoyResponseDynamicMetadata returns the request and the matched
	// descriptors' metadata in dynamic_metadata (envoyproxy/ratelimit's
	// RESPONSE_DYNAMIC_METADATA).
	EnvoyResponseDynamicMetadata bool
	// EnvoyResponseHeaders adds the draft-10 RateLimit-Policy and RateLimit
	// fields, and Retry-After when over, to the Envoy answers'
	// response_headers_to_add (off: none, as envoyproxy/ratelimit's default).
	EnvoyResponseHeaders bool
	// EnvoyStopIncrementWhenOverLimit counts none of a request's
	// descriptors but those over their limit when any is (envoyproxy/
	// ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	EnvoyStopIncrementWhenOverLimit bool
	// EnvoyLimitHeaders adds envoyproxy/ratelimit's own header fields to
	// the Envoy answers (its LIMIT_RESPONSE_HEADERS_ENABLED), named by the
	// three names that follow (its LIMIT_LIMIT_HEADER,
	// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
	EnvoyLimitHeaders                                                       bool
	EnvoyLimitLimitHeader, EnvoyLimitRemainingHeader, EnvoyLimitResetHeader string
	// EnvoyQuotaMode puts every Envoy descriptor in quota mode
	// (envoyproxy/ratelimit's QUOTA_MODE).
	EnvoyQuotaMode bool
	// EnvoyShadowMode answers every Envoy request OK overall, its
	// descriptors' statuses unchanged (envoyproxy/ratelimit's SHADOW_MODE).
	EnvoyShadowMode bool
	// RedisPoolSize is the number of connections to Redis per instance; 0
	// keeps go-redis's default (10 per GOMAXPROCS).
	RedisPoolSize int
	// RedisTimeout is the I/O timeout of a call to Redis, from when it is
	// written.
	RedisTimeout time.Duration
	// RedisTLSCA, RedisTLSCert and RedisTLSKey are PEM files for a rediss
	// URL: the CAs that sign Redis' certificate (empty: the system's) and
	// the client certificate shown to a Redis that asks for one.
	RedisTLSCA, RedisTLSCert, RedisTLSKey string
	// RedisBreakerCooldown is how long the circuit breaker stays open
	// (failing fast) before it lets one probe call through.
	RedisBreakerCooldown time.Duration
	// RedisClientTime makes Redis decide with each instance's clock instead
	// of the server's TIME; instances whose clocks disagree then disagree
	// about windows, and the shared limit loosens.
	RedisClientTime bool
	// TrustedProxies lists the CIDRs (or single addresses) whose
	// X-Forwarded-For and X-Real-IP headers are believed. Empty: none.
	TrustedProxies []string
	PruneInterval  time.Duration // period of the background pruning job
	MemoryMaxKeys  int           // memory store: keys kept before evicting
	// AuditRetention is how long the SQLite store keeps api_calls rows.
	AuditRetention time.Duration
	// SQLiteDiskReserve is the size of the SQLite store's reserve file, in
	// bytes; 0: none (see sqlitestore.WithDiskReserve).
	SQLiteDiskReserve int
	// MaxKeyBytes bounds each key part as stored; longer ones are stored as
	// their digest (see limiter.KeyBound).
	MaxKeyBytes int
	// SlidingLogMaxLimit is the largest limit of a sliding_log policy.
	SlidingLogMaxLimit int
	// EnvoyXDSServer is the xDS management server (host:port) pushing the
	// Envoy rules, instead of EnvoyConfig; empty: none.
	EnvoyXDSServer string
	// EnvoyXDSNodeID is the node id this instance subscribes as.
	EnvoyXDSNodeID string
	// EnvoyXDSTLS connects to EnvoyXDSServer over TLS, verifying it with
	// the CA bundle EnvoyXDSTLSCA (empty: the system's) under the name
	// EnvoyXDSTLSServerName (empty: the address's host), presenting the
	// client certificate EnvoyXDSTLSCert and EnvoyXDSTLSKey when set.
	EnvoyXDSTLS                                                           bool
	EnvoyXDSTLSCA, EnvoyXDSTLSCert, EnvoyXDSTLSKey, EnvoyXDSTLSServerName string
	MaxHeaderBytes                                                        int // http.Server.MaxHeaderBytes, in bytes
	ReadHeaderTimeout                                                     time.Duration
	ReadTimeout                                                           time.Duration
	WriteTimeout                                                          time.Duration
	IdleTimeout                                                           time.Duration
	ShutdownTimeout                                                       time.Duration // how long in-flight requests may take to finish
	LogLevel                                                              slog.Level
	LogFormat                                                             string // "text" or "json"
	// AccessLog says which requests get an INFO line (--access-log).
	AccessLog AccessLog
	// Tracing exports OpenTelemetry traces; everything else about them is
	// read from the OTEL_* variables (internal/telemetry).
	Tracing bool
	// TracingClientKey puts the client key on the decision spans, and
	// the caller's address, the path and the user agent on the server
	// spans.
	TracingClientKey bool
	// TracingPeer is what envoyproxy/ratelimit's TRACING_* variables say,
	// over the OTEL_* variables they stand for; nil but with
	// --envoy-compat-env.
	TracingPeer *PeerTracing
	// OffendersWindow is the interval of GET /admin/offenders: it reports
	// the keys refused most in the current and the previous interval.
	OffendersWindow time.Duration
	// OffendersRawKeys makes GET /admin/offenders show client keys as sent
	// instead of the hash the access log uses. Keys can be API keys.
	OffendersRawKeys bool
	// AdminKey guards DELETE /rate/reset and GET /admin/offenders. Empty
	// means admin routes always answer 403. Never log it: see LogValue.
	AdminKey string
	// HashSecret keys the hash that names clients in logs and reports;
	// empty: random per process. Never log it.
	HashSecret string
	// InternalAddr, when set, is the listen address of the decision APIs
	// (/v1/check, POST /json), /metrics and /admin/*; Addr then serves the
	// seed routes and health only.
	InternalAddr string
	// PingKey are /ping's key sources, first that applies wins.
	PingKey []identity.Source
	// RateKey are the key sources of /rate/check and /rate/status.
	RateKey []identity.Source
	// EndpointFold are the foldings of /rate/* endpoints beyond NFC.
	EndpointFold canon.Fold
	// MaxConns bounds the open connections of each listener and
	// MaxConnsPerClient those of one client address on each; 0 derives
	// them from the descriptor limit (see app).
	MaxConns, MaxConnsPerClient int
	// MemoryRefuseWhenFull makes a full memory store refuse new keys
	// instead of evicting live ones.
	MemoryRefuseWhenFull bool
	// MemoryPolicyMaxKeys gives policies a memory-store bound of their own
	// (memory_max_keys), apart from --memory-max-keys: another policy's
	// flood of keys cannot push their state out.
	MemoryPolicyMaxKeys map[string]int
	// TLS are the PEM files of every listener's TLS (an empty Cert: plain
	// TCP); InternalTLS and GRPCTLS override them on one listener. See
	// ListenerTLS.
	TLS, InternalTLS, GRPCTLS tlsfiles.Files
	// DecisionTimeout bounds the time one request's decisions may take,
	// the wait for a turn at the store included; a request whose decision
	// could not be sent within it is shed (503 overloaded).
	DecisionTimeout time.Duration
}

// Live is what a reload changes: the settings that the configuration
// snapshot is built from, start and reload alike, and nothing else. It is
// the one owner of that list: a reload builds its snapshot from a Live
// alone, and warns that every changed setting outside it applies only
// after a restart. A setting used anywhere else (a listener, the HTTP
// engine, the store) must stay out of it, or a reload would half-apply it.
type Live struct {
	// EnvoyAllowEmptyReload lets a reload leave the Envoy folder without
	// any domain (or an xDS push leave no resource).
	EnvoyAllowEmptyReload bool
	// IdentityHeaders says who may assert an identity by header
	// (X-Client-Key, X-User-Id): any client, or trusted proxies only.
	IdentityHeaders identity.Trust
	// APIKeysFile holds the SHA-256 digests of the accepted X-Api-Key
	// values, one per line; re-read on SIGHUP. Empty: none.
	APIKeysFile string
	// APIKeysAllowEmpty lets APIKeysFile hold no digest.
	APIKeysAllowEmpty bool
	// IPv6Prefix is how many leading bits name one IPv6 client.
	IPv6Prefix int
	// DecisionAPI names the seed routes' policies that /v1/check may
	// charge anyway (decision_api: true).
	DecisionAPI map[string]bool
	// Policies by name.
	Policies map[string]limiter.Policy
	// Gateway are the rules of /v1/forward-auth, in order (first match
	// wins), validated by gateway.New; empty: every request passes.
	Gateway []gateway.Rule
	// RoutePolicies maps each of Routes to the names of its policies, in
	// evaluation order; every name is a key of Policies.
	RoutePolicies map[string][]string
	// OnStoreError maps a policy name to what its decisions become while the
	// store cannot decide; a policy left out is FailClosed (see
	// StoreErrorModeOf).
	OnStoreError map[string]StoreErrorMode
	// NearCache holds the policies' near_cache settings (see NearCacheOf).
	NearCache map[string]bool
}

// LogValue describes the configuration for a start-up log line, with the
// admin key reduced to "set" or "unset".
func (c Config) LogValue() slog.Value {
	admin := "unset"
	if c.AdminKey != "" {
		admin = "set"
	}
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.String("store", string(c.Store)),
		slog.String("sqlite_path", c.SQLitePath),
		slog.String("redis_url", redactURL(c.RedisURL)),
		slog.Int("memory_max_keys", c.MemoryMaxKeys),
		slog.Duration("audit_retention", c.AuditRetention),
		slog.Int("sqlite_disk_reserve", c.SQLiteDiskReserve),
		slog.Int("max_key_bytes", c.MaxKeyBytes),
		slog.Int("sliding_log_max_limit", c.SlidingLogMaxLimit),
		slog.String("file", c.File),
		slog.Any("trusted_proxies", c.TrustedProxies),
		slog.Duration("prune_interval", c.PruneInterval),
		slog.String("admin_key", admin),
		slog.String("internal_addr", c.InternalAddr),
		slog.String("identity_headers", c.IdentityHeaders.String()),
		slog.Any("ping_key", c.PingKey),
		slog.Any("rate_key", c.RateKey),
		slog.String("api_keys_file", c.APIKeysFile),
		slog.String("endpoint_fold", c.EndpointFold.String()),
		slog.Duration("offenders_window", c.OffendersWindow),
		slog.Bool("offenders_raw_keys", c.OffendersRawKeys),
		slog.Any("tls", c.tlsLogValue()),
		slog.Bool("tracing", c.Tracing),
		slog.Bool("tracing_client_key", c.TracingClientKey),
		slog.Any("policies", PoliciesLogValue(c.Policies)),
		slog.Any("routes", c.RoutePolicies),
	)
}

// ErrInvalid is wrapped by every configuration error; test with errors.Is.
var ErrInvalid = errors.New("invalid configuration")

// ErrHelp is returned by Load when the arguments ask for help; print Usage.
var ErrHelp = errors.New("config: help requested")

// Error is a configuration problem: the field as the user wrote it and why it
// is wrong. It unwraps to ErrInvalid.
type Error struct {
	Field  string // "--store", "LIMITER_STORE", "policies.ping.limit", ...
	Reason string
}

// Error returns the problem as one line.
func (e *Error) Error() string {
	return oneLine.Replace("config: " + e.Field + ": " + e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// Invalid returns err marked as a configuration error, for a problem found
// by another package (the Envoy rules' files): its text is err's, and both
// ErrInvalid and err are in its chain.
func Invalid(err error) error { return invalidError{err} }

type invalidError struct{ err error }

func (e invalidError) Error() string   { return e.err.Error() }
func (e invalidError) Unwrap() []error { return []error{ErrInvalid, e.err} }

// oneLine keeps an error on one line whatever a reason quotes.
var oneLine = strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ")

func fieldError(field string, err error) error {
	return &Error{Field: field, Reason: err.Error()}
}

// The policies and routes of a configuration that sets none: the seeds'.
var (
	defaultPolicies = policyfile.DefaultPolicies
	defaultRoutes   = policyfile.DefaultRoutes
)
