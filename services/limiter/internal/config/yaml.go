package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/limiter/policyfile"
	"github.com/tollgate/tollgate/pkg/limiter/yamlwalk"
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
	limits := &policyfile.Set{Policies: c.Policies, RoutePolicies: c.RoutePolicies, Gateway: c.Gateway}
	err := limits.Walk(root, c.setPolicyServiceField, func(path string, k, v *yaml.Node) error {
		if slices.Contains(yamlGroups, strings.ReplaceAll(k.Value, "_", "-")) {
			return yamlwalk.Mapping(v, path, set)
		}
		if strings.Contains(k.Value, ".") { // only as a group's key
			return yamlwalk.Errorf(path, v, "unknown key")
		}
		return set(path, k, v)
	})
	c.Gateway = limits.Gateway
	return err
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

// setPolicyServiceField reads a policy's service-side key (one of
// policyfile.ServiceFields).
func (c *Config) setPolicyServiceField(name, field, text string) error {
	switch field {
	case "on_store_error":
		return c.setStoreErrorMode(name, text)
	case "decision_api":
		return c.setDecisionAPI(name, text)
	case "memory_max_keys":
		return c.setMemoryMaxKeys(name, text)
	case "near_cache":
		return c.setNearCache(name, text)
	}
	return fmt.Errorf("%s is not a service setting of a policy", field)
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
