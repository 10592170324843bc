package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/gateway"
)

const gatewayPolicies = `policies:
  api_gw: { algorithm: sliding_window, limit: 5, window: 60s }
  all_gw: { algorithm: fixed_window, limit: 100, window: 60s }
`

func TestLoadGatewayRules(t *testing.T) {
	file := writeYAML(t, gatewayPolicies+`trusted_proxies: [127.0.0.1]
gateway:
  - match: { method: get, host: API.example.com, path_prefix: /api/ }
    policies: [api_gw, all_gw]
    key: client
  - match: { path: /login }
    policies: [api_gw]
    key: header:X-Api-Key
  - policies: [all_gw]
    key: global
`)
	cfg, err := Load([]string{"--config", file}, env(nil))
	require.NoError(t, err)
	assert.Equal(t, []gateway.Rule{
		{Match: gateway.Match{Method: "get", Host: "API.example.com", PathPrefix: "/api/"}, Policies: []string{"api_gw", "all_gw"}, Key: gateway.Key{Kind: gateway.KeyClient}},
		{Match: gateway.Match{Path: "/login"}, Policies: []string{"api_gw"}, Key: gateway.Key{Kind: gateway.KeyHeader, Header: "X-Api-Key"}},
		{Policies: []string{"all_gw"}, Key: gateway.Key{Kind: gateway.KeyGlobal}},
	}, cfg.Gateway)

	cfg, err = Load(nil, env(nil))
	require.NoError(t, err)
	assert.Empty(t, cfg.Gateway, "no gateway section: no rule")
}

func TestLoadGatewayErrorsNameTheField(t *testing.T) {
	for name, c := range map[string]struct{ yaml, want string }{
		"not a list": {"gateway: {match: {}}\n",
			`config: gateway: must be a list of rules (- match: ..., policies: [...], key: ...) (line 4)`},
		"unknown rule key": {"gateway:\n  - {policies: [api_gw], key: global, limit: 3}\n",
			`config: gateway[0].limit: unknown key (want one of key, match, policies) (line 5)`},
		"unknown match key": {"gateway:\n  - {match: {url: /}, policies: [api_gw], key: global}\n",
			`config: gateway[0].match.url: unknown key (want one of host, method, path, path_prefix) (line 5)`},
		"no key": {"gateway:\n  - {policies: [api_gw]}\n",
			`config: gateway[0].key: missing: say what the policies count, client (the forwarded address), global or header:NAME (line 5)`},
		"bad key": {"gateway:\n  - {policies: [api_gw], key: ip}\n",
			`config: gateway[0].key: "ip": want client (the forwarded address), global or header:NAME (line 5)`},
		"no policies": {"gateway:\n  - {policies: [], key: global}\n",
			`config: gateway[0].policies: must be a non-empty list of policy names (line 5)`},
		"both paths": {"gateway:\n  - {match: {path: /a, path_prefix: /a}, policies: [api_gw], key: global}\n",
			`config: gateway[0].match: path and path_prefix are exclusive (line 5)`},
		"unclean prefix": {"gateway:\n  - {policies: [api_gw], key: global}\n  - {match: {path_prefix: /a/../b}, policies: [api_gw], key: global}\n",
			`config: gateway[1].match.path_prefix: "/a/../b" is not a clean absolute path (want one such as /api/, without ., .., //, %-escapes or a query) (line 6)`},
		"unknown policy": {"gateway:\n  - {policies: [api_gw, nope], key: global}\n",
			`config: gateway[0].policies[1]: unknown policy "nope"`},
		"seed policy": {"gateway:\n  - {policies: [ping], key: global}\n",
			`config: gateway[0].policies[0]: policy "ping" is the seed route ping's; give the gateway a policy of its own (or set decision_api: true on it to share the budget)`},
		"client without trusted proxies": {"gateway:\n  - {policies: [api_gw], key: client}\n",
			`config: gateway[0].key: client needs --trusted-proxies (the gateway's addresses): without it the forwarded address is never believed and every request counts as the gateway's`},
	} {
		_, err := Load([]string{"--config", writeYAML(t, gatewayPolicies+c.yaml)}, env(nil))
		require.ErrorIs(t, err, ErrInvalid, name)
		assert.Equal(t, c.want, err.Error(), name)
	}
	// Trusted proxies given by flag satisfy a client key in the file.
	_, err := Load([]string{"--trusted-proxies", "127.0.0.1", "--config", writeYAML(t, gatewayPolicies+"gateway:\n  - {policies: [api_gw], key: client}\n")}, env(nil))
	require.NoError(t, err)
}
