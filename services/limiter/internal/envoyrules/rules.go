// Package envoyrules is the rule model of Envoy's rate-limit API: it reads
// envoyproxy/ratelimit's YAML configuration (a folder of files, one domain
// each, or the RateLimitConfig resources an xDS server pushes), checks and
// bounds it, merges the files of one domain, and matches a request's
// descriptors to their limits (Match, Override).
//
// Every leaf of a domain's descriptor tree that carries a rate_limit becomes
// one limiter.Policy (fixed_window by default, as Envoy's service does; the
// extension field rate_limit.algorithm picks any Tollgate algorithm).
//
// It knows no transport: the configuration snapshot holds the rules, and
// internal/envoy answers the gRPC API and POST /json with them.
package envoyrules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Bounds of a configuration.
const (
	// MaxFileBytes is the largest configuration file read, in bytes.
	MaxFileBytes = 4 << 20
	// MaxDepth bounds the nesting of descriptors.
	MaxDepth = 16
	// MaxRules bounds the domains and descriptors (at every level) of one
	// configuration, every file or pushed resource together: each costs
	// about a kilobyte loaded, and a configuration is built whole beside
	// the running one.
	MaxRules = 50_000
	// maxNameBytes is the longest policy name (limiter.Policy allows 128).
	maxNameBytes = 128
)

// ErrRules is in the chain of every ConfigError: the rules are wrong, as
// opposed to a folder that cannot be read. The service makes it a
// configuration error (it exits with status 2; a reload is refused).
var ErrRules = errors.New("envoy: invalid rules")

// ConfigError is a problem in one configuration file: the file, the field as
// a path (descriptors[0].rate_limit.unit) and why. It unwraps to ErrRules.
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

// Unwrap makes errors.Is(err, ErrRules) true.
func (e *ConfigError) Unwrap() error { return ErrRules }

// Unit is a rate_limit's unit, numbered as Envoy numbers the unit of an
// answer's current_limit (RateLimitResponse.RateLimit.Unit) and of a
// request's limit override (RateLimitUnit, which lacks WEEK: 7 is a week
// there too, as envoyproxy/ratelimit reads it), so that a transport
// converts either by a cast. The rule model imports neither message
// package: the first comes with the gRPC server's stubs.
type Unit int32

// The units, numbered as Envoy's.
const (
	unitSecond Unit = 1
	unitMinute Unit = 2
	unitHour   Unit = 3
	unitDay    Unit = 4
	unitMonth  Unit = 5
	unitYear   Unit = 6
	unitWeek   Unit = 7
)

// units maps the rate_limit.unit names to a Unit and a window. Month and
// year are 30 and 365 days, as envoyproxy/ratelimit counts them.
var units = map[string]struct {
	unit   Unit
	window time.Duration
}{
	"second": {unitSecond, time.Second},
	"minute": {unitMinute, time.Minute},
	"hour":   {unitHour, time.Hour},
	"day":    {unitDay, 24 * time.Hour},
	"week":   {unitWeek, 7 * 24 * time.Hour},
	"month":  {unitMonth, 30 * 24 * time.Hour},
	"year":   {unitYear, 365 * 24 * time.Hour},
}

// unitNames lists the units from the shortest.
var unitNames = []string{"second", "minute", "hour", "day", "week", "month", "year"}

// unitOf returns the name and window of an Envoy unit; ok is false for
// UNKNOWN and values outside the enum.
func unitOf(u Unit) (name string, window time.Duration, ok bool) {
	for _, name := range unitNames {
		if units[name].unit == u {
			return name, units[name].window, true
		}
	}
	return "", 0, false
}

// overridePolicy is the policy of a request-side limit override of limit
// per unit in domain: fixed_window, as envoyproxy/ratelimit counts, named by
// the domain and the unit only, so that every override of one descriptor in
// one unit counts on one counter whatever limit it asks for.
func overridePolicy(domain, unit string, limit int64) limiter.Policy {
	return limiter.Policy{
		Name:      policyName([]string{domain, "limit_override_" + unit}),
		Algorithm: limiter.FixedWindow,
		Limit:     limit,
		Window:    units[unit].window,
	}
}

// Limit is one configured rate_limit: a leaf of a descriptor tree.
type Limit struct {
	// Policy is what the store decides with. Its Name, derived from the
	// domain and the descriptor path, is unique among the loaded rules; its
	// Limit is 0 (not a valid store policy) when RequestsPerUnit is 0.
	Policy limiter.Policy
	// Name is rate_limit.name, echoed in current_limit and used by replaces.
	Name     string
	Replaces []string
	// Unit and RequestsPerUnit are rate_limit's.
	Unit            Unit
	RequestsPerUnit uint32
	// Unlimited limits are never counted and always answer OK.
	Unlimited bool
	// Quota is quota_mode: over, this limit makes the request over only
	// when every quota limit of the request is (see envoy.Decide).
	Quota bool
	// Metadata is the descriptor's metadata, nil when none.
	Metadata *structpb.Struct
}

