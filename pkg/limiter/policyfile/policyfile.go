// Package policyfile reads the rate-limit part of a Tollgate configuration
// file: the policies, the policies of the seed routes and the gateway rules
// of forward-auth, into limiter.Policy values and gateway.Rule lists. The
// service reads its configuration file with it, and so does a tool that
// replays traffic through a configuration (the lab's whatif), so both
// understand a file the same way.
//
// Reading is strict: an unknown or repeated key, a value of the wrong kind
// and an invalid policy or rule are *yamlwalk.Error values naming the
// field's dotted path (policies.ping.limit, gateway[0].key) and, where
// known, its line. The file's other keys (the service's settings) are left
// to the caller.
package policyfile

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/pkg/limiter/yamlwalk"
)

// The seed routes whose policies a file chooses.
const (
	RoutePing  = "ping"  // GET /ping (and GET /status, which reads it)
	RouteCheck = "check" // POST /rate/check (and GET /rate/status, DELETE /rate/reset)
)

// Routes lists the seed routes in a stable order.
var Routes = []string{RoutePing, RouteCheck}

// ServiceFields are the policy keys that the service reads and that a
// limiter.Policy does not hold, in the order error messages list them.
var ServiceFields = []string{"on_store_error", "decision_api", "memory_max_keys", "near_cache"}

// policyFields are the keys of a policy that a limiter.Policy holds.
var policyFields = []string{"algorithm", "limit", "window", "shadow"}

// DefaultPolicies reproduce docs/seeds.md: 3 per minute on /ping (fixed
// window, seed 000) and 10 per minute on /rate/check (sliding log, seed
// 001); and api, 10 per minute, for /v1/check, which may not charge the
// seed routes' policies.
func DefaultPolicies() map[string]limiter.Policy {
	return map[string]limiter.Policy{
		"ping":  {Name: "ping", Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Minute},
		"check": {Name: "check", Algorithm: limiter.SlidingLog, Limit: 10, Window: time.Minute},
		"api":   {Name: "api", Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Minute},
	}
}

// DefaultRoutes gives each seed route its default policy.
func DefaultRoutes() map[string][]string {
	return map[string][]string{RoutePing: {"ping"}, RouteCheck: {"check"}}
}

// Set is what a file says about rate limits.
type Set struct {
	// Policies by name.
	Policies map[string]limiter.Policy
	// RoutePolicies maps each of Routes to the names of its policies, in
	// evaluation order; every name is a key of Policies.
	RoutePolicies map[string][]string
	// Gateway are the forward-auth rules, in order (first match wins),
	// validated by gateway.New; empty: every request passes.
	Gateway []gateway.Rule
}

// Defaults returns the set a file without policies, routes or gateway
// describes.
func Defaults() *Set {
	return &Set{Policies: DefaultPolicies(), RoutePolicies: DefaultRoutes()}
}

// ServiceField reads the value text of key field (one of ServiceFields) of
// policy name.
type ServiceField func(name, field, text string) error

