package gateway_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/gateway"
)

func TestFirstMatchWins(t *testing.T) {
	rs, err := gateway.New([]gateway.Rule{
		{Match: gateway.Match{Method: "post", Host: "API.example.com", Path: "/login"}, Policies: []string{"login"}},
		{Match: gateway.Match{Host: "api.example.com", PathPrefix: "/api/"}, Policies: []string{"api", "burst"}, Key: gateway.Key{Kind: gateway.KeyHeader, Header: "X-Api-Key"}},
		{Match: gateway.Match{PathPrefix: "/api/"}, Policies: []string{"api"}},
		{Match: gateway.Match{Method: "GET"}, Policies: []string{"reads"}, Key: gateway.Key{Kind: gateway.KeyGlobal}},
	})
	require.NoError(t, err)
	for _, c := range []struct {
		method, host, path string
		from, want         int
	}{
		{"POST", "api.example.com", "/login", 0, 0},
		{"post", "Api.Example.com:8443", "/login", 0, 0},
		{"GET", "api.example.com", "/login", 0, 3},
		{"POST", "api.example.com", "/login/", 0, -1},
		{"PUT", "api.example.com:80", "/api/x", 0, 1},
		{"PUT", "api.example.com", "/api/x", 2, 2}, // the caller skips rule 1
		{"PUT", "www.example.com", "/api/", 0, 2},
		{"PUT", "www.example.com", "/api", 0, -1},
		{"GET", "[::1]:80", "/static/a", 0, 3},
		{"DELETE", "", "/", 0, -1},
		{"GET", "", "/", 4, -1},
	} {
		assert.Equal(t, c.want, rs.Match(c.method, c.host, c.path, c.from), "%+v", c)
	}
	assert.Equal(t, 4, rs.Len())
	assert.Equal(t, "POST", rs.Rule(0).Match.Method)
	assert.Equal(t, "api.example.com", rs.Rule(0).Match.Host)
	assert.Equal(t, []string{"api", "burst"}, rs.Rule(1).Policies)
}

func TestRequestPath(t *testing.T) {
	for target, want := range map[string]string{
		"/api/x?y=1":          "/api/x",
		"/static/../api/x":    "/api/x",
		"//api//x/":           "/api/x/",
		"/%61pi/x":            "/api/x",
		"/api/./x#frag":       "/api/x",
		"/../../api":          "/api",
		"/":                   "/",
		"/a%2Fb":              "/a/b",
		"/api/%2e%2e/static/": "/static/",
		"/api;x/items":        "/api/items",
		"/api;a=1;b/x;y/":     "/api/x/",
		"/static/..;x/api/x":  "/api/x",
		"/api%3Bx/items":      "/api;x/items",
		`/api\items`:          "/api/items",
		"/api%5Citems":        "/api/items",
		`/static\..\api\x`:    "/api/x",
	} {
		got, err := gateway.RequestPath(target)
		require.NoError(t, err, target)
		assert.Equal(t, want, got, target)
	}
	for _, target := range []string{"", "api/x", "http://h/api", "/%zz", "/a%00b", "/a%0ab", "?x"} {
		_, err := gateway.RequestPath(target)
		require.ErrorIs(t, err, gateway.ErrBadPath, target)
	}
}

// TestParseTarget: an absolute-form target (as a client sends to a proxy,
// and HAProxy passes on) names its host and its path; the origin form
// names no host.
func TestParseTarget(t *testing.T) {
	for target, want := range map[string][2]string{
		"http://limited.test/api/x?y=1":   {"limited.test", "/api/x"},
		"HTTPS://Limited.Test:8443//api/": {"Limited.Test:8443", "/api/"},
		"http://[::1]:80/a/../b":          {"[::1]:80", "/b"},
		"http://h?q":                      {"h", "/"},
		"http://h":                        {"h", "/"},
		"/api;x/items":                    {"", "/api/items"},
	} {
		host, path, err := gateway.ParseTarget(target)
		require.NoError(t, err, target)
		assert.Equal(t, want, [2]string{host, path}, target)
	}
	for _, target := range []string{"", "api/x", "ftp://h/api", "http:///api", "http://user@h/api", "http://h/%zz", "//h/api"} {
		_, path, err := gateway.ParseTarget(target)
		if target == "//h/api" { // a path that starts with two slashes
			require.NoError(t, err)
			assert.Equal(t, "/h/api", path)
			continue
		}
		require.ErrorIs(t, err, gateway.ErrBadPath, target)
	}
}

