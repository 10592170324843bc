package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/yamlwalk"
)

// applyYAML applies the YAML file's settings, policies and routes over c.
// Decoding is strict: an unknown or repeated key is an error naming it. A
// setting for which overridden is true (a flag or a variable gives it) is
// checked to be a scalar but not applied: its file value, which may name a
// path that exists only where the file is deployed, is not the one in force.
// Each setting it sets is recorded in from.
func (c *Config) applyYAML(data []byte, from map[string]source, overridden func(setting) bool) error {
	root, err := yamlwalk.OneDocument(data)
	if errors.Is(err, yamlwalk.ErrEmpty) {
		// An editor or a tool caught mid-write: read as "every default", it
		// would silently reset every limit.
		return &Error{Field: c.File, Reason: "is empty: it sets nothing, so every setting and policy would be its default; remove --config to run on the defaults"}
	} else if err != nil {
		return &Error{Field: c.File, Reason: err.Error()}
	}
	if root.Kind != yaml.MappingNode {
		return &Error{Field: c.File, Reason: "must be a mapping of settings"}
	}
	err = c.yamlRoot(root, from, overridden)
	if we := (*yamlwalk.Error)(nil); errors.As(err, &we) {
		return &Error{Field: we.Path, Reason: we.ReasonLine()}
	}
	return err
}

func (c *Config) yamlRoot(root *yaml.Node, from map[string]source, overridden func(setting) bool) error {
	byKey := make(map[string]setting, len(settings))
	for _, s := range settings {
		byKey[s.yamlKey()] = s
	}
	set := func(path string, k, v *yaml.Node) error {
		s, ok := byKey[path]
		if !ok {
			return yamlwalk.Errorf(path, v, "unknown key")
		}
		text, err := settingText(k.Value, path, v)
		if err != nil || overridden(s) {
			return err
		}
		if err := s.set(c, text); err != nil {
			return fieldError(path, err)
		}
		from[s.name] = fromYAML
		return nil
	}
	var routes, gw *yaml.Node
	err := yamlwalk.Mapping(root, "", func(path string, k, v *yaml.Node) error {
		switch k.Value {
		case "policies":
			return c.yamlPolicies(v)
		case "routes":
			routes = v
			return nil
		case "gateway":
			gw = v
			return nil
		}
		if slices.Contains(yamlGroups, strings.ReplaceAll(k.Value, "_", "-")) {
			return yamlwalk.Mapping(v, path, set)
		}
		if strings.Contains(k.Value, ".") { // only as a group's key
			return yamlwalk.Errorf(path, v, "unknown key")
		}
		return set(path, k, v)
	})
	if err != nil {
		return err
	}
	if routes != nil {
		if err := c.yamlRoutes(routes); err != nil {
			return err
		}
	}
	if gw != nil {
		return c.yamlGateway(gw)
	}
	return nil
}

// listSettings are the settings whose YAML value may also be a list.
var listSettings = []string{"trusted_proxies", "ping_key", "rate_key", "endpoint_fold"}

// settingText returns a setting's value as the text a flag would carry;
// a list setting may also be a YAML list.
func settingText(key, path string, v *yaml.Node) (string, error) {
	if !slices.Contains(listSettings, key) || v.Kind != yaml.SequenceNode {
		return yamlwalk.Scalar(path, v)
	}
	items := make([]string, 0, len(v.Content))
	for i, item := range v.Content {
		s, err := yamlwalk.Scalar(yamlwalk.Index(path, i), item)
		if err != nil {
			return "", err
		}
		items = append(items, s)
	}
	return strings.Join(items, ","), nil
}

// yamlPolicies applies the policies mapping. A policy named like an existing
// one (a default) starts from it, so `ping: {limit: 5}` changes only the
// limit; a new policy must name its algorithm, limit and window.
func (c *Config) yamlPolicies(m *yaml.Node) error {
	return yamlwalk.Mapping(m, "policies", func(path string, k, v *yaml.Node) error {
		name := k.Value
		if err := validatePolicyName(name); err != nil {
			return fieldError("policies", err)
		}
		p, ok := c.Policies[name]
		if !ok {
			p = limiter.Policy{Name: name}
		}
		err := yamlwalk.Mapping(v, path, func(fpath string, fk, fv *yaml.Node) error {
			text, err := yamlwalk.Scalar(fpath, fv)
			if err != nil {
				return err
			}
			switch field := fk.Value; field { // service-side, not limiter.Policy fields
			case "on_store_error":
				err = c.setStoreErrorMode(name, text)
			case "decision_api":
				err = c.setDecisionAPI(name, text)
			case "memory_max_keys":
				err = c.setMemoryMaxKeys(name, text)
			case "near_cache":
				err = c.setNearCache(name, text)
			default:
				err = setPolicyField(&p, field, text)
			}
			if err != nil {
				return fieldError(fpath, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := p.Validate(); err != nil {
			var pe *limiter.PolicyError
			if errors.As(err, &pe) && pe.Field != "name" {
				return &Error{Field: path + "." + pe.Field, Reason: pe.Reason}
			}
			return fieldError(path, err)
		}
		c.Policies[name] = p
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
		return errors.New("unknown key (want algorithm, limit, window, shadow, on_store_error, decision_api, memory_max_keys, near_cache)")
	}
	return nil
}

// setDecisionAPI records whether /v1/check may charge policy name even when
// a seed route uses it.
func (c *Config) setDecisionAPI(name, text string) error {
	b, err := strconv.ParseBool(text)
	if err != nil {
		return fmt.Errorf("%q is not true or false", text)
	}
	if c.DecisionAPI == nil {
		c.DecisionAPI = map[string]bool{}
	}
	c.DecisionAPI[name] = b
	return nil
}

// setMemoryMaxKeys gives policy name a memory-store bound of its own.
func (c *Config) setMemoryMaxKeys(name, text string) error {
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 || n > 1<<31 {
		return fmt.Errorf("%q is not an integer in 1..%d", text, 1<<31)
	}
	if c.MemoryPolicyMaxKeys == nil {
		c.MemoryPolicyMaxKeys = map[string]int{}
	}
	c.MemoryPolicyMaxKeys[name] = n
	return nil
}

// yamlRoutes applies the routes mapping; it runs after every policy is known.
func (c *Config) yamlRoutes(m *yaml.Node) error {
	return yamlwalk.Mapping(m, "routes", func(path string, k, v *yaml.Node) error {
		route := k.Value
		if !slices.Contains(Routes, route) {
			return &Error{Field: path, Reason: fmt.Sprintf("unknown route (want one of %s)", strings.Join(Routes, ", "))}
		}
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			return &Error{Field: path, Reason: fmt.Sprintf("must be a non-empty list of policy names (line %d)", v.Line)}
		}
		names := make([]string, 0, len(v.Content))
		for i, item := range v.Content {
			ipath := yamlwalk.Index(path, i)
			name, err := yamlwalk.Scalar(ipath, item)
			if err != nil {
				return err
			}
			if _, ok := c.Policies[name]; !ok {
				return &Error{Field: ipath, Reason: fmt.Sprintf("unknown policy %q", name)}
			}
			if slices.Contains(names, name) {
				return &Error{Field: ipath, Reason: fmt.Sprintf("policy %q is listed twice", name)}
			}
			names = append(names, name)
		}
		c.RoutePolicies[route] = names
		return nil
	})
}
