package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startLine logs c as the service's start-up line does and returns the
// line's "config" member.
func startLine(t *testing.T, c Config) (string, map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("listening", "config", c)
	var line struct{ Config map[string]any }
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
	return buf.String(), line.Config
}

func TestStartLineListsTheConfigurationWithSecretsRedacted(t *testing.T) {
	file := writeYAML(t, "policies:\n  burst: {algorithm: token_bucket, limit: 20, window: 10s, shadow: true}\n")
	c, err := Load([]string{"--config", file, "--store=redis", "--redis-url=redis://user:redis-pass-9f2@127.0.0.1:6380/1", "--offenders-window=2m"},
		env(map[string]string{AdminKeyEnv: "admin-secret-4e1"}))
	require.NoError(t, err)

	raw, got := startLine(t, c)
	for _, secret := range []string{"redis-pass-9f2", "admin-secret-4e1"} {
		assert.NotContains(t, raw, secret)
	}
	assert.Equal(t, "redis://user:xxxxx@127.0.0.1:6380/1", got["redis_url"])
	assert.Equal(t, "set", got["admin_key"])
	assert.Equal(t, "redis", got["store"])
	assert.Equal(t, file, got["file"])
	assert.Equal(t, float64(1_000_000), got["memory_max_keys"])
	assert.Equal(t, float64(2*time.Minute), got["offenders_window"], "slog's JSON handler writes durations in nanoseconds")
	assert.Equal(t, false, got["offenders_raw_keys"])
	assert.Equal(t, map[string]any{
		"api":   "fixed_window 10 per 1m0s",
		"burst": "token_bucket 20 per 10s shadow",
		"check": "sliding_log 10 per 1m0s",
		"ping":  "fixed_window 3 per 1m0s",
	}, got["policies"])
	assert.Equal(t, map[string]any{"ping": []any{"ping"}, "check": []any{"check"}}, got["routes"])

	c, err = Load(nil, env(nil))
	require.NoError(t, err)
	_, got = startLine(t, c)
	assert.Equal(t, "unset", got["admin_key"])
	assert.Equal(t, "redis://127.0.0.1:6379/0", got["redis_url"], "a URL without a password is shown as is")
}
