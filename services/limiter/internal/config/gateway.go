package config

import (
	"errors"
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/services/limiter/internal/yamlwalk"
)

// yamlGateway reads the gateway list: the rules of /v1/forward-auth, in
// order. The policies they name are checked by checkGateway, once every
// source has been applied.
func (c *Config) yamlGateway(list *yaml.Node) error {
	if yamlwalk.IsNull(list) {
		c.Gateway = nil
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return yamlwalk.Errorf("gateway", list, "must be a list of rules (- match: ..., policies: [...], key: ...)")
	}
	rules := make([]gateway.Rule, 0, len(list.Content))
	for i, item := range list.Content {
		path := yamlwalk.Index("gateway", i)
		var r gateway.Rule
		var keyGiven bool
		err := yamlwalk.Fields(item, path, map[string]yamlwalk.Handler{
			"match": func(mpath string, v *yaml.Node) error {
				fields := map[string]*string{"method": &r.Match.Method, "host": &r.Match.Host, "path_prefix": &r.Match.PathPrefix, "path": &r.Match.Path}
				handlers := make(map[string]yamlwalk.Handler, len(fields))
				for name, dst := range fields {
					handlers[name] = func(fpath string, v *yaml.Node) (err error) {
						*dst, err = yamlwalk.Scalar(fpath, v)
						return err
					}
				}
				return yamlwalk.Fields(v, mpath, handlers)
			},
			"policies": func(ppath string, v *yaml.Node) error {
				if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
					return yamlwalk.Errorf(ppath, v, "must be a non-empty list of policy names")
				}
				for j, p := range v.Content {
					name, err := yamlwalk.Scalar(yamlwalk.Index(ppath, j), p)
					if err != nil {
						return err
					}
					r.Policies = append(r.Policies, name)
				}
				return nil
			},
			"key": func(kpath string, v *yaml.Node) error {
				text, err := yamlwalk.Scalar(kpath, v)
				if err != nil {
					return err
				}
				if r.Key, err = gateway.ParseKey(text); err != nil {
					return yamlwalk.Errorf(kpath, v, "%q: want client (the forwarded address), global or header:NAME", text)
				}
				keyGiven = true
				return nil
			},
		})
		if err != nil {
			return err
		}
		if !keyGiven {
			return yamlwalk.Errorf(path+".key", item, "missing: say what the policies count, client (the forwarded address), global or header:NAME")
		}
		rules = append(rules, r)
	}
	if _, err := gateway.New(rules); err != nil {
		if re := (*gateway.RuleError)(nil); errors.As(err, &re) {
			return yamlwalk.Errorf(yamlwalk.Index("gateway", re.Index)+"."+re.Field, list.Content[re.Index], "%s", re.Reason)
		}
		return err
	}
	c.Gateway = rules
	return nil
}

// checkGateway checks what the gateway rules need from the rest of the
// configuration: every policy defined, none of a seed route's unless
// decision_api opts it in (as for /v1/check: charging it would spend
// clients' /ping or /rate/check budgets), and trusted proxies for a
// client key, without which the forwarded address is never believed and
// every request would count as the gateway's own.
func (c *Config) checkGateway() error {
	for i, r := range c.Gateway {
		path := yamlwalk.Index("gateway", i)
		for j, name := range r.Policies {
			ppath := yamlwalk.Index(path+".policies", j)
			if _, ok := c.Policies[name]; !ok {
				return &Error{Field: ppath, Reason: fmt.Sprintf("unknown policy %q", name)}
			}
			for _, route := range Routes {
				if slices.Contains(c.RoutePolicies[route], name) && !c.DecisionAPI[name] {
					return &Error{Field: ppath, Reason: fmt.Sprintf("policy %q is the seed route %s's; give the gateway a policy of its own (or set decision_api: true on it to share the budget)", name, route)}
				}
			}
		}
		if r.Key.Kind == gateway.KeyClient && len(c.TrustedProxies) == 0 {
			return &Error{Field: path + ".key", Reason: "client needs --trusted-proxies (the gateway's addresses): without it the forwarded address is never believed and every request counts as the gateway's"}
		}
	}
	return nil
}
