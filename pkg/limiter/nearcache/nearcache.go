// Package nearcache keeps refusals near the caller: a [limiter.Store] wrapper
// that, once the store has refused an attempt on a key until a known time,
// answers further attempts of the same cost on that key itself until then,
// without asking the store. A flood against one key then costs the store
// (a Redis shared by many instances) one call per instance and refusal
// period instead of one per attempt, as envoyproxy/ratelimit's local cache
// of over-limit keys does.
//
// # When its answer is the store's
//
// A refusal of cost c at time t with RetryAfter r says: with nothing else
// happening, no attempt of cost c passes before t+r. The cache repeats it
// for attempts of exactly that cost (a refusal of cost 5 says nothing about
// cost 1) on the same policy (same name, algorithm, limit and window) while
// their Request.Now is in [t, t+r). That is the store's own answer when:
//
//   - refused attempts change no state. True of sliding_log, sliding_window
//     and token_bucket (and sliding_log_unsafe): DefaultEnabled. Not of
//     fixed_window, which counts every attempt, refused ones too (seed
//     000's upsert, docs/seeds.md): cached refusals would still be refusals, but the count the store
//     holds (/status, the count member of answers) would miss them. So it is
//     off for fixed_window unless the caller enables it knowingly.
//   - time only runs forward and at the store's pace (requests without a
//     Now are never cached). Request.Now is read
//     before the store decides, so t+r never ends later than the store's own
//     refusal, even when the store reads its own clock (Redis's TIME).
//   - nothing removes state meanwhile. Other instances' attempts only add to
//     it; an admin reset removes it: this wrapper forgets its own entries for
//     the key (Reset, ResetSubject), but other instances keep refusing from
//     their caches until their refusals' retry times, at most MaxHold.
//
// The verdict and RetryAfter are the store's (RetryAfter and ResetAfter
// shortened by the time elapsed since the refusal); Remaining and Count are
// those of the refusal being repeated, as the store last reported them.
//
// Peek, Prune, Ping and Close pass through.
package nearcache

import (
	"context"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Defaults of the options.
const (
	DefaultMaxKeys = 100_000
	DefaultMaxHold = time.Minute
)

// shards spread the entries over this many locks.
const shards = 64

// Store is a limiter.Store that answers repeated refused attempts from a
// local cache. It is safe for concurrent use.
type Store struct {
	inner   limiter.Store
	enabled func(limiter.Policy) bool
	*cache
}

// cache is the state that the views made by With share.
type cache struct {
	maxHold time.Duration
	perShrd int // entries per shard
	seed    maphash.Seed
	shards  [shards]shard
	hits    atomic.Uint64
}

var _ limiter.Store = (*Store)(nil)

type shard struct {
	mu      sync.Mutex
	entries map[string]entry
}

// entry is one cached refusal.
type entry struct {
	policy limiter.Policy
	cost   int64
	at     time.Time // the refused attempt's Request.Now
	until  time.Time // at + RetryAfter, at most at + maxHold
	d      limiter.Decision
}

// Option configures New.
type Option func(*cache)

// WithMaxKeys bounds the cached refusals (n >= 1; default 100,000). When
// full, a new refusal replaces an expired one, or any one.
func WithMaxKeys(n int) Option { return func(c *cache) { c.perShrd = max(1, n/shards) } }

// WithMaxHold bounds how long one refusal is repeated (d > 0; default a
// minute), whatever its RetryAfter (a daily quota's refusal would otherwise
// stand for hours after an admin reset on another instance).
func WithMaxHold(d time.Duration) Option { return func(c *cache) { c.maxHold = max(d, 1) } }

// DefaultEnabled is true for the algorithms whose refusals change no state:
// all but fixed_window.
func DefaultEnabled(p limiter.Policy) bool { return p.Algorithm != limiter.FixedWindow }

// New wraps inner; enabled says for which policies refusals are cached (nil:
// DefaultEnabled). Closing the Store closes inner.
func New(inner limiter.Store, enabled func(limiter.Policy) bool, opts ...Option) *Store {
	if enabled == nil {
		enabled = DefaultEnabled
	}
	c := &cache{maxHold: DefaultMaxHold, perShrd: DefaultMaxKeys / shards, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(c)
	}
	for i := range c.shards {
		c.shards[i].entries = map[string]entry{}
	}
	return &Store{inner: inner, enabled: enabled, cache: c}
}

// With returns a Store on inner, caching for the policies enabled says
// (nil: DefaultEnabled), that shares s's cached refusals and hit count: a
// service makes one per configuration it reloads, the refusals of policies
// that did not change standing across the reload (a changed policy is a
// different policy: its refusals are not reused).
func (s *Store) With(inner limiter.Store, enabled func(limiter.Policy) bool) *Store {
	if enabled == nil {
		enabled = DefaultEnabled
	}
	return &Store{inner: inner, enabled: enabled, cache: s.cache}
}

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() limiter.Store { return s.inner }

// Hits returns how many attempts the cache answered without the store.
func (c *cache) Hits() uint64 { return c.hits.Load() }

// Len returns how many refusals are cached, expired ones included until
// they are replaced or pruned.
func (c *cache) Len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// subjectKey starts the cache keys of subject under policy: each part
// after its length, so that no two (policy, subject, scope) triples share a
// cache key whatever bytes they hold.
func subjectKey(policy, subject string) string {
	return strconv.Itoa(len(policy)) + ":" + policy + strconv.Itoa(len(subject)) + ":" + subject
}

// cacheKey names k under policy.
func cacheKey(policy string, k limiter.Key) string { return subjectKey(policy, k.Subject) + k.Scope }

func (c *cache) shard(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)%shards]
}

