package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each row of peerVars says exactly one thing: what it sets, why it is
// ignored or why it is refused; a refused one stops the start naming it,
// an ignored one changes nothing.
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
			assert.Equal(t, plain.Addr, c.Addr, v.name)
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
