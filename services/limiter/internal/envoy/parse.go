package envoy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// LoadDir reads every *.yaml and *.yml file directly in dir (not in
// subfolders; dot files skipped), in name order. Any problem is a
// *ConfigError naming the file and the field.
func LoadDir(dir string) (*Rules, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &ConfigError{File: dir, Reason: "cannot read the folder: " + errReason(err)}
	}
	r := NewRules()
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, name)
		data, err := readFile(path)
		if err != nil {
			return nil, err
		}
		if err := r.Add(path, data); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// errReason is an error's text without the path the os package repeats.
func errReason(err error) string {
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &ConfigError{File: path, Reason: errReason(err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, &ConfigError{File: path, Reason: errReason(err)}
	}
	if len(data) > MaxFileBytes {
		return nil, &ConfigError{File: path, Reason: fmt.Sprintf("larger than %d bytes", MaxFileBytes)}
	}
	return data, nil
}

// Add loads one file's domain. A domain already loaded from another file, an
// unknown key, a bad unit or limit, or anything malformed is a *ConfigError;
// on error r is unchanged.
func (r *Rules) Add(file string, data []byte) error {
	p := parser{file: file, rules: r, names: map[string]string{}}
	domain, lv, err := p.parse(data)
	if err != nil {
		return err
	}
	for name, origin := range p.names {
		if other, dup := r.names[name]; dup {
			return &ConfigError{File: file, Field: origin, Reason: fmt.Sprintf("policy name %q is already used by %s", name, other)}
		}
	}
	r.domains[domain] = lv
	r.files[domain] = file
	for name, origin := range p.names {
		r.names[name] = file + ": " + origin
	}
	r.policies = append(r.policies, p.policies...)
	sort.Slice(r.policies, func(i, j int) bool { return r.policies[i].Name < r.policies[j].Name })
	return nil
}

// parser reads one file.
type parser struct {
	file     string
	rules    *Rules
	domain   string
	names    map[string]string // policy name -> field path, this file
	policies []limiter.Policy
}

func (p *parser) fail(field string, n *yaml.Node, format string, args ...any) error {
	reason := fmt.Sprintf(format, args...)
	if n != nil && n.Line > 0 {
		reason += fmt.Sprintf(" (line %d)", n.Line)
	}
	return &ConfigError{File: p.file, Field: field, Reason: reason}
}

func (p *parser) parse(data []byte) (string, level, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", nil, &ConfigError{File: p.file, Reason: "not valid YAML: " + err.Error()}
	}
	if len(doc.Content) == 0 {
		return "", nil, p.fail("domain", nil, "is required (the file is empty)")
	}
	root := doc.Content[0]
	var descriptors *yaml.Node
	err := p.fields(root, "", map[string]func(path string, v *yaml.Node) error{
		"domain": func(path string, v *yaml.Node) error {
			return p.str(path, v, &p.domain)
		},
		"descriptors": func(_ string, v *yaml.Node) error { descriptors = v; return nil },
	})
	if err != nil {
		return "", nil, err
	}
	switch {
	case p.domain == "":
		return "", nil, p.fail("domain", root, "is required and must not be empty")
	case p.rules.files[p.domain] != "":
		return "", nil, p.fail("domain", root, "%q is already defined in %s", p.domain, p.rules.files[p.domain])
	}
	lv := level{}
	if descriptors != nil {
		if err := p.list(descriptors, "descriptors", []string{p.domain}, lv, 1); err != nil {
			return "", nil, err
		}
	}
	return p.domain, lv, nil
}

