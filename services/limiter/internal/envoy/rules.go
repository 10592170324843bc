// Package envoy makes Tollgate a drop-in replacement for envoyproxy/ratelimit:
// it reads that service's YAML configuration (a folder of files, one domain
// each), answers Envoy's rate-limit gRPC API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) and lets the
// HTTP service answer the same requests on POST /json.
//
// Every leaf of a domain's descriptor tree that carries a rate_limit becomes
// one limiter.Policy (fixed_window by default, as Envoy's service does; the
// extension field rate_limit.algorithm picks any Tollgate algorithm), and
// every decision goes through the service's limiter.Store, so memory, SQLite
// and Redis all work, and several instances on one Redis share the counters.
package envoy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// Bounds of a configuration.
const (
	// MaxFileBytes is the largest configuration file read, in bytes.
	MaxFileBytes = 4 << 20
	// MaxDepth bounds the nesting of descriptors.
	MaxDepth = 16
	// maxNameBytes is the longest policy name (limiter.Policy allows 128).
	maxNameBytes = 128
)

// ConfigError is a problem in one configuration file: the file, the field as
// a path (descriptors[0].rate_limit.unit) and why. It unwraps to
// config.ErrInvalid, so the service exits with status 2.
type ConfigError struct {
	File   string
	Field  string // empty when the problem is the whole file
	Reason string
}

// Error returns the problem as one line.
func (e *ConfigError) Error() string {
	s := "envoy: " + e.File + ": "
	if e.Field != "" {
		s += e.Field + ": "
	}
	return strings.Join(strings.Fields(s+e.Reason), " ")
}

// Unwrap makes errors.Is(err, config.ErrInvalid) true.
func (e *ConfigError) Unwrap() error { return config.ErrInvalid }

// units maps the rate_limit.unit names to Envoy's enum and a window. Month and
// year are 30 and 365 days, as envoyproxy/ratelimit counts them.
var units = map[string]struct {
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
	window time.Duration
}{
	"second": {rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"month":  {rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"year":   {rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// Limit is one configured rate_limit: a leaf of a descriptor tree.
type Limit struct {
	// Policy is what the store decides with. Its Name, derived from the
	// domain and the descriptor path, is unique among the loaded rules; its
	// Limit is 0 (not a valid store policy) when RequestsPerUnit is 0.
	Policy limiter.Policy
	// Name is rate_limit.name, echoed in current_limit and used by replaces.
	Name            string
	Replaces        []string
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32
	// Unlimited limits are never counted and always answer OK.
	Unlimited bool
}

// blocked reports whether the limit refuses everything (requests_per_unit 0).
func (l *Limit) blocked() bool { return !l.Unlimited && l.RequestsPerUnit == 0 }

// stored reports whether the limit's decisions go through the store.
func (l *Limit) stored() bool { return !l.Unlimited && l.RequestsPerUnit > 0 }

// node is one descriptor of the tree: a key with an exact value, a wildcard
// value, or no value.
type node struct {
	value  string   // as written; empty for a key without value
	parts  []string // value split on '*' when it is a wildcard
	share  bool     // share_threshold: every matching value is one counter
	limit  *Limit   // nil for a placeholder
	next   level    // nested descriptors; nil when none
	fixed  int      // bytes of literal text in a wildcard: its specificity
	origin string   // the field path, for duplicate errors
}

// branch holds the descriptors of one key at one level.
type branch struct {
	exact     map[string]*node
	wildcards []*node // most specific (most literal text) first, then file order
	any       *node
}

// level is one list of descriptors, by key.
type level map[string]*branch

// Rules are the loaded domains. They are immutable once loaded and safe for
// concurrent use.
type Rules struct {
	domains  map[string]level
	files    map[string]string // domain -> file that defined it
	policies []limiter.Policy  // every stored limit's policy, sorted by name
	names    map[string]string // policy name -> field path that made it
}

// NewRules returns empty rules; add files with Add.
func NewRules() *Rules {
	return &Rules{domains: map[string]level{}, files: map[string]string{}, names: map[string]string{}}
}

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
	if pe, ok := errors.AsType[*os.PathError](err); ok {
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

// Policies returns the policy of every limit the store decides, sorted by
// name: the service probes and prunes them.
func (r *Rules) Policies() []limiter.Policy { return slices.Clone(r.policies) }

// Domains returns the loaded domain names, sorted.
func (r *Rules) Domains() []string {
	names := make([]string, 0, len(r.domains))
	for d := range r.domains {
		names = append(names, d)
	}
	sort.Strings(names)
	return names
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
		if pe, ok := errors.AsType[*limiter.PolicyError](err); ok {
			field := map[string]string{"algorithm": "algorithm", "limit": "requests_per_unit", "window": "unit"}[pe.Field]
			return nil, p.fail(path+"."+field, m, "%s", pe.Reason)
		}
		return nil, p.fail(path, m, "%s", err)
	}
	p.policies = append(p.policies, l.Policy)
	return l, nil
}

// policyName derives a policy name from the domain and the descriptor path,
// as envoyproxy/ratelimit names its statistics: "domain.key_value.key".
// Policy names travel in RateLimit headers, so a name that is not printable
// ASCII or is longer than 128 bytes is replaced by its printable prefix and
// a digest of the whole: deterministic, and still unique.
func policyName(parts []string) string {
	name := strings.Join(parts, ".")
	safe := len(name) <= maxNameBytes
	for i := 0; safe && i < len(name); i++ {
		safe = name[i] >= 0x20 && name[i] <= 0x7e
	}
	if safe {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	digest := "~" + hex.EncodeToString(sum[:8])
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < maxNameBytes-len(digest); i++ {
		if c := name[i]; c >= 0x20 && c <= 0x7e {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String() + digest
}