// Read returns the defaults overridden by the policies, routes and gateway
// rules of the YAML file data; the file's other keys are not read. The
// service's settings among a policy's keys (ServiceFields) are accepted and
// not read either.
func Read(data []byte) (*Set, error) {
	root, err := yamlwalk.OneDocument(data)
	if err != nil {
		return nil, err
	}
	s := Defaults()
	err = s.Walk(root, nil, func(string, *yaml.Node, *yaml.Node) error { return nil })
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Walk reads the mapping root over s: its policies (service reads the
// ServiceFields; nil accepts them unread), then its routes, then its
// gateway rules, whatever their order in the file, and checks that the
// rules name defined policies. other is called with every other key of
// root, in file order, and may stop the walk with an error.
func (s *Set) Walk(root *yaml.Node, service ServiceField, other func(path string, k, v *yaml.Node) error) error {
	if root.Kind != yaml.MappingNode {
		return yamlwalk.Errorf("", root, "must be a mapping of settings")
	}
	var routes, gw *yaml.Node
	err := yamlwalk.Mapping(root, "", func(path string, k, v *yaml.Node) error {
		switch k.Value {
		case "policies":
			return s.readPolicies(v, service)
		case "routes":
			routes = v
			return nil
		case "gateway":
			gw = v
			return nil
		}
		return other(path, k, v)
	})
	if err != nil {
		return err
	}
	if routes != nil {
		if err := s.readRoutes(routes); err != nil {
			return err
		}
	}
	if gw != nil {
		if err := s.readGateway(gw); err != nil {
			return err
		}
	}
	return s.checkGateway()
}

// readPolicies applies the policies mapping. A policy named like an
// existing one (a default) starts from it, so `ping: {limit: 5}` changes
// only the limit; a new policy must name its algorithm, limit and window.
func (s *Set) readPolicies(m *yaml.Node, service ServiceField) error {
	return yamlwalk.Mapping(m, "policies", func(path string, k, v *yaml.Node) error {
		name := k.Value
		if err := ValidateName(name); err != nil {
			return &yamlwalk.Error{Path: "policies", Reason: err.Error()}
		}
		p, ok := s.Policies[name]
		if !ok {
			p = limiter.Policy{Name: name}
		}
		err := yamlwalk.Mapping(v, path, func(fpath string, fk, fv *yaml.Node) error {
			text, err := yamlwalk.Scalar(fpath, fv)
			if err != nil {
				return err
			}
			field := fk.Value
			switch {
			case !slices.Contains(ServiceFields, field):
				err = setPolicyField(&p, field, text)
			case service != nil:
				err = service(name, field, text)
			}
			if err != nil {
				return &yamlwalk.Error{Path: fpath, Reason: err.Error()}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := p.Validate(); err != nil {
			var pe *limiter.PolicyError
			if errors.As(err, &pe) && pe.Field != "name" {
				return &yamlwalk.Error{Path: path + "." + pe.Field, Reason: pe.Reason}
			}
			return &yamlwalk.Error{Path: path, Reason: err.Error()}
		}
		s.Policies[name] = p
		return nil
	})
}

func setPolicyField(p *limiter.Policy, field, text string) error {
	switch field {
	case "algorithm":
		p.Algorithm = limiter.Algorithm(text) // Validate names the allowed ones
	case "limit":
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", text)
		}
		p.Limit = n
	case "window":
		d, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 60s, 90s or 24h", text)
		}
		p.Window = d
	case "shadow":
		b, err := strconv.ParseBool(text)
		if err != nil {
			return fmt.Errorf("%q is not true or false", text)
		}
		p.Shadow = b
	default:
		return fmt.Errorf("unknown key (want %s)", strings.Join(slices.Concat(policyFields, ServiceFields), ", "))
	}
	return nil
}

// ValidateName checks what Policy.Validate leaves to the caller: a name is
// printed in HTTP headers as a structured-field string, so it must be
// printable ASCII.
func ValidateName(name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return fmt.Errorf("policy name %q must be printable ASCII", name)
		}
	}
	return nil
}

// readRoutes applies the routes mapping; it runs after every policy is
// known.
func (s *Set) readRoutes(m *yaml.Node) error {
	return yamlwalk.Mapping(m, "routes", func(path string, k, v *yaml.Node) error {
		route := k.Value
		if !slices.Contains(Routes, route) {
			return &yamlwalk.Error{Path: path, Reason: fmt.Sprintf("unknown route (want one of %s)", strings.Join(Routes, ", "))}
		}
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			return yamlwalk.Errorf(path, v, "must be a non-empty list of policy names")
		}
		names := make([]string, 0, len(v.Content))
		for i, item := range v.Content {
			ipath := yamlwalk.Index(path, i)
			name, err := yamlwalk.Scalar(ipath, item)
			if err != nil {
				return err
			}
			if _, ok := s.Policies[name]; !ok {
				return &yamlwalk.Error{Path: ipath, Reason: fmt.Sprintf("unknown policy %q", name)}
			}
			if slices.Contains(names, name) {
				return &yamlwalk.Error{Path: ipath, Reason: fmt.Sprintf("policy %q is listed twice", name)}
			}
			names = append(names, name)
		}
		s.RoutePolicies[route] = names
		return nil
	})
}

// readGateway reads the gateway list: the rules of forward-auth, in order.
func (s *Set) readGateway(list *yaml.Node) error {
	if yamlwalk.IsNull(list) {
		s.Gateway = nil
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
	s.Gateway = rules
	return nil
}

// checkGateway checks that every policy a gateway rule names is defined.
func (s *Set) checkGateway() error {
	for i, r := range s.Gateway {
		for j, name := range r.Policies {
			if _, ok := s.Policies[name]; !ok {
				return &yamlwalk.Error{Path: yamlwalk.Index(yamlwalk.Index("gateway", i)+".policies", j), Reason: fmt.Sprintf("unknown policy %q", name)}
			}
		}
	}
	return nil
}
