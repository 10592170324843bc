package policyfile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/pkg/limiter/yamlwalk"
)

func TestReadMergesDefaultsAndSkipsSettings(t *testing.T) {
	s, err := Read([]byte(`
addr: 127.0.0.1:9999          # a service setting: not read here
policies:
  ping: { limit: 30, on_store_error: open }   # a service field: accepted, not read
  login: { algorithm: sliding_log, limit: 10, window: 10m, shadow: true }
routes:
  ping: [ping, login]
gateway:
  - match: { method: post, path: /login }
    policies: [login]
    key: client
`))
	require.NoError(t, err)
	assert.Equal(t, limiter.Policy{Name: "ping", Algorithm: limiter.FixedWindow, Limit: 30, Window: time.Minute}, s.Policies["ping"])
	assert.Equal(t, limiter.Policy{Name: "login", Algorithm: limiter.SlidingLog, Limit: 10, Window: 10 * time.Minute, Shadow: true}, s.Policies["login"])
	assert.Equal(t, DefaultPolicies()["check"], s.Policies["check"])
	assert.Equal(t, []string{"ping", "login"}, s.RoutePolicies[RoutePing])
	assert.Equal(t, []string{"check"}, s.RoutePolicies[RouteCheck])
	assert.Equal(t, []gateway.Rule{{Match: gateway.Match{Method: "post", Path: "/login"}, Policies: []string{"login"}, Key: gateway.Key{Kind: gateway.KeyClient}}}, s.Gateway)
}

func TestReadErrorsNameThePath(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"policies:\n  ping: { limt: 3 }\n", "policies.ping.limt: unknown key (want algorithm, limit, window, shadow, on_store_error, decision_api, memory_max_keys, near_cache)"},
		{"policies:\n  x: { algorithm: fixed_window, limit: 0, window: 1s }\n", "policies.x.limit: 0 is outside 1..2147483648"},
		{"routes:\n  pong: [ping]\n", "routes.pong: unknown route (want one of ping, check)"},
		{"routes:\n  ping: []\n", "routes.ping: must be a non-empty list of policy names (line 2)"},
		{"gateway:\n  - policies: [nope]\n    key: global\n", `gateway[0].policies[0]: unknown policy "nope"`},
		{"gateway:\n  - policies: [ping]\n", "gateway[0].key: missing: say what the policies count, client (the forwarded address), global or header:NAME (line 2)"},
		{"gateway:\n  - match: { path: /a/../b }\n    policies: [ping]\n    key: global\n", `gateway[0].match.path: "/a/../b" is not a clean absolute path (want one such as /api/, without ., .., //, %-escapes or a query) (line 2)`},
		{"- a\n", "must be a mapping of settings (line 1)"},
	} {
		_, err := Read([]byte(tc.text))
		var we *yamlwalk.Error
		require.ErrorAs(t, err, &we, tc.text)
		assert.Equal(t, tc.want, err.Error(), tc.text)
	}
	_, err := Read([]byte("# nothing\n"))
	require.ErrorIs(t, err, yamlwalk.ErrEmpty)
}
