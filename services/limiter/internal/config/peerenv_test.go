package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

// Each row of peerVars says exactly one thing: what it sets, why it is
// ignored or why it is refused; a refused one stops the start naming it,
// an ignored one changes nothing in the whole loaded configuration.
func TestPeerVarsEachHonouredIgnoredOrRefused(t *testing.T) {
	base := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW"}
	get := func(extra map[string]string) func(string) string {
		return func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return base[k]
		}
	}
	plain, err := Load([]string{"--envoy-compat-env"}, get(nil))
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, v := range peerVars {
		require.False(t, seen[v.name], "%s listed twice", v.name)
		seen[v.name] = true
		kinds := 0
		for _, s := range []string{v.to, v.ignored, v.refused} {
			if s != "" {
				kinds++
			}
		}
		require.Equal(t, 1, kinds, "%s: exactly one of to, ignored, refused", v.name)
		switch {
		case v.refused != "":
			_, err := Load([]string{"--envoy-compat-env"}, get(map[string]string{v.name: "x" + v.def}))
			require.Error(t, err, v.name)
			assert.Contains(t, err.Error(), v.name)
		case v.ignored != "":
			c, err := Load([]string{"--envoy-compat-env"}, get(map[string]string{v.name: "1"}))
			require.NoError(t, err, v.name)
			assert.Equal(t, plain, c, "%s is ignored: the whole configuration is the same", v.name)
		}
	}
}

// The peer's variables and defaults set Tollgate's settings, over
// LIMITER_*; a flag wins over both.
func TestPeerEnvSetsTollgateSettings(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o750))
	env := map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_SOCKET_TYPE": "tcp",
		"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,h1:26379,h2:26379", "REDIS_AUTH": "pw", "REDIS_TLS": "true",
		"PORT": "9000", "LOG_LEVEL": "DEBUG", "SHADOW_MODE": "true", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001",
		"LIMITER_ADDR": "127.0.0.1:1", "LIMITER_MAX_KEY_BYTES": "100",
	}
	c, err := Load([]string{"--envoy-compat-env", "--grpc-addr=127.0.0.1:7"}, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:9000", c.Addr, "PORT over LIMITER_ADDR")
	assert.Equal(t, "127.0.0.1:7", c.GRPCAddr, "a flag over GRPC_HOST/GRPC_PORT's defaults")
	assert.Equal(t, "0.0.0.0:19001", c.InternalAddr)
	assert.Equal(t, filepath.Join(root, "ratelimit", "config"), c.EnvoyConfig)
	assert.Equal(t, "rediss+sentinel://:pw@h1:26379,h2:26379/mymaster", c.RedisURL)
	assert.True(t, c.EnvoyShadowMode)
	assert.Equal(t, 100, c.MaxKeyBytes, "LIMITER_* still sets what the peer lacks")

	_, err = Load([]string{"--envoy-compat-env"}, func(k string) string { return map[string]string{"BACKEND_TYPE": "memcache"}[k] })
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "BACKEND_TYPE"), err.Error())
}

