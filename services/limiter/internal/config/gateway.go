package config

import (
	"fmt"
	"slices"

	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/pkg/limiter/yamlwalk"
)

// checkGateway checks what the gateway rules need from the rest of the
// configuration (policyfile has checked that their policies are defined):
// none of a seed route's policies unless
// decision_api opts it in (as for /v1/check: charging it would spend
// clients' /ping or /rate/check budgets), and trusted proxies for a
// client key, without which the forwarded address is never believed and
// every request would count as the gateway's own.
func (c *Config) checkGateway() error {
	for i, r := range c.Gateway {
		path := yamlwalk.Index("gateway", i)
		for j, name := range r.Policies {
			ppath := yamlwalk.Index(path+".policies", j)
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
