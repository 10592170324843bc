package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNearCachePerPolicy(t *testing.T) {
	path := writeYAML(t, `store: redis
policies:
  ping:  { near_cache: true }
  check: { near_cache: false }
  tb:    { algorithm: token_bucket, limit: 9, window: 1s }
  fw:    { algorithm: fixed_window, limit: 9, window: 1s }
`)
	c, err := Load([]string{"--config", path}, env(nil))
	require.NoError(t, err)
	assert.True(t, c.NearCacheOf(c.Policies["ping"]), "fixed_window, turned on knowingly")
	assert.False(t, c.NearCacheOf(c.Policies["check"]), "sliding_log, turned off")
	assert.True(t, c.NearCacheOf(c.Policies["tb"]), "on by default: refusals change no state")
	assert.False(t, c.NearCacheOf(c.Policies["fw"]), "off by default: refusals are counted")
	assert.Equal(t, 2*time.Second, c.DecisionTimeout, "default")

	_, err = Load([]string{"--config", writeYAML(t, "policies:\n  ping: { near_cache: maybe }\n")}, env(nil))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, `config: policies.ping.near_cache: "maybe" is not true or false`, err.Error())
}