// fields calls the handler of every key of mapping m, refusing unknown and
// repeated keys.
func (p *parser) fields(m *yaml.Node, path string, handlers map[string]func(path string, v *yaml.Node) error) error {
	if m.Kind != yaml.MappingNode {
		return p.fail(path, m, "must be a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		fpath := k.Value
		if path != "" {
			fpath = path + "." + k.Value
		}
		if k.Kind != yaml.ScalarNode {
			return p.fail(path, k, "keys must be plain strings")
		}
		if seen[k.Value] {
			return p.fail(fpath, k, "key given twice")
		}
		seen[k.Value] = true
		h, ok := handlers[k.Value]
		if !ok {
			known := make([]string, 0, len(handlers))
			for name := range handlers {
				known = append(known, name)
			}
			sort.Strings(known)
			return p.fail(fpath, k, "unknown key (want one of %s)", strings.Join(known, ", "))
		}
		if err := h(fpath, v); err != nil {
			return err
		}
	}
	return nil
}

// scalar decodes a scalar node into out, naming what was expected on error.
func (p *parser) scalar(path string, v *yaml.Node, out any, want string) error {
	if v.Kind != yaml.ScalarNode || v.Decode(out) != nil {
		return p.fail(path, v, "must be %s", want)
	}
	return nil
}

func (p *parser) str(path string, v *yaml.Node, out *string) error {
	return p.scalar(path, v, out, "a string")
}

func (p *parser) boolean(path string, v *yaml.Node, out *bool) error {
	return p.scalar(path, v, out, "true or false")
}

// ignored accepts a boolean that only changes envoyproxy/ratelimit's
// statistics, which Tollgate does not reproduce.
func (p *parser) ignored(path string, v *yaml.Node) error {
	var b bool
	return p.boolean(path, v, &b)
}

// unsupported refuses a field whose meaning Tollgate does not implement.
func (p *parser) unsupported(why string) func(path string, v *yaml.Node) error {
	return func(path string, v *yaml.Node) error { return p.fail(path, v, "is not supported by Tollgate: %s", why) }
}

// list reads a descriptors list into lv. names is the policy name's path so
// far (domain, then key or key_value per level).
func (p *parser) list(seq *yaml.Node, path string, names []string, lv level, depth int) error {
	if seq.Kind != yaml.SequenceNode {
		return p.fail(path, seq, "must be a list of descriptors")
	}
	if depth > MaxDepth {
		return p.fail(path, seq, "descriptors are nested deeper than %d levels", MaxDepth)
	}
	for i, item := range seq.Content {
		if err := p.descriptor(item, fmt.Sprintf("%s[%d]", path, i), names, lv, depth); err != nil {
			return err
		}
	}
	for _, b := range lv {
		sort.SliceStable(b.wildcards, func(i, j int) bool { return b.wildcards[i].fixed > b.wildcards[j].fixed })
	}
	return nil
}

// descriptor reads one descriptor into lv.
func (p *parser) descriptor(m *yaml.Node, path string, names []string, lv level, depth int) error {
	var (
		key, value string
		hasValue   bool
		shadow     bool
		rl         *yaml.Node
		rlPath     string
		nested     *yaml.Node
		nestedPath string
	)
	n := &node{origin: path}
	err := p.fields(m, path, map[string]func(string, *yaml.Node) error{
		"key": func(fp string, v *yaml.Node) error { return p.str(fp, v, &key) },
		"value": func(fp string, v *yaml.Node) error {
			hasValue = true
			return p.str(fp, v, &value)
		},
		"rate_limit":      func(fp string, v *yaml.Node) error { rl, rlPath = v, fp; return nil },
		"descriptors":     func(fp string, v *yaml.Node) error { nested, nestedPath = v, fp; return nil },
		"shadow_mode":     func(fp string, v *yaml.Node) error { return p.boolean(fp, v, &shadow) },
		"share_threshold": func(fp string, v *yaml.Node) error { return p.boolean(fp, v, &n.share) },
		"detailed_metric": p.ignored,
		"value_to_metric": p.ignored,
		"quota_mode":      p.unsupported("quota mode needs quota-aware counting"),
		"metadata":        p.unsupported("descriptor metadata is not returned"),
	})
	if err != nil {
		return err
	}
	if key == "" {
		return p.fail(path+".key", m, "is required and must not be empty")
	}
	if hasValue && value == "" {
		return p.fail(path+".value", m, "must not be empty (leave it out to match any value)")
	}
	n.value = value
	wildcard := strings.Contains(value, "*")
	if n.share && !wildcard {
		return p.fail(path+".share_threshold", m, "needs a wildcard value (containing '*')")
	}
	part := key
	if value != "" {
		part += "_" + value
	}
	names = append(slices.Clone(names), part)

	b := lv[key]
	if b == nil {
		b = &branch{exact: map[string]*node{}}
		lv[key] = b
	}
	switch {
	case value == "":
		if b.any != nil {
			return p.fail(path, m, "key %q without value is already defined at %s", key, b.any.origin)
		}
		b.any = n
	case wildcard:
		for _, w := range b.wildcards {
			if w.value == value {
				return p.fail(path, m, "key %q with value %q is already defined at %s", key, value, w.origin)
			}
		}
		n.parts = strings.Split(value, "*")
		n.fixed = len(value) - strings.Count(value, "*")
		b.wildcards = append(b.wildcards, n)
	default:
		if old := b.exact[value]; old != nil {
			return p.fail(path, m, "key %q with value %q is already defined at %s", key, value, old.origin)
		}
		b.exact[value] = n
	}

	if rl != nil {
		if n.limit, err = p.rateLimit(rl, rlPath, names, shadow); err != nil {
			return err
		}
	} else if shadow {
		return p.fail(path+".shadow_mode", m, "needs a rate_limit on the same descriptor")
	}
	if nested != nil {
		n.next = level{}
		return p.list(nested, nestedPath, names, n.next, depth+1)
	}
	return nil
}

// rateLimit reads a rate_limit block.
func (p *parser) rateLimit(m *yaml.Node, path string, names []string, shadow bool) (*Limit, error) {
	var (
		unit      string
		rpu       int64
		hasRPU    bool
		algorithm = string(limiter.FixedWindow)
		l         = &Limit{}
	)
	err := p.fields(m, path, map[string]func(string, *yaml.Node) error{
		"unit": func(fp string, v *yaml.Node) error { return p.str(fp, v, &unit) },
		"requests_per_unit": func(fp string, v *yaml.Node) error {
			hasRPU = true
			if err := p.scalar(fp, v, &rpu, "an integer"); err != nil {
				return err
			}
			if rpu < 0 || rpu > limiter.MaxLimit {
				return p.fail(fp, v, "%d is outside 0..%d", rpu, int64(limiter.MaxLimit))
			}
			return nil
		},
		"unlimited": func(fp string, v *yaml.Node) error { return p.boolean(fp, v, &l.Unlimited) },
		"name":      func(fp string, v *yaml.Node) error { return p.str(fp, v, &l.Name) },
		"replaces": func(fp string, v *yaml.Node) error {
			if v.Kind != yaml.SequenceNode {
				return p.fail(fp, v, "must be a list of {name: ...}")
			}
			for i, item := range v.Content {
				ip := fmt.Sprintf("%s[%d]", fp, i)
				var name string
				if err := p.fields(item, ip, map[string]func(string, *yaml.Node) error{
					"name": func(np string, nv *yaml.Node) error { return p.str(np, nv, &name) },
				}); err != nil {
					return err
				}
				if name == "" {
					return p.fail(ip+".name", item, "is required and must not be empty")
				}
				l.Replaces = append(l.Replaces, name)
			}
			return nil
		},
		"algorithm": func(fp string, v *yaml.Node) error { return p.str(fp, v, &algorithm) },
	})
	if err != nil {
		return nil, err
	}
	if slices.Contains(l.Replaces, l.Name) && l.Name != "" {
		return nil, p.fail(path+".replaces", m, "must not name this rate limit itself (%q)", l.Name)
	}
	l.Policy = limiter.Policy{Name: policyName(names), Algorithm: limiter.Algorithm(algorithm), Shadow: shadow}
	if other, dup := p.names[l.Policy.Name]; dup {
		return nil, p.fail(path, m, "its policy name %q is already used by %s", l.Policy.Name, other)
	}
	p.names[l.Policy.Name] = path
	if l.Unlimited {
		if unit != "" || hasRPU {
			return nil, p.fail(path, m, "an unlimited rate_limit takes no unit nor requests_per_unit")
		}
		return l, nil
	}
	u, ok := units[strings.ToLower(unit)]
	if !ok {
		return nil, p.fail(path+".unit", m, "%q is not one of second, minute, hour, day, week, month, year", unit)
	}
	if !hasRPU {
		return nil, p.fail(path+".requests_per_unit", m, "is required")
	}
	l.Unit, l.RequestsPerUnit = u.unit, uint32(rpu)
	l.Policy.Limit, l.Policy.Window = rpu, u.window
	if l.Policy.Algorithm == limiter.SlidingLogUnsafe {
		return nil, p.fail(path+".algorithm", m, "sliding_log_unsafe over-admits on purpose and never protects anything")
	}
	if rpu == 0 {
		if _, err := limiter.ParseAlgorithm(algorithm); err != nil {
			return nil, p.fail(path+".algorithm", m, "unknown algorithm %q", algorithm)
		}
		return l, nil // refuses everything; never reaches the store
	}
	if err := l.Policy.Validate(); err != nil {
		if pe := (*limiter.PolicyError)(nil); errors.As(err, &pe) {
			field := map[string]string{"algorithm": "algorithm", "limit": "requests_per_unit", "window": "unit"}[pe.Field]
			return nil, p.fail(path+"."+field, m, "%s", pe.Reason)
		}
		return nil, p.fail(path, m, "%s", err)
	}
	p.policies = append(p.policies, l.Policy)
	return l, nil
}