// TestMatchIgnoresSpellings: a host with a trailing dot (the absolute DNS
// name) or a port, and a path in another ASCII case, are the same as the
// rule's; the upstream serves them as the same.
func TestMatchIgnoresSpellings(t *testing.T) {
	rs, err := gateway.New([]gateway.Rule{
		{Match: gateway.Match{Host: "limited.test.", Path: "/Login"}, Policies: []string{"login"}},
		{Match: gateway.Match{Host: "limited.test", PathPrefix: "/api/"}, Policies: []string{"api"}},
	})
	require.NoError(t, err)
	for _, c := range []struct {
		host, path string
		want       int
	}{
		{"limited.test", "/login", 0},
		{"LIMITED.test.", "/LOGIN", 0},
		{"limited.test.:8080", "/API/x", 1},
		{"Limited.Test", "/Api/", 1},
		{"limited.test..", "/api/x", -1},
		{"limited.test", "/apī/x", -1},
		{"other.test", "/api/x", -1},
	} {
		assert.Equal(t, c.want, rs.Match("GET", c.host, c.path, 0), "%+v", c)
	}
}

func TestParseKey(t *testing.T) {
	for s, want := range map[string]gateway.Key{
		"client":           {Kind: gateway.KeyClient},
		"global":           {Kind: gateway.KeyGlobal},
		"header:X-Api-Key": {Kind: gateway.KeyHeader, Header: "X-Api-Key"},
	} {
		k, err := gateway.ParseKey(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, k)
		assert.Equal(t, s, k.String())
	}
	for _, s := range []string{"", "peer", "header:", "header:X Api", "header:a:b", "Client"} {
		_, err := gateway.ParseKey(s)
		assert.Error(t, err, s)
	}
}

func TestNewRefusesBadRulesNamingTheField(t *testing.T) {
	for _, c := range []struct {
		rule  gateway.Rule
		field string
	}{
		{gateway.Rule{Match: gateway.Match{Method: "GE T"}, Policies: []string{"p"}}, "match.method"},
		{gateway.Rule{Match: gateway.Match{Host: "h:80"}, Policies: []string{"p"}}, "match.host"},
		{gateway.Rule{Match: gateway.Match{Host: "a/b"}, Policies: []string{"p"}}, "match.host"},
		{gateway.Rule{Match: gateway.Match{Path: "/a", PathPrefix: "/a"}, Policies: []string{"p"}}, "match"},
		{gateway.Rule{Match: gateway.Match{Path: "a"}, Policies: []string{"p"}}, "match.path"},
		{gateway.Rule{Match: gateway.Match{PathPrefix: "/a/../b"}, Policies: []string{"p"}}, "match.path_prefix"},
		{gateway.Rule{Match: gateway.Match{PathPrefix: "/%61"}, Policies: []string{"p"}}, "match.path_prefix"},
		{gateway.Rule{}, "policies"},
		{gateway.Rule{Policies: []string{"p", "p"}}, "policies[1]"},
		{gateway.Rule{Policies: []string{""}}, "policies[0]"},
		{gateway.Rule{Policies: []string{"p"}, Key: gateway.Key{Kind: gateway.KeyHeader}}, "key"},
		{gateway.Rule{Policies: []string{"p"}, Key: gateway.Key{Kind: 9}}, "key"},
	} {
		ok := gateway.Rule{Policies: []string{"ok"}}
		_, err := gateway.New([]gateway.Rule{ok, c.rule})
		var re *gateway.RuleError
		require.ErrorAs(t, err, &re, "%+v", c.rule)
		assert.Equal(t, 1, re.Index)
		assert.Equal(t, c.field, re.Field, "%+v", c.rule)
	}
}

func TestNoRulesMatchNothing(t *testing.T) {
	rs, err := gateway.New(nil)
	require.NoError(t, err)
	assert.Equal(t, -1, rs.Match("GET", "h", "/", 0))
}

func FuzzRequestPath(f *testing.F) {
	for _, s := range []string{"/api/x?y", "/a/../b", "/%2e%2e/", "//x//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		p, err := gateway.RequestPath(target)
		if err != nil {
			return
		}
		// A clean path is its own cleaning: matching sees one form.
		again, err := gateway.RequestPath(p)
		if err == nil {
			assert.Equal(t, p, again)
		}
		assert.True(t, len(p) > 0 && p[0] == '/')
	})
}