// Blocked reports whether the limit refuses everything (requests_per_unit 0).
func (l *Limit) Blocked() bool { return !l.Unlimited && l.RequestsPerUnit == 0 }

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
	file   string   // the file that defined it
	origin string   // the field path, for duplicate errors
}

// where names the descriptor for an error about file: its field path, with
// its file when that is another one (domains merged from several files).
func (n *node) where(file string) string {
	if n.file == file {
		return n.origin
	}
	return n.file + ": " + n.origin
}

// branch holds the descriptors of one key at one level.
type branch struct {
	exact     map[string]*node
	wildcards []*node // in file order
	any       *node
}

// level is one list of descriptors, by key.
type level map[string]*branch

// joined returns the descriptor of lv, under another key than key, that
// envoyproxy/ratelimit keys by the same text as joinedKey (key, or
// key_value): "a_b" without value and "a" with value "b" are one
// descriptor to the peer, which refuses the second. nil when none.
func (lv level) joined(key, joinedKey string) *node {
	for i := 0; i <= len(joinedKey); i++ {
		if i < len(joinedKey) && joinedKey[i] != '_' {
			continue
		}
		b := lv[joinedKey[:i]]
		if b == nil || joinedKey[:i] == key {
			continue
		}
		if i == len(joinedKey) {
			if b.any != nil {
				return b.any
			}
			continue
		}
		value := joinedKey[i+1:]
		if n := b.exact[value]; n != nil {
			return n
		}
		for _, w := range b.wildcards {
			if w.value == value {
				return w
			}
		}
	}
	return nil
}

// clone returns a copy of lv that descriptors can be added to without
// changing lv; the descriptors themselves are shared.
func (lv level) clone() level {
	c := make(level, len(lv))
	for key, b := range lv {
		c[key] = &branch{exact: maps.Clone(b.exact), wildcards: slices.Clone(b.wildcards), any: b.any}
	}
	return c
}

// Options are the settings of the Envoy API that come with its rules: how
// files are read and how answers are made (by internal/envoy, which reads
// them with Rules.Options). They travel with the rules so that a reload
// changes both at once, in one snapshot. Each is named after the
// envoyproxy/ratelimit setting it reproduces, all off by default as there.
type Options struct {
	// MergeDomains merges the descriptors of several files of one domain
	// (MERGE_DOMAIN_CONFIG); a descriptor defined in two of them is still
	// an error. Off, a domain in two files is an error.
	MergeDomains bool
	// ResponseHeaders adds the draft-10 RateLimit-Policy and RateLimit
	// fields, and Retry-After when over the limit, to the answers'
	// response_headers_to_add (LIMIT_RESPONSE_HEADERS_ENABLED, with the
	// IETF fields instead of the peer's RateLimit-Limit/-Remaining/-Reset).
	ResponseHeaders bool
	// DynamicMetadata fills the answers' dynamic_metadata
	// (RESPONSE_DYNAMIC_METADATA; see envoy.Decide).
	DynamicMetadata bool
	// StopIncrementWhenOverLimit counts none of a request's descriptors
	// but the ones over their limit when any is
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; see envoy.Decide).
	StopIncrementWhenOverLimit bool
	// LimitHeaders adds envoyproxy/ratelimit's own header fields
	// (LIMIT_RESPONSE_HEADERS_ENABLED) to the answers'
	// response_headers_to_add, named by LimitHeaderNames (see
	// envoy.Decide).
	LimitHeaders     bool
	LimitHeaderNames LimitHeaderNames
	// QuotaMode puts every descriptor in quota mode (QUOTA_MODE), as
	// quota_mode: true on each would.
	QuotaMode bool
	// ShadowMode answers OK overall whatever the descriptors answer
	// (SHADOW_MODE); each descriptor's status stays as it is.
	ShadowMode bool
}

// LimitHeaderNames name envoyproxy/ratelimit's header fields
// (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
type LimitHeaderNames struct {
	Limit, Remaining, Reset string
}

// Rules are the loaded domains. They are immutable once loaded and safe for
// concurrent use.
type Rules struct {
	domains  map[string]level
	files    map[string]string // domain -> first file that defined it
	policies []limiter.Policy  // every stored limit's policy
	names    map[string]string // policy name -> field path that made it
	count    int               // domains and descriptors, at most MaxRules
	opts     Options
}

// NewRules returns empty rules; add files with Add.
func NewRules(o Options) *Rules {
	return &Rules{domains: map[string]level{}, files: map[string]string{}, names: map[string]string{}, opts: o}
}

// Options returns the options the rules were loaded with.
func (r *Rules) Options() Options { return r.opts }

// Policies returns the policy of every limit the store decides, sorted by
// name: the service probes and prunes them.
func (r *Rules) Policies() []limiter.Policy {
	out := slices.Clone(r.policies)
	slices.SortFunc(out, func(a, b limiter.Policy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Domains returns the loaded domain names, sorted.
func (r *Rules) Domains() []string {
	names := make([]string, 0, len(r.domains))
	for d := range r.domains {
		names = append(names, d)
	}
	sort.Strings(names)
	return names
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
