package envoyrules

import (
	"fmt"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// XDSTypeURL is the xDS resource type of envoyproxy/ratelimit's
// configuration: one RateLimitConfig per domain, as one YAML file holds.
const XDSTypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// AddXDS loads the domain of one RateLimitConfig pushed by an xDS management
// server, as Add loads a file: the same fields under the same names (unit as
// its enum name, UNKNOWN meaning none), checked by the same rules, so a
// resource is accepted exactly when the YAML file it reads as would be. A
// problem is a *ConfigError naming the resource (`xds:NAME`) and the field;
// on error r is unchanged. The resource is read as the YAML nodes of its
// file, built directly (not as text: a push of MaxRules descriptors took
// gigabytes that way), and nesting past MaxDepth or descriptors past
// MaxRules are refused before anything is built.
func (r *Rules) AddXDS(c *rlsconfv3.RateLimitConfig) error {
	p := &parser{file: "xds:" + strconv.Quote(c.GetName()), rules: r, names: map[string]string{}}
	count := r.count + 1 // and its domain
	descriptors, err := xdsDescriptors(c.GetDescriptors(), "descriptors", 1, &count)
	if err != nil {
		return p.fail(err.path, nil, "%s", err.reason)
	}
	root := mapping("domain", str(c.GetDomain()))
	if descriptors != nil {
		root.Content = append(root.Content, str("descriptors"), descriptors)
	}
	return r.add(p, root)
}

// xdsError is a problem found while reading the resource, before the parser.
type xdsError struct{ path, reason string }

// xdsDescriptors returns as a YAML sequence (nil when there are none) a
// resource's descriptors at path, nested depth levels deep, the fields
// envoyproxy/ratelimit reads under their file names; deeper than MaxDepth,
// or count (the configuration's domains and descriptors so far) past
// MaxRules, is refused before any more is built.
func xdsDescriptors(ds []*rlsconfv3.RateLimitDescriptor, path string, depth int, count *int) (*yaml.Node, *xdsError) {
	if len(ds) == 0 {
		return nil, nil
	}
	if depth > MaxDepth {
		return nil, &xdsError{path, fmt.Sprintf("descriptors are nested deeper than %d levels", MaxDepth)}
	}
	out := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: make([]*yaml.Node, 0, len(ds))}
	for i, d := range ds {
		at := fmt.Sprintf("%s[%d]", path, i)
		if *count++; *count > MaxRules {
			return nil, &xdsError{at, fmt.Sprintf("more than %d domains and descriptors in the configuration", MaxRules)}
		}
		nested, err := xdsDescriptors(d.GetDescriptors(), at+".descriptors", depth+1, count)
		if err != nil {
			return nil, err
		}
		m := mapping("key", str(d.GetKey()))
		if d.GetValue() != "" {
			m.Content = append(m.Content, str("value"), str(d.GetValue()))
		}
		if rl := d.GetRateLimit(); rl != nil {
			m.Content = append(m.Content, str("rate_limit"), xdsRateLimit(rl))
		}
		if nested != nil {
			m.Content = append(m.Content, str("descriptors"), nested)
		}
		if d.GetShadowMode() {
			m.Content = append(m.Content, str("shadow_mode"), boolean(true))
		}
		out.Content = append(out.Content, m)
	}
	return out, nil
}

// xdsRateLimit is a descriptor's rate_limit as its file's YAML mapping.
func xdsRateLimit(rl *rlsconfv3.RateLimitPolicy) *yaml.Node {
	m := mapping("requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(rl.GetRequestsPerUnit()), 10)})
	if u := rl.GetUnit(); u != rlsconfv3.RateLimitUnit_UNKNOWN {
		m.Content = append(m.Content, str("unit"), str(strings.ToLower(u.String())))
	}
	if rl.GetUnlimited() {
		m.Content = append(m.Content, str("unlimited"), boolean(true))
	}
	if rl.GetName() != "" {
		m.Content = append(m.Content, str("name"), str(rl.GetName()))
	}
	if reps := rl.GetReplaces(); len(reps) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, rep := range reps {
			seq.Content = append(seq.Content, mapping("name", str(rep.GetName())))
		}
		m.Content = append(m.Content, str("replaces"), seq)
	}
	return m
}

// mapping is a YAML mapping of key to value.
func mapping(key string, value *yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{str(key), value}}
}

// str is a YAML string scalar.
func str(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }

// boolean is a YAML boolean scalar.
func boolean(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}
