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
