package envoyrules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

func TestFixturesBecomePolicies(t *testing.T) {
	r, err := LoadDir(filepath.Join("testdata", "rules"), Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"edge", "messaging", "platform"}, r.Domains())
	byName := map[string]limiter.Policy{}
	for _, p := range r.Policies() {
		require.NoError(t, p.Validate())
		byName[p.Name] = p
	}
	assert.Equal(t, limiter.Policy{Name: "messaging.message_type_marketing.to", Algorithm: limiter.FixedWindow, Limit: 2, Window: 24 * time.Hour},
		byName["messaging.message_type_marketing.to"])
	assert.Equal(t, limiter.Policy{Name: "platform.api_key", Algorithm: limiter.SlidingLog, Limit: 5, Window: time.Minute},
		byName["platform.api_key"])
	assert.Equal(t, limiter.Policy{Name: "platform.tenant.plan_free", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Second, Shadow: true},
		byName["platform.tenant.plan_free"])
	assert.NotContains(t, byName, "edge.customer_banned", "a blocking limit never reaches the store")
	assert.NotContains(t, byName, "platform.internal", "nor does an unlimited one")
	assert.Len(t, byName, 14+3*7, "14 descriptors, and 7 units of limit overrides in each of 3 domains")
	assert.Equal(t, limiter.Policy{Name: "edge.limit_override_hour", Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Hour},
		byName["edge.limit_override_hour"])
}

func TestUnitsMapToWholeSecondWindows(t *testing.T) {
	for name, want := range map[string]struct {
		unit   Unit
		window time.Duration
	}{
		"second": {unitSecond, time.Second},
		"MINUTE": {unitMinute, time.Minute},
		"Hour":   {unitHour, time.Hour},
		"day":    {unitDay, 86400 * time.Second},
		"week":   {unitWeek, 7 * 86400 * time.Second},
		"month":  {unitMonth, 30 * 86400 * time.Second},
		"year":   {unitYear, 365 * 86400 * time.Second},
	} {
		r := NewRules(Options{})
		require.NoError(t, r.Add("u.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: "+name+", requests_per_unit: 7}\n")))
		l, key := r.Match("d", entries("k", "v"))
		require.NotNil(t, l, name)
		assert.Equal(t, want.unit, l.Unit, name)
		assert.Equal(t, want.window, l.Policy.Window, name)
		assert.Equal(t, limiter.Key{Subject: "k=v"}, key)
	}
}

// TestKeysAreTheEntries checks that a key names every entry and that values
// that could be confused after joining stay apart.
func TestKeysAreTheEntries(t *testing.T) {
	r := NewRules(Options{})
	require.NoError(t, r.Add("k.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n")))
	_, k1 := r.Match("d", entries("a", "x&b=y", "b", "z"))
	_, k2 := r.Match("d", entries("a", "x", "b", "y&b=z"))
	assert.Equal(t, "a=x%26b%3Dy&b=z", k1.Subject)
	assert.NotEqual(t, k1, k2)
	_, long := r.Match("d", entries("a", strings.Repeat("é", 600), "b", "z"))
	assert.True(t, strings.HasPrefix(long.Subject, "sha256:"), long.Subject)
	require.NoError(t, long.Validate())
}

func TestPolicyNamesAreHeaderSafe(t *testing.T) {
	assert.Equal(t, "shop.user_alice.path", policyName([]string{"shop", "user_alice", "path"}))
	for _, parts := range [][]string{
		{"shop", "user_élise"},
		{"shop", strings.Repeat("p", 200)},
		{"shop", "tab\there"},
	} {
		name := policyName(parts)
		assert.LessOrEqual(t, len(name), 128, name)
		for i := 0; i < len(name); i++ {
			assert.True(t, name[i] >= 0x20 && name[i] <= 0x7e, "%q", name)
		}
		assert.Equal(t, name, policyName(parts), "deterministic")
	}
	assert.NotEqual(t, policyName([]string{"s", strings.Repeat("p", 200) + "a"}), policyName([]string{"s", strings.Repeat("p", 200) + "b"}),
		"two long names that share their prefix stay apart")
}

func TestMalformedFilesAreOneLineErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"not yaml", "domain: [", `envoy: f.yaml: not valid YAML: yaml: line 1: did not find expected node content`},
		{"empty file", "", `envoy: f.yaml: domain: is required (the file is empty)`},
		{"two documents", "domain: d\n---\ndomain: e\n", `envoy: f.yaml: holds more than one YAML document (the second at line 2): only the first would be read; keep one`},
		{"no domain", "descriptors: []\n", `envoy: f.yaml: domain: is required and must not be empty (line 1)`},
		{"unknown root key", "domain: d\nlimits: []\n", `envoy: f.yaml: limits: unknown key (want one of descriptors, domain) (line 2)`},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}\n", `envoy: f.yaml: descriptors: must be a list of descriptors (line 2)`},
		{"no key", "domain: d\ndescriptors:\n  - value: a\n", `envoy: f.yaml: descriptors[0].key: is required and must not be empty (line 3)`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			`envoy: f.yaml: descriptors[0].rate_limit.unit: "fortnight" is not one of second, minute, hour, day, week, month, year (line 4)`},
		{"negative requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			`envoy: f.yaml: descriptors[0].rate_limit.requests_per_unit: -1 is outside 0..2147483648 (line 4)`},
		{"requests not a number", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: many}\n",
			`envoy: f.yaml: descriptors[0].rate_limit.requests_per_unit: must be an integer (line 4)`},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n",
			`envoy: f.yaml: descriptors[0].rate_limit.algorithm: unknown algorithm "leaky" (want one of fixed_window, sliding_log, sliding_window, token_bucket, sliding_log_unsafe) (line 4)`},
		{"unsafe algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_log_unsafe}\n",
			`envoy: f.yaml: descriptors[0].rate_limit.algorithm: sliding_log_unsafe over-admits on purpose and never protects anything (line 4)`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
			`envoy: f.yaml: descriptors[0].rate_limit.unit: an unlimited rate_limit takes no unit (line 4)`},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: a\n    limit: 3\n",
			`envoy: f.yaml: descriptors[0].limit: unknown key (want one of descriptors, detailed_metric, key, metadata, quota_mode, rate_limit, shadow_mode, share_threshold, value, value_to_metric) (line 4)`},
		{"duplicate descriptor", "domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: a\n    value: x\n",
			`envoy: f.yaml: descriptors[1]: key "a" with value "x" is already defined at descriptors[0] (line 5)`},
		{"key and value joined as another's", "domain: d\ndescriptors:\n  - key: a_b\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    value: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`envoy: f.yaml: descriptors[1]: its key and value join to "a_b", as does the descriptor at descriptors[0] (envoyproxy/ratelimit keys descriptors by that text) (line 5)`},
		{"joined as another's, no limits", "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n",
			`envoy: f.yaml: descriptors[1]: its key and value join to "a_b_c", as does the descriptor at descriptors[0] (envoyproxy/ratelimit keys descriptors by that text) (line 5)`},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: x\n    share_threshold: true\n",
			`envoy: f.yaml: descriptors[0].share_threshold: needs a wildcard value (containing '*') (line 3)`},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}\n",
			`envoy: f.yaml: descriptors[0].rate_limit.replaces: must not name this rate limit itself ("n") (line 4)`},
		{"token bucket too fine", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2000000000, algorithm: token_bucket}\n",
			`envoy: f.yaml: descriptors[0].rate_limit.requests_per_unit: token_bucket needs at least 1ns between tokens; 2000000000 per 1s is too many (line 4)`},
		{"metadata not a mapping", "domain: d\ndescriptors:\n  - key: a\n    metadata: [x]\n",
			`envoy: f.yaml: descriptors[0].metadata: must be a mapping (line 4)`},
		{"metadata key not a string", "domain: d\ndescriptors:\n  - key: a\n    metadata: {x: {[1]: 2}}\n",
			`envoy: f.yaml: descriptors[0].metadata.x: keys must be plain strings (line 4)`},
		{"metadata alias bomb", "domain: d\ndescriptors:\n  - key: a\n    metadata:\n" + aliasBomb(),
			`envoy: f.yaml: descriptors[0].metadata.l3[7][0][7][1]: metadata holds more than 10000 values (line 5)`},
		{"too deep", "domain: d\ndescriptors:\n" + nested(MaxDepth+1),
			`envoy: f.yaml: descriptors` + strings.Repeat("[0].descriptors", MaxDepth) + `: descriptors are nested deeper than 16 levels (line 35)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRules(Options{})
			err := r.Add("f.yaml", []byte(tt.yaml))
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
			assert.NotContains(t, err.Error(), "\n")
			assert.ErrorIs(t, err, ErrRules)
			assert.Empty(t, r.Domains(), "a failed file adds nothing")
		})
	}
}

// aliasBomb returns metadata lines whose aliases expand to 10^5 values.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 4; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	return b.String()
}

// nested returns depth levels of descriptors, each holding the next.
func nested(depth int) string {
	var b strings.Builder
	for i := range depth {
		pad := strings.Repeat("    ", i)
		b.WriteString(pad + "  - key: k\n")
		if i < depth-1 {
			b.WriteString(pad + "    descriptors:\n")
		}
	}
	return b.String()
}

func TestLoadDir(t *testing.T) {
	write := func(dir, name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	t.Run("duplicate domain across files", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, "a.yaml", "domain: shop\n")
		write(dir, "b.yml", "domain: shop\n")
		_, err := LoadDir(dir, Options{})
		require.ErrorIs(t, err, ErrRules)
		assert.Equal(t, "envoy: "+filepath.Join(dir, "b.yml")+`: domain: "shop" is already defined in `+filepath.Join(dir, "a.yaml")+"; --envoy-merge-domain-config merges the files of one domain (line 1)", err.Error())
	})
	t.Run("merged domain", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, "a.yaml", "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
		write(dir, "b.yaml", "domain: shop\ndescriptors:\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
		r, err := LoadDir(dir, Options{MergeDomains: true})
		require.NoError(t, err)
		assert.Equal(t, []string{"shop"}, r.Domains())
		assert.Equal(t, []string{"shop.path", "shop.user"}, policyNames(r))

		// A file that fails leaves the rules as they were.
		err = r.Add("c.yaml", []byte("domain: shop\ndescriptors:\n  - key: item\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: path\n"))
		require.ErrorIs(t, err, ErrRules)
		assert.Contains(t, err.Error(), `c.yaml: descriptors[1]: key "path" without value is already defined at `+filepath.Join(dir, "b.yaml")+": descriptors[0]")
		l, _ := r.Match("shop", entries("item", "x"))
		assert.Nil(t, l, "the failed file's first descriptor was not added")
		assert.Equal(t, []string{"shop.path", "shop.user"}, policyNames(r))
	})
	t.Run("other files are skipped", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, "a.yaml", "domain: one\n")
		write(dir, ".hidden.yaml", "not: [valid\n")
		write(dir, "notes.txt", "not: [valid\n")
		require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o700))
		r, err := LoadDir(dir, Options{})
		require.NoError(t, err)
		assert.Equal(t, []string{"one"}, r.Domains())
	})
	t.Run("missing folder", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "nope")
		_, err := LoadDir(dir, Options{})
		require.ErrorIs(t, err, ErrRules)
		assert.Equal(t, "envoy: "+dir+": cannot read the folder: no such file or directory", err.Error())
	})
	t.Run("file too large", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, "big.yaml", "domain: big\n#"+strings.Repeat("x", MaxFileBytes))
		_, err := LoadDir(dir, Options{})
		require.ErrorIs(t, err, ErrRules)
		assert.Contains(t, err.Error(), "big.yaml: larger than 4194304 bytes")
	})
}

// entries builds a descriptor's entries from key, value pairs.
func entries(kv ...string) []*ratelimitv3.RateLimitDescriptor_Entry {
	var es []*ratelimitv3.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// policyNames lists the names of the policies that descriptors derive
// (not the reserved ones of limit overrides).
func policyNames(r *Rules) []string {
	var names []string
	for _, p := range r.Policies() {
		if !strings.Contains(p.Name, ".limit_override_") {
			names = append(names, p.Name)
		}
	}
	return names
}

// FuzzRulesAdd feeds arbitrary files to the loader: it never panics, and what
// it accepts gives valid, header-safe, unique policies that Match can use.
func FuzzRulesAdd(f *testing.F) {
	for _, name := range []string{"edge.yaml", "messaging.yaml", "platform.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "rules", name))
		require.NoError(f, err)
		f.Add(data, "customer", "trial-1")
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: '*x*'\n    rate_limit: {unit: day, requests_per_unit: 0}\n"), "a", "xx")
	f.Add([]byte("domain: &a d\ndescriptors: *a\n"), "a", "")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n    metadata: {m: &m [1, {x: y}], n: *m}\n    rate_limit: {unit: day, requests_per_unit: 3}\n"), "a", "b")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		r := NewRules(Options{})
		err := r.Add("fuzz.yaml", data)
		if err != nil {
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "%T %v", err, err)
			assert.NotContains(t, err.Error(), "\n")
			return
		}
		seen := map[string]bool{}
		for _, p := range r.Policies() {
			require.NoError(t, p.Validate())
			require.False(t, seen[p.Name], "policy %q twice", p.Name)
			seen[p.Name] = true
			for i := 0; i < len(p.Name); i++ {
				require.True(t, p.Name[i] >= 0x20 && p.Name[i] <= 0x7e, "%q", p.Name)
			}
		}
		for _, d := range r.Domains() {
			if l, k := r.Match(d, entries(key, value)); l != nil && l.stored() {
				require.NoError(t, k.Validate())
				require.True(t, seen[l.Policy.Name])
			}
		}
	})
}