// Allow answers from the cache when it holds a refusal of the same policy
// and cost that still stands at r.Now; otherwise it asks the store and
// caches a refusal.
func (s *Store) Allow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	if !s.enabled(p) {
		return s.inner.Allow(ctx, p, r)
	}
	key := cacheKey(p.Name, r.Key)
	sh := s.shard(key)
	sh.mu.Lock()
	e, ok := sh.entries[key]
	sh.mu.Unlock()
	if ok && e.policy == p && e.cost == r.Cost && !r.Now.Before(e.at) && r.Now.Before(e.until) {
		s.hits.Add(1)
		elapsed := r.Now.Sub(e.at)
		d := e.d
		d.RetryAfter -= elapsed
		d.ResetAfter = max(0, d.ResetAfter-elapsed)
		return d, nil
	}
	d, err := s.inner.Allow(ctx, p, r)
	if err != nil || d.Allowed || d.RetryAfter <= 0 || r.Now.IsZero() {
		if ok {
			sh.mu.Lock()
			delete(sh.entries, key)
			sh.mu.Unlock()
		}
		return d, err
	}
	e = entry{policy: p, cost: r.Cost, at: r.Now, until: r.Now.Add(min(d.RetryAfter, s.maxHold)), d: d}
	sh.mu.Lock()
	if _, had := sh.entries[key]; !had && len(sh.entries) >= s.perShrd {
		sh.evict(r.Now)
	}
	sh.entries[key] = e
	sh.mu.Unlock()
	return d, nil
}

// evict removes the expired entries at now, or one entry when none is; mu
// is held.
func (sh *shard) evict(now time.Time) {
	removed := false
	for k, e := range sh.entries {
		if !now.Before(e.until) {
			delete(sh.entries, k)
			removed = true
		}
	}
	if removed {
		return
	}
	for k := range sh.entries {
		delete(sh.entries, k)
		return
	}
}

// Peek asks the store: a peek counts nothing, and callers use it to see
// the real state. When the store has room for the cost of a refusal cached
// for k (a reset through another instance), that refusal is dropped: the
// state a caller sees and the next answer agree.
func (s *Store) Peek(ctx context.Context, p limiter.Policy, k limiter.Key, now time.Time) (limiter.Decision, error) {
	d, err := s.inner.Peek(ctx, p, k, now)
	if err == nil {
		s.drop(cacheKey(p.Name, k), func(e entry) bool { return d.Remaining >= e.cost })
	}
	return d, err
}

// Reset forgets k under p here and in the store, and returns the store's
// units.
func (s *Store) Reset(ctx context.Context, p limiter.Policy, k limiter.Key) (int64, error) {
	s.drop(cacheKey(p.Name, k), func(entry) bool { return true })
	return s.inner.Reset(ctx, p, k)
}

// drop deletes the entry of key if it holds one for which stale is true.
func (c *cache) drop(key string, stale func(entry) bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	if e, ok := sh.entries[key]; ok && stale(e) {
		delete(sh.entries, key)
	}
	sh.mu.Unlock()
}

// ResetSubject forgets every key of subject under p here and in the store.
func (s *Store) ResetSubject(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	prefix := subjectKey(p.Name, subject)
	s.forget(func(_ entry, k string) bool { return strings.HasPrefix(k, prefix) })
	return s.inner.ResetSubject(ctx, p, subject)
}

// Prune drops the refusals that no longer stand at now and prunes the store.
func (s *Store) Prune(ctx context.Context, now time.Time, policies []limiter.Policy) (int64, error) {
	s.forget(func(e entry, _ string) bool { return !now.Before(e.until) })
	return s.inner.Prune(ctx, now, policies)
}

// forget deletes the entries for which drop is true.
func (c *cache) forget(drop func(e entry, key string) bool) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			if drop(e, k) {
				delete(sh.entries, k)
			}
		}
		sh.mu.Unlock()
	}
}

// Capabilities are the wrapped store's.
func (s *Store) Capabilities() limiter.Capabilities { return limiter.CapabilitiesOf(s.inner) }

// Ping pings the store.
func (s *Store) Ping(ctx context.Context) error { return s.inner.Ping(ctx) }

// Close closes the store.
func (s *Store) Close() error { return s.inner.Close() }
