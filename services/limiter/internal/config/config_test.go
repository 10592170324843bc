package config

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/policyfile"
	"github.com/tollgate/tollgate/services/limiter/internal/canon"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

// env returns a getenv over a fixed map.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// writeYAML writes a config file into a fresh temp dir and returns its path.
func writeYAML(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limiter.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

func TestLoadDefaultsReproduceTheSeeds(t *testing.T) {
	c, err := Load(nil, env(nil))
	require.NoError(t, err)

	assert.Equal(t, "127.0.0.1:8080", c.Addr)
	assert.Equal(t, StoreSQLite, c.Store)
	assert.Equal(t, "./data/limiter.db", c.SQLitePath)
	assert.Equal(t, "redis://127.0.0.1:6379/0", c.RedisURL)
	assert.Empty(t, c.TrustedProxies)
	assert.Equal(t, time.Minute, c.PruneInterval)
	assert.Equal(t, 1_000_000, c.MemoryMaxKeys)
	assert.Equal(t, 16<<10, c.MaxHeaderBytes)
	assert.Equal(t, 5*time.Second, c.ReadHeaderTimeout)
	assert.Equal(t, 10*time.Second, c.ReadTimeout)
	assert.Equal(t, 10*time.Second, c.WriteTimeout)
	assert.Equal(t, 60*time.Second, c.IdleTimeout)
	assert.Equal(t, 15*time.Second, c.ShutdownTimeout)
	assert.Equal(t, slog.LevelInfo, c.LogLevel)
	assert.Equal(t, "text", c.LogFormat)
	assert.Empty(t, c.AdminKey)
	assert.Equal(t, map[string]limiter.Policy{
		"ping":  {Name: "ping", Algorithm: limiter.FixedWindow, Limit: 3, Window: 60 * time.Second},
		"check": {Name: "check", Algorithm: limiter.SlidingLog, Limit: 10, Window: 60 * time.Second},
		"api":   {Name: "api", Algorithm: limiter.FixedWindow, Limit: 10, Window: 60 * time.Second},
	}, c.Policies)
	assert.Equal(t, identity.HeadersFromAny, c.IdentityHeaders, "seed 000 believes X-Client-Key from anyone")
	assert.Equal(t, []identity.Source{identity.Header, identity.Peer}, c.PingKey)
	assert.Equal(t, 64, c.IPv6Prefix)
	assert.Empty(t, c.InternalAddr)
	assert.Equal(t, map[string][]string{"ping": {"ping"}, "check": {"check"}}, c.RoutePolicies)
}

func TestLoadPrecedence(t *testing.T) {
	file := writeYAML(t, "addr: 127.0.0.1:1001\nstore: memory\nprune_interval: 3m\n")
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		wantAddr  string
		wantStore Store
		wantPrune time.Duration
	}{
		{"defaults", nil, nil, "127.0.0.1:8080", StoreSQLite, time.Minute},
		{"yaml beats defaults", []string{"--config", file}, nil, "127.0.0.1:1001", StoreMemory, 3 * time.Minute},
		{"LIMITER_CONFIG names the file", nil, map[string]string{"LIMITER_CONFIG": file}, "127.0.0.1:1001", StoreMemory, 3 * time.Minute},
		{"env beats yaml", []string{"--config", file},
			map[string]string{"LIMITER_ADDR": "127.0.0.1:1002", "LIMITER_STORE": "sqlite", "LIMITER_PRUNE_INTERVAL": "4m"},
			"127.0.0.1:1002", StoreSQLite, 4 * time.Minute},
		{"empty env counts as unset", []string{"--config", file}, map[string]string{"LIMITER_ADDR": ""}, "127.0.0.1:1001", StoreMemory, 3 * time.Minute},
		{"flag beats env", []string{"--config", file, "--addr", "127.0.0.1:1003", "-store=memory", "--prune-interval=5m"},
			map[string]string{"LIMITER_ADDR": "127.0.0.1:1002", "LIMITER_STORE": "sqlite", "LIMITER_PRUNE_INTERVAL": "4m"},
			"127.0.0.1:1003", StoreMemory, 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.args, env(tt.env))
			require.NoError(t, err)
			assert.Equal(t, tt.wantAddr, c.Addr)
			assert.Equal(t, tt.wantStore, c.Store)
			assert.Equal(t, tt.wantPrune, c.PruneInterval)
		})
	}
}