// TestEachMappedPeerVarHasAnEffect: every variable peerVars maps to a
// Tollgate setting changes the loaded configuration as its row says, with
// a value other than the peer's default (the same load without it gives
// something else), so none is mapped and silently dropped. A mapped row
// with no case here fails the test. What each setting then does is tested
// with the setting itself (config_test.go for the flags and files,
// internal/app's drop-in and xDS tests for the --envoy-* behaviours,
// redisstore's for the pool and timeout); the binary started as ratelimit
// shows the main ones running (peerenv_process_test.go, and the Envoy
// Gateway test in deploy/envoygateway for CONFIG_TYPE=GRPC_XDS_SOTW, the
// xDS and gRPC TLS and USE_PROMETHEUS).
func TestEachMappedPeerVarHasAnEffect(t *testing.T) {
	ca := tlstest.NewCA(t, "peer")
	tlsFiles := tlstest.Files(t, ca.Server(t, "peer"), ca)
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub", "app"), 0o750))
	fileConfig := map[string]string{"CONFIG_TYPE": "FILE", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "sub", "RUNTIME_APPDIRECTORY": "app"}
	xdsTLS := map[string]string{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true"}
	grpcTLS := map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": tlsFiles.Cert, "GRPC_SERVER_TLS_KEY": tlsFiles.Key}
	with := func(a map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tracing := map[string]string{"TRACING_ENABLED": "true"}
	// traced reads the peer's tracing settings, nil when there are none.
	traced := func(f func(PeerTracing) any) func(Config) any {
		return func(c Config) any {
			if c.TracingPeer == nil {
				return nil
			}
			return f(*c.TracingPeer)
		}
	}
	type effect struct {
		env  map[string]string
		got  func(Config) any
		want any
		// without, when set, is what Tollgate has without the variable,
		// where the peer's default is the only value it accepts.
		without func() any
	}
	effects := map[string]effect{
		"HOST":                              {with(nil, "HOST", "127.0.0.2"), func(c Config) any { return c.Addr }, "127.0.0.2:8080", nil},
		"PORT":                              {with(nil, "PORT", "9000"), func(c Config) any { return c.Addr }, "0.0.0.0:9000", nil},
		"GRPC_HOST":                         {with(nil, "GRPC_HOST", "127.0.0.2"), func(c Config) any { return c.GRPCAddr }, "127.0.0.2:8081", nil},
		"GRPC_PORT":                         {with(nil, "GRPC_PORT", "9001"), func(c Config) any { return c.GRPCAddr }, "0.0.0.0:9001", nil},
		"GRPC_SERVER_USE_TLS":               {grpcTLS, func(c Config) any { return c.GRPCTLS.Enabled() }, true, nil},
		"GRPC_SERVER_TLS_CERT":              {grpcTLS, func(c Config) any { return c.GRPCTLS.Cert }, tlsFiles.Cert, nil},
		"GRPC_SERVER_TLS_KEY":               {grpcTLS, func(c Config) any { return c.GRPCTLS.Key }, tlsFiles.Key, nil},
		"GRPC_CLIENT_TLS_CACERT":            {with(grpcTLS, "GRPC_CLIENT_TLS_CACERT", tlsFiles.ClientCA), func(c Config) any { return c.GRPCTLS.ClientCA }, tlsFiles.ClientCA, nil},
		"LOG_LEVEL":                         {with(nil, "LOG_LEVEL", "DEBUG"), func(c Config) any { return c.LogLevel }, slog.LevelDebug, nil},
		"LOG_FORMAT":                        {with(nil, "LOG_FORMAT", "json"), func(c Config) any { return c.LogFormat }, "json", nil},
		"CONFIG_TYPE":                       {fileConfig, func(c Config) any { return c.EnvoyXDSServer }, "", nil},
		"CONFIG_GRPC_XDS_NODE_ID":           {with(nil, "CONFIG_GRPC_XDS_NODE_ID", "edge"), func(c Config) any { return c.EnvoyXDSNodeID }, "edge", nil},
		"CONFIG_GRPC_XDS_SERVER_URL":        {with(nil, "CONFIG_GRPC_XDS_SERVER_URL", "xds:18001"), func(c Config) any { return c.EnvoyXDSServer }, "xds:18001", nil},
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":    {xdsTLS, func(c Config) any { return c.EnvoyXDSTLS }, true, nil},
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":   {with(xdsTLS, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", tlsFiles.Cert), func(c Config) any { return c.EnvoyXDSTLSCert }, tlsFiles.Cert, nil},
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":    {with(xdsTLS, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", tlsFiles.Key), func(c Config) any { return c.EnvoyXDSTLSKey }, tlsFiles.Key, nil},
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": {with(xdsTLS, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", tlsFiles.ClientCA), func(c Config) any { return c.EnvoyXDSTLSCA }, tlsFiles.ClientCA, nil},
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN":    {with(xdsTLS, "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway"), func(c Config) any { return c.EnvoyXDSTLSServerName }, "envoy-gateway", nil},
		"USE_PROMETHEUS":                    {with(nil, "USE_PROMETHEUS", "true"), func(c Config) any { return c.InternalAddr }, "0.0.0.0:9090", nil},
		"PROMETHEUS_ADDR":                   {with(nil, "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", "127.0.0.1:19001"), func(c Config) any { return c.InternalAddr }, "127.0.0.1:19001", nil},
		"RUNTIME_ROOT":                      {fileConfig, func(c Config) any { return c.EnvoyConfig }, filepath.Join(root, "sub", "app"), nil},
		"RUNTIME_SUBDIRECTORY":              {fileConfig, func(c Config) any { return c.EnvoyConfig }, filepath.Join(root, "sub", "app"), nil},
		"RUNTIME_APPDIRECTORY":              {fileConfig, func(c Config) any { return c.EnvoyConfig }, filepath.Join(root, "sub", "app"), nil},
		"BACKEND_TYPE": {with(nil, "BACKEND_TYPE", "redis"), func(c Config) any { return c.Store }, StoreRedis, func() any {
			c, err := Load(nil, func(string) string { return "" })
			require.NoError(t, err)
			return c.Store // Tollgate's own default, outside the peer's environment
		}},
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": {with(nil, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"), func(c Config) any { return c.EnvoyStopIncrementWhenOverLimit }, true, nil},
		"LIMIT_RESPONSE_HEADERS_ENABLED":          {with(nil, "LIMIT_RESPONSE_HEADERS_ENABLED", "true"), func(c Config) any { return c.EnvoyLimitHeaders }, true, nil},
		"LIMIT_LIMIT_HEADER":                      {with(nil, "LIMIT_LIMIT_HEADER", "X-Limit"), func(c Config) any { return c.EnvoyLimitLimitHeader }, "X-Limit", nil},
		"LIMIT_REMAINING_HEADER":                  {with(nil, "LIMIT_REMAINING_HEADER", "X-Remaining"), func(c Config) any { return c.EnvoyLimitRemainingHeader }, "X-Remaining", nil},
		"LIMIT_RESET_HEADER":                      {with(nil, "LIMIT_RESET_HEADER", "X-Reset"), func(c Config) any { return c.EnvoyLimitResetHeader }, "X-Reset", nil},
		"REDIS_SOCKET_TYPE": {with(nil, "REDIS_SOCKET_TYPE", "TCP"), func(c Config) any { return c.RedisURL }, "redis://127.0.0.1:6379/0", func() any {
			_, err := Load([]string{"--envoy-compat-env"}, func(k string) string { return map[string]string{"REDIS_URL": "127.0.0.1:6379"}[k] })
			return err // the peer's default, unix, is refused
		}},
		"REDIS_TYPE":                  {with(nil, "REDIS_TYPE", "CLUSTER", "REDIS_URL", "h1:7000,h2:7000"), func(c Config) any { return c.RedisURL }, "redis+cluster://h1:7000,h2:7000/", nil},
		"REDIS_URL":                   {with(nil, "REDIS_URL", "redis.redis.svc:6380"), func(c Config) any { return c.RedisURL }, "redis://redis.redis.svc:6380/0", nil},
		"REDIS_POOL_SIZE":             {with(nil, "REDIS_POOL_SIZE", "7"), func(c Config) any { return c.RedisPoolSize }, 7, nil},
		"REDIS_AUTH":                  {with(nil, "REDIS_AUTH", "user:pw"), func(c Config) any { return c.RedisURL }, "redis://user:pw@127.0.0.1:6379/0", nil},
		"REDIS_TLS":                   {with(nil, "REDIS_TLS", "true"), func(c Config) any { return c.RedisURL }, "rediss://127.0.0.1:6379/0", nil},
		"REDIS_TLS_CACERT":            {with(nil, "REDIS_TLS", "true", "REDIS_TLS_CACERT", tlsFiles.ClientCA), func(c Config) any { return c.RedisTLSCA }, tlsFiles.ClientCA, nil},
		"REDIS_TLS_CLIENT_CERT":       {with(nil, "REDIS_TLS", "true", "REDIS_TLS_CLIENT_CERT", tlsFiles.Cert), func(c Config) any { return c.RedisTLSCert }, tlsFiles.Cert, nil},
		"REDIS_TLS_CLIENT_KEY":        {with(nil, "REDIS_TLS", "true", "REDIS_TLS_CLIENT_KEY", tlsFiles.Key), func(c Config) any { return c.RedisTLSKey }, tlsFiles.Key, nil},
		"REDIS_TIMEOUT":               {with(nil, "REDIS_TIMEOUT", "3s"), func(c Config) any { return c.RedisTimeout }, 3 * time.Second, nil},
		"SHADOW_MODE":                 {with(nil, "SHADOW_MODE", "true"), func(c Config) any { return c.EnvoyShadowMode }, true, nil},
		"QUOTA_MODE":                  {with(nil, "QUOTA_MODE", "true"), func(c Config) any { return c.EnvoyQuotaMode }, true, nil},
		"RESPONSE_DYNAMIC_METADATA":   {with(nil, "RESPONSE_DYNAMIC_METADATA", "true"), func(c Config) any { return c.EnvoyResponseDynamicMetadata }, true, nil},
		"MERGE_DOMAIN_CONFIG":         {with(nil, "MERGE_DOMAIN_CONFIG", "true"), func(c Config) any { return c.EnvoyMergeDomainConfig }, true, nil},
		"TRACING_ENABLED":             {tracing, func(c Config) any { return c.Tracing }, true, nil},
		"TRACING_SERVICE_NAME":        {with(tracing, "TRACING_SERVICE_NAME", "rl"), traced(func(p PeerTracing) any { return p.ServiceName }), "rl", nil},
		"TRACING_SERVICE_NAMESPACE":   {with(tracing, "TRACING_SERVICE_NAMESPACE", "edge"), traced(func(p PeerTracing) any { return p.ServiceNamespace }), "edge", nil},
		"TRACING_SERVICE_INSTANCE_ID": {with(tracing, "TRACING_SERVICE_INSTANCE_ID", "pod-1"), traced(func(p PeerTracing) any { return p.ServiceInstanceID }), "pod-1", nil},
		"TRACING_EXPORTER_PROTOCOL":   {with(tracing, "TRACING_EXPORTER_PROTOCOL", "grpc"), traced(func(p PeerTracing) any { return p.Protocol }), "grpc", nil},
		"TRACING_SAMPLING_RATE":       {with(tracing, "TRACING_SAMPLING_RATE", "0.25"), traced(func(p PeerTracing) any { return p.SamplingRate }), 0.25, nil},
	}
	base := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW"}
	load := func(extra map[string]string) Config {
		t.Helper()
		c, err := Load([]string{"--envoy-compat-env"}, func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return base[k]
		})
		require.NoError(t, err)
		return c
	}
	plain := load(nil)
	mapped := map[string]bool{}
	for _, v := range peerVars {
		if v.to == "" {
			continue
		}
		mapped[v.name] = true
		e, ok := effects[v.name]
		if !assert.True(t, ok, "%s is mapped (%s) but no effect of it is asserted: add a case", v.name, v.to) {
			continue
		}
		c := load(e.env)
		assert.Equal(t, e.want, e.got(c), v.name)
		other := e.got(plain)
		if e.without != nil {
			other = e.without()
		}
		assert.NotEqual(t, e.want, other, "%s: the value asserted is what Tollgate has without it already", v.name)
	}
	for name := range effects {
		assert.True(t, mapped[name], "%s has a case but is no mapped row of peerVars", name)
	}
}

