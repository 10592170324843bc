package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/identity"
)

// A one-character admin key used to be accepted; wrong guesses were then
// answered thousands of times a second.
func TestShortAdminKeyRefusesToStart(t *testing.T) {
	_, err := Load(nil, env(map[string]string{AdminKeyEnv: "x"}))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "config: LIMITER_ADMIN_KEY: must be at least 16 characters (it has 1); unset it to turn the admin routes off", err.Error())
	_, err = Load(nil, env(map[string]string{AdminKeyEnv: "0123456789abcdef"}))
	require.NoError(t, err)
	_, err = Load(nil, env(map[string]string{HashSecretEnv: "short"}))
	require.ErrorIs(t, err, ErrInvalid)
	c, err := Load(nil, env(map[string]string{HashSecretEnv: "a-deployment-secret"}))
	require.NoError(t, err)
	assert.Equal(t, "a-deployment-secret", c.HashSecret)
}

func TestDecisionAPIOptIn(t *testing.T) {
	c, err := Load([]string{"--config", writeYAML(t, "policies:\n  ping: {decision_api: true}\n  check: {decision_api: false}\n")}, env(nil))
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"ping": true, "check": false}, c.DecisionAPI)
	_, err = Load([]string{"--config", writeYAML(t, "policies:\n  ping: {decision_api: maybe}\n")}, env(nil))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "policies.ping.decision_api")
}

func TestPolicyMemoryBound(t *testing.T) {
	c, err := Load([]string{"--config", writeYAML(t, "policies:\n  check: {memory_max_keys: 500}\n")}, env(nil))
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"check": 500}, c.MemoryPolicyMaxKeys)
	_, err = Load([]string{"--config", writeYAML(t, "policies:\n  check: {memory_max_keys: 0}\n")}, env(nil))
	require.ErrorIs(t, err, ErrInvalid)
}

func TestIdentitySettings(t *testing.T) {
	keys := writeYAML(t, strings.Repeat("ab", 32)+"\n") // one SHA-256 digest
	c, err := Load([]string{"--config", writeYAML(t, "ping_key: [api_key, header, peer]\nrate_key: [api_key, user]\nendpoint_fold: [all]\napi_keys_file: "+keys+"\n")}, env(nil))
	require.NoError(t, err)
	assert.Len(t, c.PingKey, 3)
	assert.Equal(t, []identity.Source{identity.APIKey, identity.User}, c.RateKey)
	c, err = Load(nil, env(nil))
	require.NoError(t, err)
	assert.Equal(t, []identity.Source{identity.User}, c.RateKey, "seed 001's X-User-Id by default")
	for _, bad := range [][]string{
		{"--internal-addr", "127.0.0.1:8080"},
		{"--identity-headers", "everyone"},
		{"--ping-key", "cookie"},
		{"--rate-key", "cookie"},
		{"--rate-key", "user,user"},
		{"--endpoint-fold", "cases"},
		{"--ipv6-prefix", "0"},
		{"--api-keys-file", "/nonexistent/keys"},
	} {
		_, err := Load(bad, env(nil))
		assert.ErrorIs(t, err, ErrInvalid, "%v", bad)
	}
}

// --ping-key api_key,peer without --api-keys-file started and listened:
// every client that sent an API key was judged against an empty key set
// (issue 35). A key source whose input is missing is refused, naming the
// setting as written; so are header and user under --identity-headers
// trusted-proxies with no trusted proxy, from whom alone they are believed.
func TestKeySourceWithoutItsInputIsRefused(t *testing.T) {
	keys := writeYAML(t, strings.Repeat("ab", 32)+"\n")
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--ping-key", "api_key,peer"}, nil,
			"config: --ping-key: api_key needs --api-keys-file (the digests of the accepted X-Api-Key values): without it every X-Api-Key would be refused (401)"},
		{nil, map[string]string{"LIMITER_RATE_KEY": "api_key,user"},
			"config: LIMITER_RATE_KEY: api_key needs --api-keys-file (the digests of the accepted X-Api-Key values): without it every X-Api-Key would be refused (401)"},
		{[]string{"--config", writeYAML(t, "ping_key: [header, peer]\nidentity_headers: trusted-proxies\n")}, nil,
			"config: ping_key: header needs --trusted-proxies under --identity-headers trusted-proxies: without a trusted proxy X-Client-Key is believed from nobody"},
		{[]string{"--identity-headers", "trusted-proxies", "--ping-key", "peer"}, nil,
			"config: --rate-key: user needs --trusted-proxies under --identity-headers trusted-proxies: without a trusted proxy X-User-Id is believed from nobody"},
	} {
		_, err := Load(tt.args, env(tt.env))
		require.ErrorIs(t, err, ErrInvalid, "%v %v", tt.args, tt.env)
		assert.Equal(t, tt.want, err.Error())
	}
	for _, ok := range [][]string{
		{"--ping-key", "api_key,peer", "--api-keys-file", keys},
		{"--identity-headers", "trusted-proxies", "--trusted-proxies", "10.0.0.0/8"},
		{"--identity-headers", "trusted-proxies", "--ping-key", "peer", "--rate-key", "api_key", "--api-keys-file", keys},
	} {
		_, err := Load(ok, env(nil))
		assert.NoError(t, err, "%v", ok)
	}
}