// A setting given by flag or environment is not read from the file: the
// file's value, valid where the file is deployed (a folder under /etc), need
// not be valid where it is overridden. Values nothing overrides are still
// checked.
func TestOverriddenFileSettingsAreNotChecked(t *testing.T) {
	folder := t.TempDir()
	file := writeYAML(t, "envoy_config: /nonexistent/ratelimit\nprune_interval: 3m\n")
	for name, tt := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"env":  {[]string{"--config", file}, map[string]string{"LIMITER_ENVOY_CONFIG": folder}},
		"flag": {[]string{"--config", file, "--envoy-config", folder}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Load(tt.args, env(tt.env))
			require.NoError(t, err)
			assert.Equal(t, folder, c.EnvoyConfig)
			assert.Equal(t, 3*time.Minute, c.PruneInterval, "the rest of the file applies")
		})
	}
	_, err := Load([]string{"--config", file}, env(nil))
	require.ErrorIs(t, err, ErrInvalid)
	assert.EqualError(t, err, `config: envoy_config: "/nonexistent/ratelimit" is not a folder`)
}

func TestLoadEverySettingFromEachSource(t *testing.T) {
	// Each setting is given a non-default value through the flag, the
	// environment and the file in turn, and must land in the Config.
	envoyDir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	tlsAll, tlsInternal, tlsGRPC := tlstest.Files(t, ca.Server(t, "all"), ca), tlstest.Files(t, ca.Server(t, "internal"), ca), tlstest.Files(t, ca.Server(t, "grpc"), ca)
	apiKeys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(apiKeys, []byte("# none yet\n"), 0o600))
	values := map[string]string{
		"addr": "127.0.0.1:9", "store": "memory", "sqlite-path": "/tmp/x.db",
		"redis-url": "rediss://127.0.0.1:7000/2", "grpc-addr": "127.0.0.1:8081", "envoy-config": envoyDir,
		"trusted-proxies": "10.0.0.0/8, 192.168.1.1", "prune-interval": "90s",
		"memory-max-keys": "42", "max-header-bytes": "4096", "read-header-timeout": "1s",
		"read-timeout": "2s", "write-timeout": "3s", "idle-timeout": "4s", "shutdown-timeout": "6s",
		"log-level": "debug", "log-format": "json",
		"redis-pool-size": "7", "redis-timeout": "750ms", "redis-breaker-cooldown": "3s", "redis-client-time": "true",
		"offenders-window": "5m", "offenders-raw-keys": "true", "decision-timeout": "2s",
		"internal-addr": "127.0.0.1:10", "identity-headers": "trusted-proxies", "ping-key": "api_key, peer", "rate-key": "api_key, user",
		"api-keys-file": apiKeys, "ipv6-prefix": "56", "endpoint-fold": "case,slashes",
		"max-conns": "500", "max-conns-per-client": "50", "memory-refuse-when-full": "true",
		"envoy-merge-domain-config": "true", "envoy-response-dynamic-metadata": "true",
		"envoy-response-headers": "true", "envoy-stop-cache-key-increment-when-overlimit": "true",
		"envoy-quota-mode": "true", "envoy-shadow-mode": "true", "envoy-limit-headers": "true",
		"envoy-limit-limit-header": "X-L", "envoy-limit-remaining-header": "X-R", "envoy-limit-reset-header": "X-T",
		"audit-retention": "2h", "sqlite-disk-reserve": "1024", "max-key-bytes": "100",
		"sliding-log-max-limit": "20", "envoy-allow-empty-reload": "true", "api-keys-allow-empty": "true",
		"access-log": "refusals", "tracing": "true", "tracing-client-key": "true",
		"envoy-xds-server": "127.0.0.1:18000", "envoy-xds-node-id": "node-7", "envoy-xds-tls": "true",
		"envoy-xds-tls-ca": apiKeys, "envoy-xds-tls-cert": apiKeys, "envoy-xds-tls-key": apiKeys, "envoy-xds-tls-server-name": "xds.example",
		"tls-cert": tlsAll.Cert, "tls-key": tlsAll.Key, "tls-client-ca": tlsAll.ClientCA,
		"internal-tls-cert": tlsInternal.Cert, "internal-tls-key": tlsInternal.Key, "internal-tls-client-ca": tlsInternal.ClientCA,
		"grpc-tls-cert": tlsGRPC.Cert, "grpc-tls-key": tlsGRPC.Key, "grpc-tls-client-ca": tlsGRPC.ClientCA,
		"redis-tls-ca": tlsAll.ClientCA, "redis-tls-cert": tlsInternal.Cert, "redis-tls-key": tlsInternal.Key,
	}
	check := func(t *testing.T, c Config) {
		t.Helper()
		assert.Equal(t, "127.0.0.1:9", c.Addr)
		assert.Equal(t, StoreMemory, c.Store)
		assert.Equal(t, "/tmp/x.db", c.SQLitePath)
		assert.Equal(t, "rediss://127.0.0.1:7000/2", c.RedisURL)
		assert.Equal(t, "127.0.0.1:8081", c.GRPCAddr)
		assert.Equal(t, envoyDir, c.EnvoyConfig)
		assert.Equal(t, []string{"10.0.0.0/8", "192.168.1.1"}, c.TrustedProxies)
		assert.Equal(t, 90*time.Second, c.PruneInterval)
		assert.Equal(t, 42, c.MemoryMaxKeys)
		assert.Equal(t, 4096, c.MaxHeaderBytes)
		assert.Equal(t, []time.Duration{1 * time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 6 * time.Second},
			[]time.Duration{c.ReadHeaderTimeout, c.ReadTimeout, c.WriteTimeout, c.IdleTimeout, c.ShutdownTimeout})
		assert.Equal(t, slog.LevelDebug, c.LogLevel)
		assert.Equal(t, "json", c.LogFormat)
		assert.Equal(t, 7, c.RedisPoolSize)
		assert.Equal(t, 750*time.Millisecond, c.RedisTimeout)
		assert.Equal(t, 2*time.Second, c.DecisionTimeout)
		assert.Equal(t, 3*time.Second, c.RedisBreakerCooldown)
		assert.True(t, c.RedisClientTime)
		assert.Equal(t, 5*time.Minute, c.OffendersWindow)
		assert.True(t, c.OffendersRawKeys)
		assert.Equal(t, "127.0.0.1:10", c.InternalAddr)
		assert.Equal(t, identity.HeadersFromTrustedProxies, c.IdentityHeaders)
		assert.Equal(t, []identity.Source{identity.APIKey, identity.Peer}, c.PingKey)
		assert.Equal(t, []identity.Source{identity.APIKey, identity.User}, c.RateKey)
		assert.Equal(t, apiKeys, c.APIKeysFile)
		assert.Equal(t, 56, c.IPv6Prefix)
		assert.Equal(t, canon.FoldCase|canon.FoldSlashes, c.EndpointFold)
		assert.Equal(t, []int{500, 50}, []int{c.MaxConns, c.MaxConnsPerClient})
		assert.True(t, c.MemoryRefuseWhenFull)
		assert.True(t, c.EnvoyMergeDomainConfig)
		assert.True(t, c.EnvoyResponseDynamicMetadata)
		assert.True(t, c.EnvoyResponseHeaders)
		assert.True(t, c.EnvoyStopIncrementWhenOverLimit)
		assert.True(t, c.EnvoyQuotaMode)
		assert.True(t, c.EnvoyShadowMode)
		assert.True(t, c.EnvoyLimitHeaders)
		assert.Equal(t, []string{"X-L", "X-R", "X-T"}, []string{c.EnvoyLimitLimitHeader, c.EnvoyLimitRemainingHeader, c.EnvoyLimitResetHeader})
		assert.Equal(t, 2*time.Hour, c.AuditRetention)
		assert.Equal(t, 1024, c.SQLiteDiskReserve)
		assert.Equal(t, 100, c.MaxKeyBytes)
		assert.Equal(t, 20, c.SlidingLogMaxLimit)
		assert.True(t, c.EnvoyAllowEmptyReload)
		assert.Equal(t, []string{"127.0.0.1:18000", "node-7", apiKeys, apiKeys, apiKeys, "xds.example"},
			[]string{c.EnvoyXDSServer, c.EnvoyXDSNodeID, c.EnvoyXDSTLSCA, c.EnvoyXDSTLSCert, c.EnvoyXDSTLSKey, c.EnvoyXDSTLSServerName})
		assert.True(t, c.EnvoyXDSTLS)
		assert.True(t, c.APIKeysAllowEmpty)
		assert.Equal(t, AccessLogRefusals, c.AccessLog)
		assert.Equal(t, []bool{true, true}, []bool{c.Tracing, c.TracingClientKey})
		assert.Equal(t, []tlsfiles.Files{tlsAll, tlsInternal, tlsGRPC}, []tlsfiles.Files{c.TLS, c.InternalTLS, c.GRPCTLS})
		assert.Equal(t, []string{tlsAll.ClientCA, tlsInternal.Cert, tlsInternal.Key}, []string{c.RedisTLSCA, c.RedisTLSCert, c.RedisTLSKey})
	}
	require.Len(t, values, len(settings), "every setting has a test value")

	var args []string
	envs := map[string]string{}
	var file strings.Builder
	nested := map[string][]string{} // group -> its lines
	for _, s := range settings {
		v, ok := values[s.name]
		require.True(t, ok, s.name)
		args = append(args, "--"+s.name+"="+v)
		envs[s.env()] = v
		if group, key, ok := strings.Cut(s.yamlKey(), "."); ok {
			nested[group] = append(nested[group], fmt.Sprintf("  %s: %q\n", key, v))
			continue
		}
		fmt.Fprintf(&file, "%s: %q\n", s.yamlKey(), v)
	}
	for group, lines := range nested {
		file.WriteString(group + ":\n" + strings.Join(lines, ""))
	}
	t.Run("flags", func(t *testing.T) {
		c, err := Load(args, env(nil))
		require.NoError(t, err)
		check(t, c)
	})
	t.Run("env", func(t *testing.T) {
		c, err := Load(nil, env(envs))
		require.NoError(t, err)
		check(t, c)
	})
	t.Run("yaml", func(t *testing.T) {
		c, err := Load([]string{"--config", writeYAML(t, file.String())}, env(nil))
		require.NoError(t, err)
		check(t, c)
	})
}

