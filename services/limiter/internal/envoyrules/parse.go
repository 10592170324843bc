package envoyrules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/yamlwalk"
)

// LoadDir reads every *.yaml and *.yml file directly in dir (not in
// subfolders; dot files skipped), in name order. Any problem is a
// *ConfigError naming the file and the field.
func LoadDir(dir string, o Options) (*Rules, error) { return loadDir(dir, o, false) }

// LoadWholeDir is LoadDir for a folder whose files may be being written
// (a change seen by a folder watch): it also refuses a file that is empty
// or does not end with a newline, as one cut short by its writer is, so
// that half a file is never taken for the whole.
func LoadWholeDir(dir string, o Options) (*Rules, error) { return loadDir(dir, o, true) }

func loadDir(dir string, o Options, whole bool) (*Rules, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &ConfigError{File: dir, Reason: "cannot read the folder: " + errReason(err)}
	}
	r := NewRules(o)
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
		if whole && (len(data) == 0 || data[len(data)-1] != '\n') {
			return nil, &ConfigError{File: path, Reason: "empty or not ending in a newline: it may be half-written; the running rules stay until it is whole (SIGHUP applies it as it is)"}
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

// Add loads one file's domain. A domain already loaded from another file
// (unless the rules merge domains), a descriptor already defined, an unknown
// key, a bad unit or limit, or anything malformed is a *ConfigError; on
// error r is unchanged.
func (r *Rules) Add(file string, data []byte) error {
	p := &parser{file: file, rules: r, names: map[string]string{}}
	root, err := p.document(data)
	if err != nil {
		return err
	}
	return r.add(p, root)
}

// add loads the domain of root, read by p, into r; on error r is unchanged.
func (r *Rules) add(p *parser, root *yaml.Node) error {
	domain, lv, err := p.parse(root)
	if we := (*yamlwalk.Error)(nil); errors.As(err, &we) {
		return &ConfigError{File: p.file, Field: we.Path, Reason: we.ReasonLine()}
	} else if err != nil {
		return err
	}
	for name, origin := range p.names {
		if other, dup := r.names[name]; dup {
			return &ConfigError{File: p.file, Field: origin, Reason: fmt.Sprintf("policy name %q is already used by %s", name, other)}
		}
	}
	r.domains[domain] = lv
	if r.files[domain] == "" {
		r.files[domain] = p.file
	}
	for name, origin := range p.names {
		r.names[name] = p.file + ": " + origin
	}
	r.policies = append(r.policies, p.policies...)
	r.count += p.count
	return nil
}

// parser reads one file.
type parser struct {
	file     string
	rules    *Rules
	domain   string
	names    map[string]string // policy name -> field path, this file
	policies []limiter.Policy
	count    int // domains and descriptors, this file
}

// counted counts one more domain or descriptor, at path, refusing one over
// MaxRules.
func (p *parser) counted(path string, n *yaml.Node) error {
	if p.count++; p.rules.count+p.count > MaxRules {
		return p.fail(path, n, "more than %d domains and descriptors in the configuration", MaxRules)
	}
	return nil
}

func (p *parser) fail(field string, n *yaml.Node, format string, args ...any) error {
	reason := fmt.Sprintf(format, args...)
	if n != nil && n.Line > 0 {
		reason += fmt.Sprintf(" (line %d)", n.Line)
	}
	return &ConfigError{File: p.file, Field: field, Reason: reason}
}

// document returns the root of data's one YAML document.
func (p *parser) document(data []byte) (*yaml.Node, error) {
	root, err := yamlwalk.OneDocument(data)
	if errors.Is(err, yamlwalk.ErrEmpty) {
		return nil, p.fail("domain", nil, "is required (the file is empty)")
	} else if we := (*yamlwalk.Error)(nil); errors.As(err, &we) {
		return nil, &ConfigError{File: p.file, Field: we.Path, Reason: we.ReasonLine()}
	} else if err != nil {
		return nil, &ConfigError{File: p.file, Reason: "not valid YAML: " + err.Error()}
	}
	return root, nil
}

func (p *parser) parse(root *yaml.Node) (string, level, error) {
	var descriptors *yaml.Node
	err := yamlwalk.Fields(root, "", map[string]yamlwalk.Handler{
		"domain": func(path string, v *yaml.Node) error {
			return p.str(path, v, &p.domain)
		},
		"descriptors": func(_ string, v *yaml.Node) error { descriptors = v; return nil },
	})
	if err != nil {
		return "", nil, err
	}
	lv := level{}
	switch first := p.rules.files[p.domain]; {
	case p.domain == "":
		return "", nil, p.fail("domain", root, "is required and must not be empty")
	case first != "" && !p.rules.opts.MergeDomains:
		return "", nil, p.fail("domain", root, "%q is already defined in %s; --envoy-merge-domain-config merges the files of one domain", p.domain, first)
	case first != "":
		// Merged: this file's descriptors join the domain's top level, on a
		// copy so that the loaded rules stay as they are until Add succeeds.
		lv = p.rules.domains[p.domain].clone()
	default:
		if err := p.counted("domain", root); err != nil {
			return "", nil, err
		}
		p.reserveOverrides()
	}
	if !yamlwalk.IsNull(descriptors) {
		if err := p.list(descriptors, "descriptors", []string{p.domain}, lv, 1); err != nil {
			return "", nil, err
		}
	}
	return p.domain, lv, nil
}

// reserveOverrides adds the policies of the domain's request-side limit
// overrides (one per unit; see Rules.Override) to the file's, so that they
// are pruned and no descriptor derives the same name.
func (p *parser) reserveOverrides() {
	for _, unit := range unitNames {
		pol := overridePolicy(p.domain, unit, 1)
		p.names[pol.Name] = "the request limit overrides of domain " + strconv.Quote(p.domain)
		p.policies = append(p.policies, pol)
	}
}

func (p *parser) str(path string, v *yaml.Node, out *string) error {
	return yamlwalk.Decode(path, v, out, "a string")
}

func (p *parser) boolean(path string, v *yaml.Node, out *bool) error {
	return yamlwalk.Decode(path, v, out, "true or false")
}

// ignored accepts a boolean that only changes envoyproxy/ratelimit's
// statistics, which Tollgate does not reproduce.
func (p *parser) ignored(path string, v *yaml.Node) error {
	var b bool
	return p.boolean(path, v, &b)
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
		if err := p.descriptor(item, yamlwalk.Index(path, i), names, lv, depth); err != nil {
			return err
		}
	}
	return nil
}

