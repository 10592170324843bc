package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// applyYAML applies the YAML file's settings, policies and routes over c.
// Decoding is strict: an unknown or repeated key is an error naming it.
func (c *Config) applyYAML(data []byte) error {
	root, err := oneDocument(data)
	if err != nil {
		return &Error{Field: c.File, Reason: err.Error()}
	}
	if root.Kind != yaml.MappingNode {
		return &Error{Field: c.File, Reason: "must be a mapping of settings"}
	}
	byKey := make(map[string]setting, len(settings))
	for _, s := range settings {
		byKey[s.yamlKey()] = s
	}
	var routes *yaml.Node
	err = eachKey(root, "", func(key, path string, v *yaml.Node) error {
		switch key {
		case "policies":
			return c.yamlPolicies(v)
		case "routes":
			routes = v
			return nil
		}
		s, ok := byKey[key]
		if !ok {
			return &Error{Field: path, Reason: fmt.Sprintf("unknown key (line %d)", v.Line)}
		}
		text, err := settingText(key, path, v)
		if err != nil {
			return err
		}
		if err := s.set(c, text); err != nil {
			return fieldError(path, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if routes != nil {
		return c.yamlRoutes(routes)
	}
	return nil
}

// oneDocument returns the root node of the file's one YAML document. A file
// without any (empty, blanks or comments only: an editor or a tool caught
// mid-write) is refused rather than read as "every default", which would
// silently reset every limit; so is a file of several documents, of which
// only the first would be read.
func oneDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, next yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, errors.New("is empty: it sets nothing, so every setting and policy would be its default; remove --config to run on the defaults")
	} else if err != nil {
		return nil, err
	}
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = next.Line
		}
		return nil, fmt.Errorf("holds more than one YAML document (the second at line %d): only the first would be read; keep one", line)
	}
	if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
		return nil, errors.New("is empty: it sets nothing, so every setting and policy would be its default; remove --config to run on the defaults")
	}
	return doc.Content[0], nil
}

// eachKey calls fn for every key of mapping node m, in file order. path is
// the dotted path of m ("" for the root).
func eachKey(m *yaml.Node, path string, fn func(key, path string, v *yaml.Node) error) error {
	if m.Kind != yaml.MappingNode {
		return &Error{Field: path, Reason: fmt.Sprintf("must be a mapping (line %d)", m.Line)}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		if k.Kind != yaml.ScalarNode {
			return &Error{Field: path, Reason: fmt.Sprintf("keys must be plain strings (line %d)", k.Line)}
		}
		if seen[k.Value] {
			return &Error{Field: p, Reason: fmt.Sprintf("key given twice (line %d)", k.Line)}
		}
		seen[k.Value] = true
		if err := fn(k.Value, p, v); err != nil {
			return err
		}
	}
	return nil
}

func scalar(path string, v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode {
		return "", &Error{Field: path, Reason: fmt.Sprintf("must be a single value (line %d)", v.Line)}
	}
	return v.Value, nil
}

// listSettings are the settings whose YAML value may also be a list.
var listSettings = []string{"trusted_proxies", "ping_key", "endpoint_fold"}

// settingText returns a setting's value as the text a flag would carry;
// a list setting may also be a YAML list.
func settingText(key, path string, v *yaml.Node) (string, error) {
	if !slices.Contains(listSettings, key) || v.Kind != yaml.SequenceNode {
		return scalar(path, v)
	}
	items := make([]string, 0, len(v.Content))
	for i, item := range v.Content {
		s, err := scalar(fmt.Sprintf("%s[%d]", path, i), item)
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
	return eachKey(m, "policies", func(name, path string, v *yaml.Node) error {
		if err := validatePolicyName(name); err != nil {
			return fieldError("policies", err)
		}
		p, ok := c.Policies[name]
		if !ok {
			p = limiter.Policy{Name: name}
		}
		err := eachKey(v, path, func(field, fpath string, fv *yaml.Node) error {
			text, err := scalar(fpath, fv)
			if err != nil {
				return err
			}
			switch field { // service-side, not limiter.Policy fields
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
	return eachKey(m, "routes", func(route, path string, v *yaml.Node) error {
		if !slices.Contains(Routes, route) {
			return &Error{Field: path, Reason: fmt.Sprintf("unknown route (want one of %s)", strings.Join(Routes, ", "))}
		}
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			return &Error{Field: path, Reason: fmt.Sprintf("must be a non-empty list of policy names (line %d)", v.Line)}
		}
		names := make([]string, 0, len(v.Content))
		for i, item := range v.Content {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			name, err := scalar(ipath, item)
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