func TestLoadYAMLPoliciesAndRoutes(t *testing.T) {
	path := writeYAML(t, `
store: memory
trusted_proxies: [10.0.0.0/8, "::1"]
policies:
  ping: { limit: 5 }
  daily: { algorithm: sliding_window, limit: 1000, window: 24h }
  trial: { algorithm: token_bucket, limit: 2, window: 90s, shadow: true }
routes:
  ping: [ping, daily, trial]
`)
	c, err := Load([]string{"--config", path}, env(nil))
	require.NoError(t, err)

	assert.Equal(t, path, c.File)
	assert.Equal(t, []string{"10.0.0.0/8", "::1"}, c.TrustedProxies)
	assert.Equal(t, limiter.Policy{Name: "ping", Algorithm: limiter.FixedWindow, Limit: 5, Window: time.Minute}, c.Policies["ping"],
		"a default policy named in the file keeps the fields the file leaves out")
	assert.Equal(t, limiter.Policy{Name: "daily", Algorithm: limiter.SlidingWindow, Limit: 1000, Window: 24 * time.Hour}, c.Policies["daily"])
	assert.Equal(t, limiter.Policy{Name: "trial", Algorithm: limiter.TokenBucket, Limit: 2, Window: 90 * time.Second, Shadow: true}, c.Policies["trial"])
	assert.Equal(t, []string{"ping", "daily", "trial"}, c.RoutePolicies[RoutePing])
	assert.Equal(t, []string{"check"}, c.RoutePolicies[RouteCheck], "a route the file leaves out keeps its default")
}