// descriptor reads one descriptor into lv.
func (p *parser) descriptor(m *yaml.Node, path string, names []string, lv level, depth int) error {
	var (
		key, value string
		shadow     bool
		quota      bool
		rl         *yaml.Node
		rlPath     string
		nested     *yaml.Node
		nestedPath string
	)
	if err := p.counted(path, m); err != nil {
		return err
	}
	n := &node{file: p.file, origin: path}
	var metadata *structpb.Struct
	err := yamlwalk.Fields(m, path, map[string]yamlwalk.Handler{
		"key": func(fp string, v *yaml.Node) error { return p.str(fp, v, &key) },
		// An empty value is no value, as in envoyproxy/ratelimit.
		"value":           func(fp string, v *yaml.Node) error { return p.str(fp, v, &value) },
		"rate_limit":      func(fp string, v *yaml.Node) error { rl, rlPath = v, fp; return nil },
		"descriptors":     func(fp string, v *yaml.Node) error { nested, nestedPath = v, fp; return nil },
		"shadow_mode":     func(fp string, v *yaml.Node) error { return p.boolean(fp, v, &shadow) },
		"share_threshold": func(fp string, v *yaml.Node) error { return p.boolean(fp, v, &n.share) },
		"detailed_metric": p.ignored,
		"value_to_metric": p.ignored,
		"quota_mode":      func(fp string, v *yaml.Node) error { return p.boolean(fp, v, &quota) },
		"metadata": func(fp string, v *yaml.Node) (err error) {
			metadata, err = p.metadata(fp, v)
			return err
		},
	})
	if err != nil {
		return err
	}
	if key == "" {
		return p.fail(path+".key", m, "is required and must not be empty")
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
	if other := lv.joined(key, part); other != nil {
		return p.fail(path, m, "its key and value join to %q, as does the descriptor at %s (envoyproxy/ratelimit keys descriptors by that text)", part, other.where(p.file))
	}

	b := lv[key]
	if b == nil {
		b = &branch{exact: map[string]*node{}}
		lv[key] = b
	}
	switch {
	case value == "":
		if b.any != nil {
			return p.fail(path, m, "key %q without value is already defined at %s", key, b.any.where(p.file))
		}
		b.any = n
	case wildcard:
		for _, w := range b.wildcards {
			if w.value == value {
				return p.fail(path, m, "key %q with value %q is already defined at %s", key, value, w.where(p.file))
			}
		}
		n.parts = strings.Split(value, "*")
		b.wildcards = append(b.wildcards, n) // file order: the first match wins
	default:
		if old := b.exact[value]; old != nil {
			return p.fail(path, m, "key %q with value %q is already defined at %s", key, value, old.where(p.file))
		}
		b.exact[value] = n
	}

	if !yamlwalk.IsNull(rl) {
		if n.limit, err = p.rateLimit(rl, rlPath, names, shadow); err != nil {
			return err
		}
		// Only the metadata of a descriptor that carries the limit is ever
		// returned, as envoyproxy/ratelimit does.
		n.limit.Metadata = metadata
		n.limit.Quota = quota
	}
	// shadow_mode and quota_mode on a descriptor without rate_limit mean
	// nothing, and envoyproxy/ratelimit loads them.
	if !yamlwalk.IsNull(nested) {
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
		algorithm = string(limiter.FixedWindow)
		l         = &Limit{}
	)
	err := yamlwalk.Fields(m, path, map[string]yamlwalk.Handler{
		"unit": func(fp string, v *yaml.Node) error { return p.str(fp, v, &unit) },
		"requests_per_unit": func(fp string, v *yaml.Node) error {
			if err := yamlwalk.Decode(fp, v, &rpu, "an integer"); err != nil {
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
			if yamlwalk.IsNull(v) {
				return nil
			}
			if v.Kind != yaml.SequenceNode {
				return p.fail(fp, v, "must be a list of {name: ...}")
			}
			for i, item := range v.Content {
				ip := yamlwalk.Index(fp, i)
				var name string
				if err := yamlwalk.Fields(item, ip, map[string]yamlwalk.Handler{
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
	l.Policy = limiter.Policy{Name: p.nameFor(names), Algorithm: limiter.Algorithm(algorithm), Shadow: shadow}
	p.names[l.Policy.Name] = path
	u, ok := units[strings.ToLower(unit)]
	if l.Unlimited {
		// As envoyproxy/ratelimit: a unit is refused, anything else that
		// does not count is ignored.
		if ok {
			return nil, p.fail(path+".unit", m, "an unlimited rate_limit takes no unit")
		}
		return l, nil
	}
	if !ok {
		return nil, p.fail(path+".unit", m, "%q is not one of second, minute, hour, day, week, month, year", unit)
	}
	// requests_per_unit left out is 0, which refuses everything, as in
	// envoyproxy/ratelimit.
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

// maxMetadataValues bounds the values of one descriptor's metadata, aliases
// followed: a few anchors must not expand into millions of values.
const maxMetadataValues = 10_000

// metadata reads a descriptor's metadata: any mapping with string keys,
// returned as it is in the answer's dynamic_metadata when
// --envoy-response-dynamic-metadata is on.
func (p *parser) metadata(path string, v *yaml.Node) (*structpb.Struct, error) {
	if yamlwalk.IsNull(v) {
		return nil, nil
	}
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v.Kind != yaml.MappingNode {
		return nil, p.fail(path, v, "must be a mapping")
	}
	budget := maxMetadataValues
	val, err := p.metadataValue(path, v, &budget)
	if err != nil {
		return nil, err
	}
	if len(val.GetStructValue().GetFields()) == 0 {
		return nil, nil
	}
	return val.GetStructValue(), nil
}

// metadataValue converts one YAML value to a protobuf Value: numbers for
// integers and floats, booleans, null, and the text as written for every
// other scalar (dates included).
func (p *parser) metadataValue(path string, v *yaml.Node, budget *int) (*structpb.Value, error) {
	if *budget--; *budget < 0 {
		return nil, p.fail(path, v, "metadata holds more than %d values", maxMetadataValues)
	}
	switch v.Kind {
	case yaml.AliasNode:
		return p.metadataValue(path, v.Alias, budget)
	case yaml.MappingNode:
		fields := map[string]*structpb.Value{}
		err := yamlwalk.Mapping(v, path, func(fp string, k, fv *yaml.Node) error {
			val, err := p.metadataValue(fp, fv, budget)
			fields[k.Value] = val
			return err
		})
		if err != nil {
			return nil, err
		}
		return structpb.NewStructValue(&structpb.Struct{Fields: fields}), nil
	case yaml.SequenceNode:
		list := &structpb.ListValue{Values: make([]*structpb.Value, len(v.Content))}
		for i, item := range v.Content {
			val, err := p.metadataValue(yamlwalk.Index(path, i), item, budget)
			if err != nil {
				return nil, err
			}
			list.Values[i] = val
		}
		return structpb.NewListValue(list), nil
	}
	switch v.ShortTag() {
	case "!!null":
		return structpb.NewNullValue(), nil
	case "!!bool":
		var b bool
		if err := p.boolean(path, v, &b); err != nil {
			return nil, err
		}
		return structpb.NewBoolValue(b), nil
	case "!!int", "!!float":
		var f float64
		if err := yamlwalk.Decode(path, v, &f, "a number"); err != nil {
			return nil, err
		}
		return structpb.NewNumberValue(f), nil
	}
	return structpb.NewStringValue(v.Value), nil
}

// nameFor returns the policy name of the limit at the descriptor path
// names: policyName(names), as envoyproxy/ratelimit names its statistics,
// unless a limit elsewhere already has it (another level or another domain:
// keys or domains holding '.', as "a.b" beside "a" then "b"; or a key named
// like a domain's override counter). The name then takes a digest of the
// path, so that two limits never share a counter, as they do not in the
// peer. (Siblings cannot share a name: level.joined refuses them first.)
func (p *parser) nameFor(names []string) string {
	name := policyName(names)
	_, inFile := p.names[name]
	_, loaded := p.rules.names[name]
	if !inFile && !loaded {
		return name
	}
	sum := sha256.Sum256([]byte(strings.Join(names, "\x00")))
	last := len(names) - 1
	return policyName(append(slices.Clone(names[:last]), names[last]+"~"+hex.EncodeToString(sum[:8])))
}
