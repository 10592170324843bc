package envoyrules

import (
	"fmt"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestXDSResourceReadsAsItsFile: a RateLimitConfig with every field
// envoyproxy/ratelimit reads from one (nesting, unlimited, shadow_mode,
// name and replaces) gives the same policies and the same matches as the
// YAML file it stands for.
func TestXDSResourceReadsAsItsFile(t *testing.T) {
	file := NewRules(Options{})
	require.NoError(t, file.Add("shop.yaml", []byte(`
domain: shop
descriptors:
  - key: client
    descriptors:
      - key: path
        value: /cart
        rate_limit: {unit: minute, requests_per_unit: 5, name: cart}
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 100, replaces: [{name: cart}]}
        shadow_mode: true
  - key: internal
    rate_limit: {unlimited: true}
`)))
	pushed := NewRules(Options{})
	require.NoError(t, pushed.AddXDS(&rlsconfv3.RateLimitConfig{Name: "shop", Domain: "shop", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "client", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "path", Value: "/cart", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 5, Name: "cart"}},
			{Key: "path", ShadowMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 100,
				Replaces: []*rlsconfv3.RateLimitReplace{{Name: "cart"}}}},
		}},
		{Key: "internal", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
	}}))
	assert.Equal(t, file.Policies(), pushed.Policies())
	for _, entries := range [][]*ratelimitv3.RateLimitDescriptor_Entry{
		{{Key: "client", Value: "c1"}, {Key: "path", Value: "/cart"}},
		{{Key: "client", Value: "c1"}, {Key: "path", Value: "/other"}},
		{{Key: "internal", Value: "x"}},
	} {
		want, wantKey := file.Match("shop", entries)
		got, gotKey := pushed.Match("shop", entries)
		require.NotNil(t, got)
		assert.Equal(t, *want, *got)
		assert.Equal(t, wantKey, gotKey)
	}
}

// TestBadXDSResourcesNameTheField: what a file would be refused for, a
// resource is refused for, naming the resource and the field; and a
// nesting deeper than MaxDepth is refused before it is copied.
func TestBadXDSResourcesNameTheField(t *testing.T) {
	deep := &rlsconfv3.RateLimitDescriptor{Key: "k"}
	for range MaxDepth + 5 {
		deep = &rlsconfv3.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{deep}}
	}
	for _, tc := range []struct {
		config *rlsconfv3.RateLimitConfig
		want   string
	}{
		{&rlsconfv3.RateLimitConfig{Name: "n"}, `envoy: xds:"n": domain: is required and must not be empty`},
		{&rlsconfv3.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 3}},
		}}, `envoy: xds:"n": descriptors[0].rate_limit.unit: "" is not one of second, minute, hour, day, week, month, year`},
		{&rlsconfv3.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 42, RequestsPerUnit: 3}},
		}}, `envoy: xds:"n": descriptors[0].rate_limit.unit: "42" is not one of second`},
		{&rlsconfv3.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k"}, {Key: "k"}}},
			`envoy: xds:"n": descriptors[1]: key "k" without value is already defined at descriptors[0]`},
		{&rlsconfv3.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{deep}},
			`envoy: xds:"n": descriptors[0]` + strings.Repeat(".descriptors[0]", MaxDepth-1) + `.descriptors: descriptors are nested deeper than 16 levels`},
	} {
		r := NewRules(Options{})
		err := r.AddXDS(tc.config)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
		assert.Empty(t, r.Domains(), "nothing loaded")
	}
}

// TestRulesAreBounded: a configuration holds at most MaxRules domains and
// descriptors, every file and resource together; one more is refused,
// naming where, before a pushed resource is converted; the rules stay as
// they were. A pushed version of that size is read in about as many bytes
// as its protobuf encoding, not tens of times more (as YAML text).
func TestRulesAreBounded(t *testing.T) {
	limit := func(i int) *rlsconfv3.RateLimitDescriptor {
		return &rlsconfv3.RateLimitDescriptor{Key: fmt.Sprintf("k%d", i), RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 5}}
	}
	var ds []*rlsconfv3.RateLimitDescriptor
	for i := range MaxRules - 2 { // with its domain: one short of the bound
		ds = append(ds, limit(i))
	}
	r := NewRules(Options{})
	require.NoError(t, r.AddXDS(&rlsconfv3.RateLimitConfig{Name: "big", Domain: "big", Descriptors: ds}))
	assert.Equal(t, MaxRules-2+len(unitNames), len(r.Policies()), "a policy per descriptor, and the domain's overrides")

	err := r.AddXDS(&rlsconfv3.RateLimitConfig{Name: "two", Domain: "two", Descriptors: []*rlsconfv3.RateLimitDescriptor{limit(0)}})
	require.ErrorIs(t, err, ErrRules)
	assert.Equal(t, fmt.Sprintf(`envoy: xds:"two": descriptors[0]: more than %d domains and descriptors in the configuration`, MaxRules), err.Error())
	err = r.Add("f.yaml", []byte("domain: f\ndescriptors:\n  - key: k\n"))
	require.ErrorIs(t, err, ErrRules)
	assert.Equal(t, fmt.Sprintf(`envoy: f.yaml: descriptors[0]: more than %d domains and descriptors in the configuration (line 3)`, MaxRules), err.Error())
	require.NoError(t, r.Add("g.yaml", []byte("domain: g\n")), "one domain more fits")
	assert.Equal(t, []string{"big", "g"}, r.Domains())

	// One resource over the bound alone is refused as it is read.
	ds = append(ds, limit(MaxRules), limit(MaxRules+1))
	err = NewRules(Options{}).AddXDS(&rlsconfv3.RateLimitConfig{Name: "huge", Domain: "huge", Descriptors: ds})
	require.ErrorIs(t, err, ErrRules)
	assert.Contains(t, err.Error(), fmt.Sprintf("more than %d domains and descriptors", MaxRules))
}