// A file that sets nothing is refused: read as "every default", an empty
// file (a tool caught mid-write) would reset every limit without a word. A
// second YAML document would be ignored, so it is refused too.
func TestLoadRefusesEmptyAndMultiDocumentFiles(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"empty", "", "is empty"},
		{"blank", "\n  \n", "is empty"},
		{"comments only", "# nothing\n", "is empty"},
		{"null document", "---\n", "is empty"},
		{"two documents", "policies:\n  ping: {limit: 100}\n---\npolicies:\n  ping: {limit: 1}\n", "holds more than one YAML document (the second at line 3)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := writeYAML(t, tt.yaml)
			_, err := Load([]string{"--config", file}, env(nil))
			require.ErrorIs(t, err, ErrInvalid)
			assert.ErrorContains(t, err, "config: "+file+": "+tt.want)
		})
	}
}

// A sliding_log limit over --sliding-log-max-limit is refused at load, with
// the algorithms to use instead; the other algorithms take any limit.
func TestSlidingLogLimitIsCapped(t *testing.T) {
	big := "policies:\n  hot: {algorithm: sliding_log, limit: 1000000, window: 1h}\n"
	_, err := Load([]string{"--config", writeYAML(t, big)}, env(nil))
	require.ErrorIs(t, err, ErrInvalid)
	assert.EqualError(t, err, "config: policies.hot.limit: 1000000 is over the sliding_log maximum of 5000 (--sliding-log-max-limit): a sliding_log key keeps one event per admitted request and counts them on every decision; use sliding_window (two counters, within a few percent of exact) or token_bucket (one timestamp, exact average rate) for a limit this large")

	c, err := Load([]string{"--config", writeYAML(t, big), "--sliding-log-max-limit=1000000"}, env(nil))
	require.NoError(t, err, "an operator may raise the cap")
	assert.Equal(t, int64(1_000_000), c.Policies["hot"].Limit)

	_, err = Load([]string{"--sliding-log-max-limit=5"}, env(nil))
	assert.EqualError(t, err, "config: policies.check.limit: 10 is over the sliding_log maximum of 5 (--sliding-log-max-limit): a sliding_log key keeps one event per admitted request and counts them on every decision; use sliding_window (two counters, within a few percent of exact) or token_bucket (one timestamp, exact average rate) for a limit this large",
		"the defaults are checked too")

	for _, alg := range []string{"sliding_window", "token_bucket", "fixed_window"} {
		_, err := Load([]string{"--config", writeYAML(t, "policies:\n  hot: {algorithm: "+alg+", limit: 1000000, window: 1h}\n")}, env(nil))
		assert.NoError(t, err, alg)
	}
}