// The peer's TRACING_* variables, with its defaults, turn tracing on and
// say the resource, the protocol and the sampler, over LIMITER_TRACING;
// a flag still wins; a protocol or rate the peer would not take stops the
// start naming the variable. Outside compat mode they say nothing.
func TestPeerTracing(t *testing.T) {
	base := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW"}
	load := func(args []string, extra map[string]string) (Config, error) {
		return Load(args, func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return base[k]
		})
	}
	c, err := load([]string{"--envoy-compat-env"}, map[string]string{"LIMITER_TRACING": "true"})
	require.NoError(t, err)
	assert.False(t, c.Tracing, "TRACING_ENABLED's default over LIMITER_TRACING")
	assert.Equal(t, &PeerTracing{ServiceName: "RateLimit", Protocol: "http/protobuf", SamplingRate: 1}, c.TracingPeer, "the peer's defaults")

	c, err = load([]string{"--envoy-compat-env"}, map[string]string{
		"TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "rl", "TRACING_SERVICE_NAMESPACE": "edge",
		"TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.25",
	})
	require.NoError(t, err)
	assert.True(t, c.Tracing)
	assert.Equal(t, &PeerTracing{ServiceName: "rl", ServiceNamespace: "edge", ServiceInstanceID: "pod-1", Protocol: "grpc", SamplingRate: 0.25}, c.TracingPeer)

	c, err = load([]string{"--envoy-compat-env", "--tracing=false"}, map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "7"})
	require.NoError(t, err)
	assert.False(t, c.Tracing, "a flag over TRACING_ENABLED")
	assert.InDelta(t, 1.0, c.TracingPeer.SamplingRate, 0, "a rate above 1 samples every trace, as the peer's sampler takes it")

	for name, value := range map[string]string{"TRACING_EXPORTER_PROTOCOL": "http/json", "TRACING_SAMPLING_RATE": "half", "TRACING_ENABLED": "yes please"} {
		_, err := load([]string{"--envoy-compat-env"}, map[string]string{name: value})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}

	c, err = load(nil, map[string]string{"TRACING_ENABLED": "true", "LIMITER_TRACING": "true"})
	require.NoError(t, err)
	assert.True(t, c.Tracing, "LIMITER_TRACING")
	assert.Nil(t, c.TracingPeer, "outside compat mode the peer's variables say nothing")
}
