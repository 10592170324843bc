package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisSettingsDefaults(t *testing.T) {
	c, err := Load(nil, env(nil))
	require.NoError(t, err)
	assert.Equal(t, 0, c.RedisPoolSize, "0 keeps go-redis's default")
	assert.Equal(t, 500*time.Millisecond, c.RedisTimeout)
	assert.Equal(t, time.Second, c.RedisBreakerCooldown)
	assert.False(t, c.RedisClientTime, "server time by default")
	assert.Empty(t, c.OnStoreError)
	for name := range c.Policies {
		assert.Equal(t, FailClosed, c.StoreErrorModeOf(name), name)
	}
}

func TestRedisClientTimeIsASwitch(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"alone means true", []string{"--redis-client-time"}, nil, true},
		{"explicit false", []string{"--redis-client-time=false"}, nil, false},
		{"flag beats env", []string{"--redis-client-time=false"}, map[string]string{"LIMITER_REDIS_CLIENT_TIME": "true"}, false},
		{"env", nil, map[string]string{"LIMITER_REDIS_CLIENT_TIME": "1"}, true},
		{"followed by another flag", []string{"--redis-client-time", "--store=redis"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.args, env(tt.env))
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.RedisClientTime)
		})
	}
}

func TestOnStoreErrorPerPolicy(t *testing.T) {
	for _, store := range []string{"redis", "sqlite", "memory"} {
		t.Run(store, func(t *testing.T) {
			path := writeYAML(t, "store: "+store+`
policies:
  ping:  { on_store_error: fail_open }
  check: { on_store_error: local, limit: 4 }
  api:   { algorithm: token_bucket, limit: 9, window: 1s, on_store_error: fail_closed }
  other: { algorithm: sliding_window, limit: 9, window: 1s }
`)
			c, err := Load([]string{"--config", path}, env(nil))
			require.NoError(t, err, "accepted whatever the store")
			assert.Equal(t, FailOpen, c.StoreErrorModeOf("ping"))
			assert.Equal(t, Local, c.StoreErrorModeOf("check"))
			assert.Equal(t, int64(4), c.Policies["check"].Limit, "the other fields still apply")
			assert.Equal(t, FailClosed, c.StoreErrorModeOf("api"))
			assert.Equal(t, FailClosed, c.StoreErrorModeOf("other"), "the default")
		})
	}
}

func TestRedisSettingErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		yaml string
		want string
	}{
		{name: "unknown mode", yaml: "policies:\n  ping: {on_store_error: maybe}\n",
			want: `config: policies.ping.on_store_error: "maybe" is not one of fail_closed, fail_open, local`},
		{name: "mode not a scalar", yaml: "policies:\n  ping: {on_store_error: [local]}\n",
			want: `config: policies.ping.on_store_error: must be a single value (line 2)`},
		{name: "negative pool", args: []string{"--redis-pool-size=-1"},
			want: `config: --redis-pool-size: "-1" is not an integer in 0..65536`},
		{name: "zero timeout", env: map[string]string{"LIMITER_REDIS_TIMEOUT": "0s"},
			want: `config: LIMITER_REDIS_TIMEOUT: "0s" is not a positive duration such as 500ms, 10s or 1m`},
		{name: "cooldown not a duration", yaml: "redis_breaker_cooldown: soon\n",
			want: `config: redis_breaker_cooldown: "soon" is not a positive duration such as 500ms, 10s or 1m`},
		{name: "client time not a bool", env: map[string]string{"LIMITER_REDIS_CLIENT_TIME": "sometimes"},
			want: `config: LIMITER_REDIS_CLIENT_TIME: "sometimes" is not true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.yaml != "" {
				args = append(args, "--config", writeYAML(t, tt.yaml))
			}
			_, err := Load(args, env(tt.env))
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestUsageExplainsRedisSettings(t *testing.T) {
	var b strings.Builder
	require.NoError(t, Usage(&b))
	for _, want := range []string{
		"--redis-pool-size", "LIMITER_REDIS_POOL_SIZE", "--redis-timeout", "default 500ms",
		"--redis-breaker-cooldown", "--redis-client-time", "Dangerous", "default false",
		"on_store_error", "fail_closed", "fail_open", "local", "N x limit", "The sqlite and memory stores accept it",
	} {
		assert.Contains(t, b.String(), want)
	}
}
