// Package memstore keeps rate-limit state in the memory of one process.
//
// The keys are spread over shards by a seeded hash of (policy name, subject,
// scope), computed once per call; each shard has its own mutex and a map from
// that hash to the key's entry (entries whose hashes collide are chained and
// told apart by their key), so decisions on keys of different shards never
// wait for each other, and there is no global lock on the decision path. A
// decision on a key that already exists allocates nothing for fixed_window,
// sliding_window and token_bucket.
//
// Memory is bounded by a number of keys ([WithMaxKeys]): when a shard is
// full, a new key evicts the entry, among a few sampled ones, whose state
// expires first, as Redis does with its approximated LRU. An evicted key
// starts again from a full budget, so size the bound above the number of
// keys that are active within one window. A sliding_log key holds one event
// per admitted attempt of the last two windows: up to 2×limit events.
//
// Each key keeps enough state for the clock to step back by one window: the
// counts of its last three fixed windows, and its sliding log events of the
// last two windows.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Defaults of the options.
const (
	DefaultMaxKeys = 1_000_000
	DefaultShards  = 64
	// MaxShards bounds WithShards.
	MaxShards = 1 << 16
	// evictionSamples is how many entries a full shard compares to choose
	// the one to evict.
	evictionSamples = 5
)

type config struct {
	maxKeys int
	shards  int
}

// Option configures New.
type Option func(*config)

// WithMaxKeys bounds the number of keys held (across every policy) to n.
// Default 1,000,000; n < 1 keeps the default. The bound is split evenly
// across the shards, so a shard may evict while others have room.
func WithMaxKeys(n int) Option {
	return func(c *config) {
		if n >= 1 {
			c.maxKeys = n
		}
	}
}

// WithShards sets the number of shards, rounded up to a power of two and
// capped at MaxShards, and lowered when needed so that every shard can hold
// at least one key. Default 64; n < 1 keeps the default.
func WithShards(n int) Option {
	return func(c *config) {
		if n >= 1 {
			c.shards = min(n, MaxShards)
		}
	}
}

// Store is a limiter.Store in memory. It is safe for concurrent use; each
// method is atomic for the keys it touches, except sliding_log_unsafe's
// Allow, which is two separate steps on purpose.
type Store struct {
	seed      maphash.Seed
	shards    []shard
	mask      uint64
	closed    atomic.Bool
	evictions atomic.Uint64
}

var _ limiter.Store = (*Store)(nil)

// shard is one lock and the keys it guards, padded to a cache line so that
// neighbouring shards' locks do not share one. entries maps a key's hash to
// its entry, the first of a chain (linked by next) when hashes collide; list
// holds the same entries in no order, for sampling and sweeps, each entry
// knowing its index.
type shard struct {
	mu      sync.Mutex
	entries map[uint64]*entry
	list    []*entry
	max     int
	_       [16]byte
}

// find returns the entry of k, whose hash is h, or nil. sh must be locked.
func (sh *shard) find(k *mapKey, h uint64) *entry {
	for e := sh.entries[h]; e != nil; e = e.next {
		if e.key == *k {
			return e
		}
	}
	return nil
}

// add stores e under its hash, first in the chain. sh must be locked.
func (sh *shard) add(e *entry) {
	e.index = len(sh.list)
	sh.list = append(sh.list, e)
	e.next = sh.entries[e.hash]
	sh.entries[e.hash] = e
}

// remove deletes the entry at index i of the list, moving the last one into
// its place, and unlinks it from its chain. sh must be locked.
func (sh *shard) remove(i int) {
	e := sh.list[i]
	last := sh.list[len(sh.list)-1]
	sh.list[i], last.index = last, i
	sh.list[len(sh.list)-1] = nil
	sh.list = sh.list[:len(sh.list)-1]
	switch head := sh.entries[e.hash]; {
	case head == e && e.next == nil:
		delete(sh.entries, e.hash)
	case head == e:
		sh.entries[e.hash] = e.next
	default:
		for head.next != e {
			head = head.next
		}
		head.next = e.next
	}
	e.next = nil
}

// mapKey names a key under a policy. Its strings are the caller's on lookup
// and private copies once stored.
type mapKey struct {
	policy, subject, scope string
}