func TestLoadErrorsAreOneLineNamingTheField(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		yaml string // written to a file and passed with --config when set
		want string // the whole error line
	}{
		{name: "unknown store flag", args: []string{"--store", "etcd"},
			want: `config: --store: "etcd" is not one of sqlite, memory, redis`},
		{name: "unknown store env", env: map[string]string{"LIMITER_STORE": "etcd"},
			want: `config: LIMITER_STORE: "etcd" is not one of sqlite, memory, redis`},
		{name: "unknown store yaml", yaml: "store: etcd\n",
			want: `config: store: "etcd" is not one of sqlite, memory, redis`},
		{name: "limit zero", yaml: "policies:\n  ping: {limit: 0}\n",
			want: `config: policies.ping.limit: 0 is outside 1..2147483648`},
		{name: "limit negative", yaml: "policies:\n  check: {limit: -1}\n",
			want: `config: policies.check.limit: -1 is outside 1..2147483648`},
		{name: "limit not a number", yaml: "policies:\n  ping: {limit: lots}\n",
			want: `config: policies.ping.limit: "lots" is not an integer`},
		{name: "window zero", yaml: "policies:\n  ping: {window: 0s}\n",
			want: `config: policies.ping.window: 0s is outside 1s..8784h0m0s`},
		{name: "window negative", yaml: "policies:\n  ping: {window: -5s}\n",
			want: `config: policies.ping.window: -5s is outside 1s..8784h0m0s`},
		{name: "window fraction", yaml: "policies:\n  ping: {window: 1500ms}\n",
			want: `config: policies.ping.window: 1.5s is not a whole number of seconds`},
		{name: "unknown algorithm", yaml: "policies:\n  ping: {algorithm: leaky}\n",
			want: `config: policies.ping.algorithm: unknown algorithm "leaky" (want one of fixed_window, sliding_log, sliding_window, token_bucket, sliding_log_unsafe)`},
		{name: "new policy without algorithm", yaml: "policies:\n  extra: {limit: 3, window: 1m}\n",
			want: `config: policies.extra.algorithm: unknown algorithm "" (want one of fixed_window, sliding_log, sliding_window, token_bucket, sliding_log_unsafe)`},
		{name: "unknown top-level key", yaml: "addr: 127.0.0.1:1\nlisten: 1\n",
			want: `config: listen: unknown key (line 2)`},
		{name: "unknown policy key", yaml: "policies:\n  ping: {limit: 3, burst: 9}\n",
			want: `config: policies.ping.burst: unknown key (want algorithm, limit, window, shadow, on_store_error, decision_api, memory_max_keys, near_cache)`},
		{name: "repeated key", yaml: "store: memory\nstore: sqlite\n",
			want: `config: store: key given twice (line 2)`},
		{name: "unknown policy in routes", yaml: "routes:\n  ping: [ping, nope]\n",
			want: `config: routes.ping[1]: unknown policy "nope"`},
		{name: "unknown route", yaml: "routes:\n  pong: [ping]\n",
			want: `config: routes.pong: unknown route (want one of ping, check)`},
		{name: "empty route", yaml: "routes:\n  ping: []\n",
			want: `config: routes.ping: must be a non-empty list of policy names (line 2)`},
		{name: "policy twice in a route", yaml: "routes:\n  check: [check, check]\n",
			want: `config: routes.check[1]: policy "check" is listed twice`},
		{name: "policy name not printable", yaml: "policies:\n  \"a\\tb\": {algorithm: fixed_window, limit: 1, window: 1s}\n",
			want: `config: policies: policy name "a\tb" must be printable ASCII`},
		{name: "yaml not a mapping", yaml: "- a\n- b\n",
			want: `config: FILE: must be a mapping of settings`},
		{name: "bad duration env", env: map[string]string{"LIMITER_READ_TIMEOUT": "soon"},
			want: `config: LIMITER_READ_TIMEOUT: "soon" is not a positive duration such as 500ms, 10s or 1m`},
		{name: "zero duration flag", args: []string{"--shutdown-timeout=0s"},
			want: `config: --shutdown-timeout: "0s" is not a positive duration such as 500ms, 10s or 1m`},
		{name: "max keys out of range", args: []string{"--memory-max-keys=0"},
			want: `config: --memory-max-keys: "0" is not an integer in 1..2147483648`},
		{name: "bad trusted proxy", args: []string{"--trusted-proxies=10.0.0.0/8,example.com"},
			want: `config: --trusted-proxies: "example.com" is not a CIDR or an IP address`},
		{name: "addr without port", args: []string{"--addr=localhost"},
			want: `config: --addr: "localhost" is not host:port`},
		{name: "redis url password redacted", args: []string{"--redis-url=http://u:secret@h"},
			want: `config: --redis-url: "http://u:xxxxx@h" is not a Redis URL: redis[s]://host:port[/db], redis[s]+cluster://host:port[,host:port...]/ or redis[s]+sentinel://host:port[,host:port...]/MASTER[/db]`},
		{name: "redis url with a '#' in the password", args: []string{"--redis-url=redis://:12#s3cret@db.example:6379"},
			want: `config: --redis-url: "redis://:12": redisstore: URL: a '#' ends a URL: write a '#' of the user or password as %23: invalid configuration`},
		{name: "log level", args: []string{"--log-level=loud"},
			want: `config: --log-level: "loud" is not one of debug, info, warn, error`},
		{name: "log format", env: map[string]string{"LIMITER_LOG_FORMAT": "xml"},
			want: `config: LIMITER_LOG_FORMAT: "xml" is not one of text, json`},
		{name: "grpc addr without port", args: []string{"--grpc-addr=127.0.0.1"},
			want: `config: --grpc-addr: "127.0.0.1" is not host:port`},
		{name: "envoy header name not a token", args: []string{"--envoy-limit-reset-header=Reset In"},
			want: `config: --envoy-limit-reset-header: "Reset In" is not an HTTP header field name`},
		{name: "envoy config not a folder", env: map[string]string{"LIMITER_ENVOY_CONFIG": "/nonexistent/ratelimit"},
			want: `config: LIMITER_ENVOY_CONFIG: "/nonexistent/ratelimit" is not a folder`},
		{name: "unknown flag", args: []string{"--admin-key=x"},
			want: `config: arguments: flag provided but not defined: -admin-key`},
		{name: "positional argument", args: []string{"serve"},
			want: `config: arguments: unexpected argument "serve" (every option is a --flag)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			want := tt.want
			if tt.yaml != "" {
				path := writeYAML(t, tt.yaml)
				args = append([]string{"--config", path}, args...)
				want = strings.ReplaceAll(want, "FILE", path)
			}
			_, err := Load(args, env(tt.env))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, want, err.Error())
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestLoadUnreadableOrBrokenFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load([]string{"--config", missing}, env(nil))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "config: --config: open "+missing+": no such file or directory", err.Error())

	_, err = Load(nil, env(map[string]string{"LIMITER_CONFIG": missing}))
	require.ErrorIs(t, err, ErrInvalid)
	assert.True(t, strings.HasPrefix(err.Error(), "config: LIMITER_CONFIG: "), err.Error())

	broken := writeYAML(t, "policies: {ping: [\n")
	_, err = Load([]string{"--config", broken}, env(nil))
	require.ErrorIs(t, err, ErrInvalid)
	assert.True(t, strings.HasPrefix(err.Error(), "config: "+broken+": yaml: "), err.Error())
	assert.NotContains(t, err.Error(), "\n")
}

func TestAdminKeyIsEnvOnlyAndNeverLogged(t *testing.T) {
	const key = "s3cret-admin-key"
	file := writeYAML(t, "admin_key: "+key+"\n")
	_, err := Load([]string{"--config", file}, env(nil))
	require.ErrorIs(t, err, ErrInvalid, "the file cannot carry the admin key")

	c, err := Load(nil, env(map[string]string{AdminKeyEnv: key}))
	require.NoError(t, err)
	assert.Equal(t, key, c.AdminKey)

	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("start", "config", c)
	assert.NotContains(t, buf.String(), key)
	assert.Contains(t, buf.String(), "config.admin_key=set")

	buf.Reset()
	c.AdminKey = ""
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("start", "config", c)
	assert.Contains(t, buf.String(), `"admin_key":"unset"`)
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		_, err := Load([]string{arg}, env(nil))
		assert.ErrorIs(t, err, ErrHelp, arg)
	}
	var buf bytes.Buffer
	require.NoError(t, Usage(&buf))
	text := buf.String()
	for _, s := range append([]setting{configSetting}, settings...) {
		assert.Contains(t, text, "--"+s.name+"\n", s.name)
		assert.Contains(t, text, "env "+s.env()+", default ", s.name)
		assert.Contains(t, text, s.help, s.name)
	}
	for _, want := range []string{AdminKeyEnv, "default 127.0.0.1:8080", "default ./data/limiter.db", "default 1m", "default 16384", "envoy.service.ratelimit.v3"} {
		assert.Contains(t, text, want)
	}
}

// FuzzLoadYAML feeds arbitrary files to Load: it never panics, and either
// returns a valid configuration or one error line starting with "config: ".
func FuzzLoadYAML(f *testing.F) {
	for _, seed := range []string{
		"",
		"addr: 127.0.0.1:1\nstore: memory\n",
		"policies:\n  ping: {algorithm: fixed_window, limit: 3, window: 60s}\n",
		"policies:\n  x: {algorithm: token_bucket, limit: 2147483648, window: 1s, shadow: true}\nroutes:\n  ping: [x]\n",
		"routes: {check: [ping, check]}\n",
		"policies: {ping: {limit: 99999999999999999999}}\n",
		"trusted_proxies: [1.2.3.4, 10.0.0.0/8]\n",
		"&a [*a]",
		"policies: !!map {? [a]: b}\n",
		"- 1\n",
		"policies:\n  ping: {window: 9223372036854775807ns}\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		path := filepath.Join(t.TempDir(), "f.yaml")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
		c, err := Load([]string{"--config", path}, env(nil))
		if err != nil {
			assert.ErrorIs(t, err, ErrInvalid)
			assert.True(t, strings.HasPrefix(err.Error(), "config: "), err.Error())
			assert.NotContains(t, err.Error(), "\n")
			return
		}
		for name, p := range c.Policies {
			assert.NoError(t, p.Validate(), name)
			assert.NoError(t, policyfile.ValidateName(name))
		}
		for _, r := range Routes {
			require.NotEmpty(t, c.RoutePolicies[r])
			for _, n := range c.RoutePolicies[r] {
				assert.Contains(t, c.Policies, n)
			}
		}
	})
}
