package envoy

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
// on error r is unchanged.
func (r *Rules) AddXDS(c *rlsconfv3.RateLimitConfig) error {
	p := &parser{file: "xds:" + strconv.Quote(c.GetName()), rules: r, names: map[string]string{}}
	descriptors, err := xdsDescriptors(c.GetDescriptors(), "descriptors", 1)
	if err != nil {
		return p.fail(err.path, nil, "%s", err.reason)
	}
	var root yaml.Node
	if err := root.Encode(xdsRoot{Domain: c.GetDomain(), Descriptors: descriptors}); err != nil {
		return &ConfigError{File: p.file, Reason: "cannot read the resource: " + err.Error()}
	}
	return r.add(p, &root)
}

// The YAML shape of a RateLimitConfig: the fields envoyproxy/ratelimit
// reads from the resource, under their file names.
type (
	xdsRoot struct {
		Domain      string          `yaml:"domain"`
		Descriptors []xdsDescriptor `yaml:"descriptors,omitempty"`
	}
	xdsDescriptor struct {
		Key         string          `yaml:"key"`
		Value       string          `yaml:"value,omitempty"`
		RateLimit   *xdsRateLimit   `yaml:"rate_limit,omitempty"`
		Descriptors []xdsDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode  bool            `yaml:"shadow_mode,omitempty"`
	}
	xdsRateLimit struct {
		Unit            string       `yaml:"unit,omitempty"`
		RequestsPerUnit uint32       `yaml:"requests_per_unit"`
		Unlimited       bool         `yaml:"unlimited,omitempty"`
		Name            string       `yaml:"name,omitempty"`
		Replaces        []xdsReplace `yaml:"replaces,omitempty"`
	}
	xdsReplace struct {
		Name string `yaml:"name"`
	}
)

// xdsError is a problem found while reading the resource, before the parser.
type xdsError struct{ path, reason string }

// xdsDescriptors converts a resource's descriptors at path, nested depth
// levels deep; deeper than MaxDepth is refused here, before any of the
// nesting is copied.
func xdsDescriptors(ds []*rlsconfv3.RateLimitDescriptor, path string, depth int) ([]xdsDescriptor, *xdsError) {
	if len(ds) == 0 {
		return nil, nil
	}
	if depth > MaxDepth {
		return nil, &xdsError{path, fmt.Sprintf("descriptors are nested deeper than %d levels", MaxDepth)}
	}
	out := make([]xdsDescriptor, len(ds))
	for i, d := range ds {
		nested, err := xdsDescriptors(d.GetDescriptors(), fmt.Sprintf("%s[%d].descriptors", path, i), depth+1)
		if err != nil {
			return nil, err
		}
		out[i] = xdsDescriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: nested, ShadowMode: d.GetShadowMode()}
		if rl := d.GetRateLimit(); rl != nil {
			out[i].RateLimit = &xdsRateLimit{RequestsPerUnit: rl.GetRequestsPerUnit(), Unlimited: rl.GetUnlimited(), Name: rl.GetName()}
			if u := rl.GetUnit(); u != rlsconfv3.RateLimitUnit_UNKNOWN {
				out[i].RateLimit.Unit = strings.ToLower(u.String())
			}
			for _, rep := range rl.GetReplaces() {
				out[i].RateLimit.Replaces = append(out[i].RateLimit.Replaces, xdsReplace{Name: rep.GetName()})
			}
		}
	}
	return out, nil
}