// clone copies k's strings into one allocation of their own, so that the
// store neither keeps the caller's buffers alive nor scatters a key's bytes
// over three places in memory.
func (k *mapKey) clone() mapKey {
	var b strings.Builder
	b.Grow(len(k.policy) + len(k.subject) + len(k.scope))
	b.WriteString(k.policy)
	b.WriteString(k.subject)
	b.WriteString(k.scope)
	all := b.String()
	i, j := len(k.policy), len(k.policy)+len(k.subject)
	return mapKey{all[:i], all[i:j], all[j:]}
}

// New returns an empty store.
func New(opts ...Option) *Store {
	cfg := config{maxKeys: DefaultMaxKeys, shards: DefaultShards}
	for _, o := range opts {
		o(&cfg)
	}
	n := 1 << bits.Len(uint(cfg.shards-1)) // next power of two
	for n > cfg.maxKeys {
		n /= 2
	}
	s := &Store{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1)}
	for i := range s.shards {
		// Spread the remainder so that the shards hold exactly maxKeys.
		s.shards[i].max = cfg.maxKeys / n
		if i < cfg.maxKeys%n {
			s.shards[i].max++
		}
		s.shards[i].entries = make(map[uint64]*entry)
	}
	return s
}

// shard returns k's hash and the shard that holds k.
func (s *Store) shard(k *mapKey) (*shard, uint64) {
	h := maphash.Comparable(s.seed, *k)
	return &s.shards[h&s.mask], h
}

// Allow counts r on r.Key under p and decides. It never blocks on anything
// but the key's shard lock; ctx is not consulted.
func (s *Store) Allow(_ context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	if err := limiter.CheckRequest(p, r); err != nil {
		return limiter.Decision{}, fmt.Errorf("memstore: allow: %w", err)
	}
	if s.closed.Load() {
		return limiter.Decision{}, fmt.Errorf("memstore: allow: %w", limiter.ErrClosed)
	}
	k := mapKey{p.Name, r.Key.Subject, r.Key.Scope}
	sh, h := s.shard(&k)
	if p.Algorithm == limiter.SlidingLogUnsafe {
		return s.allowUnsafe(sh, &k, h, p, r), nil
	}
	sh.mu.Lock()
	d := s.get(sh, &k, h, p).decide(p, r.Cost, r.Now)
	sh.mu.Unlock()
	return d, nil
}

// allowUnsafe is the seed's check-then-insert, kept racy on purpose to
// demonstrate the race: it counts under the lock, lets go of it (and yields,
// as the seed's round trip to the database would), then records the attempt
// under the lock again. Concurrent attempts can all pass the count before any
// is recorded. Never use it to protect anything.
func (s *Store) allowUnsafe(sh *shard, k *mapKey, h uint64, p limiter.Policy, r limiter.Request) limiter.Decision {
	sh.mu.Lock()
	var events []limiter.Event
	if e := sh.find(k, h); e != nil && e.holds(p) {
		events = e.events
	}
	d := limiter.SlidingLogDecide(p, events, r.Cost, r.Now)
	sh.mu.Unlock()
	if !d.Allowed {
		return d
	}
	runtime.Gosched()
	sh.mu.Lock()
	s.get(sh, k, h, p).record(r.Now.UnixNano(), r.Cost)
	sh.mu.Unlock()
	return d
}

// Peek returns k's state under p at now without counting or storing
// anything.
func (s *Store) Peek(_ context.Context, p limiter.Policy, k limiter.Key, now time.Time) (limiter.Decision, error) {
	if err := validate(p, k); err != nil {
		return limiter.Decision{}, fmt.Errorf("memstore: peek: %w", err)
	}
	if s.closed.Load() {
		return limiter.Decision{}, fmt.Errorf("memstore: peek: %w", limiter.ErrClosed)
	}
	mk := mapKey{p.Name, k.Subject, k.Scope}
	sh, h := s.shard(&mk)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.find(&mk, h); e != nil && e.holds(p) {
		return e.decide(p, 0, now), nil
	}
	var fresh entry
	return fresh.decide(p, 0, now), nil
}

// Reset forgets k under p and returns how many records it held: window
// counts, log events, or its bucket.
func (s *Store) Reset(_ context.Context, p limiter.Policy, k limiter.Key) (int64, error) {
	if err := validate(p, k); err != nil {
		return 0, fmt.Errorf("memstore: reset: %w", err)
	}
	if s.closed.Load() {
		return 0, fmt.Errorf("memstore: reset: %w", limiter.ErrClosed)
	}
	mk := mapKey{p.Name, k.Subject, k.Scope}
	sh, h := s.shard(&mk)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(&mk, h)
	if e == nil {
		return 0, nil
	}
	sh.remove(e.index)
	return e.records(), nil
}

// ResetSubject forgets every key of subject under p, whatever its scope, and
// returns how many records they held. It visits every shard, one at a time.
func (s *Store) ResetSubject(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	if err := validate(p, limiter.Key{Subject: subject}); err != nil {
		return 0, fmt.Errorf("memstore: reset subject: %w", err)
	}
	return s.sweep(ctx, "reset subject", func(e *entry) int64 {
		if e.key.policy != p.Name || e.key.subject != subject {
			return 0
		}
		n := e.records()
		e.state = state{}
		return n
	})
}

// Prune removes, for the keys of policies, the state that can no longer
// affect a decision at now or later: fixed windows that have ended, sliding
// windows that ended more than a window ago, log events at or before
// now−window, buckets that are full again. Keys left empty are deleted. It
// returns how many records it removed, visiting one shard at a time.
func (s *Store) Prune(ctx context.Context, now time.Time, policies []limiter.Policy) (int64, error) {
	names := make(map[string]struct{}, len(policies))
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return 0, fmt.Errorf("memstore: prune: %w", err)
		}
		names[p.Name] = struct{}{}
	}
	n := now.UnixNano()
	return s.sweep(ctx, "prune", func(e *entry) int64 {
		if _, ok := names[e.key.policy]; !ok {
			return 0
		}
		return e.prune(n)
	})
}

// sweep calls f on every entry, shard by shard under each shard's lock,
// deletes the entries f leaves empty, and sums what f returns.
func (s *Store) sweep(ctx context.Context, what string, f func(*entry) int64) (int64, error) {
	var total int64
	for i := range s.shards {
		if s.closed.Load() {
			return total, fmt.Errorf("memstore: %s: %w", what, limiter.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("memstore: %s: %w", what, err)
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		// Backwards, so that remove only moves entries already visited.
		for i := len(sh.list) - 1; i >= 0; i-- {
			e := sh.list[i]
			total += f(e)
			if e.records() == 0 {
				sh.remove(i)
			}
		}
		sh.mu.Unlock()
	}
	return total, nil
}

// Ping returns nil, or an error wrapping limiter.ErrClosed after Close.
func (s *Store) Ping(context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("memstore: ping: %w", limiter.ErrClosed)
	}
	return nil
}

// Close drops every key; later calls return errors wrapping
// limiter.ErrClosed. Closing twice is harmless.
func (s *Store) Close() error {
	s.closed.Store(true)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.entries)
		clear(sh.list)
		sh.list = sh.list[:0]
		sh.mu.Unlock()
	}
	return nil
}

// Len returns how many keys the store holds now, across every policy. It
// locks each shard in turn, so it is exact only when nothing else runs.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.list)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many keys were evicted because their shard was full,
// since New.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// validate checks a policy and a key.
func validate(p limiter.Policy, k limiter.Key) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return k.Validate()
}

// get returns k's entry under p, creating it (and evicting another when the
// shard is full) when missing, and clearing it when p's algorithm or window
// changed since it was written. sh must be locked.
func (s *Store) get(sh *shard, k *mapKey, h uint64, p limiter.Policy) *entry {
	if e := sh.find(k, h); e != nil {
		if !e.holds(p) {
			e.state = state{alg: p.Algorithm, window: int64(p.Window)}
		}
		return e
	}
	if len(sh.list) >= sh.max {
		sh.evict()
		s.evictions.Add(1)
	}
	e := &entry{key: k.clone(), hash: h, state: state{alg: p.Algorithm, window: int64(p.Window)}}
	sh.add(e)
	return e
}

// evict deletes, among a few entries drawn at random, the one whose state
// expires first: Redis's sampled eviction, O(1). sh must be locked and not
// empty.
func (sh *shard) evict() {
	victim := rand.IntN(len(sh.list))
	first := sh.list[victim].expiry()
	for range evictionSamples - 1 {
		i := rand.IntN(len(sh.list))
		if exp := sh.list[i].expiry(); exp < first {
			victim, first = i, exp
		}
	}
	sh.remove(victim)
}
