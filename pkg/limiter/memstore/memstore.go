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
// Memory is bounded by a number of records ([WithMaxKeys], and per policy
// [WithPolicyMaxKeys]): each key counts one, and each 16 sliding_log events
// it holds one more (16 events take about the memory of a key). When a shard is full, a new key, or a key whose new events
// take the shard over its share, evicts others: among a few
// sampled entries, one that is not exhausted (whose holder could still be
// admitted), the one whose state expires first, as Redis does with its
// approximated LRU. An exhausted key is the last to go: an evicted key starts
// again from a full budget, so evicting it would let its holder in again.
// Only when every sampled entry is exhausted is one of them evicted anyway
// ([Store.RefusedEvictions], [WithEvictionHook]); with [WithRefuseWhenFull]
// the store refuses the new key instead (fail closed when full). Size the
// bound above what is active within one window. A sliding_log key holds one
// event per admitted attempt of the last two windows: up to 2×limit events.
// A key never evicts itself; with WithRefuseWhenFull the events of keys
// already held may take a shard over its bound until they expire.
//
// Each key keeps enough state for the clock to step back by one window: the
// counts of its last three fixed windows, and its sliding log events of the
// last two windows.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
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
)

type config struct {
	maxKeys        int
	shards         int
	policyMax      map[string]int
	refuseWhenFull bool
	hook           func(Eviction)
}

// Option configures New.
type Option func(*config)

// WithMaxKeys bounds the number of keys held (across every policy without a
// bound of its own, see WithPolicyMaxKeys) to n.
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

// WithPolicyMaxKeys gives the keys of the named policy their own bound of n,
// apart from every other policy's: a flood of keys under one policy (say,
// unauthenticated /ping clients) cannot push another policy's state out.
// n < 1 removes the policy's own bound.
func WithPolicyMaxKeys(policy string, n int) Option {
	return func(c *config) {
		if c.policyMax == nil {
			c.policyMax = map[string]int{}
		}
		if n < 1 {
			delete(c.policyMax, policy)
			return
		}
		c.policyMax[policy] = n
	}
}

// WithRefuseWhenFull makes a full shard refuse a new key (a denial whose
// RetryAfter is one window of its policy, counted by [Store.RefusedNew])
// instead of evicting a key whose state still matters: fail closed when
// full. Keys whose state has expired are still replaced.
func WithRefuseWhenFull() Option {
	return func(c *config) { c.refuseWhenFull = true }
}

// WithEvictionHook calls f after each eviction, with the victim's policy and
// whether it was exhausted. f runs under a shard's lock: it must be quick,
// must not block and must not call the store.
func WithEvictionHook(f func(Eviction)) Option {
	return func(c *config) { c.hook = f }
}

// Eviction describes one evicted key, for WithEvictionHook.
type Eviction struct {
	// Policy is the evicted key's policy name.
	Policy string
	// Refused is true when the key was exhausted: its holder gets a fresh
	// budget. It happens only when every sampled key of a full shard is.
	Refused bool
}

// Store is a limiter.Store in memory. It is safe for concurrent use; each
// method is atomic for the keys it touches, except sliding_log_unsafe's
// Allow, which is two separate steps on purpose.
type Store struct {
	seed     maphash.Seed
	main     part
	byPolicy map[string]*part // policies with a bound of their own
	parts    []*part          // main and byPolicy's, for the sweeps
	closed   atomic.Bool
	// evictions counts every eviction, refusedEvictions those of exhausted
	// keys, refusedNew the new keys refused by WithRefuseWhenFull.
	evictions, refusedEvictions, refusedNew atomic.Uint64
	refuseWhenFull                          bool
	hook                                    func(Eviction)
}

var _ limiter.Store = (*Store)(nil)

// New returns an empty store.
func New(opts ...Option) *Store {
	cfg := config{maxKeys: DefaultMaxKeys, shards: DefaultShards}
	for _, o := range opts {
		o(&cfg)
	}
	s := &Store{seed: maphash.MakeSeed(), main: newPart(cfg.maxKeys, cfg.shards), refuseWhenFull: cfg.refuseWhenFull, hook: cfg.hook}
	s.parts = append(s.parts, &s.main)
	for name, n := range cfg.policyMax {
		if s.byPolicy == nil {
			s.byPolicy = map[string]*part{}
		}
		pt := newPart(n, cfg.shards)
		s.byPolicy[name] = &pt
		s.parts = append(s.parts, &pt)
	}
	return s
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
	e := s.get(sh, &k, h, p, r.Now)
	if e == nil {
		sh.mu.Unlock()
		return s.full(p, r.Now), nil
	}
	before := e.weight()
	d, err := e.decide(p, r.Cost, r.Now)
	if err != nil {
		sh.mu.Unlock()
		return d, err
	}
	e.mark(d, r.Now)
	s.grew(sh, e, before, r.Now)
	sh.mu.Unlock()
	return d, nil
}

// grew accounts for e's weight having changed from before, and evicts other
// entries while the shard is over its bound. sh must be locked.
func (s *Store) grew(sh *shard, e *entry, before int, now time.Time) {
	sh.used += e.weight() - before
	for sh.used > sh.max && len(sh.list) > 1 && s.evict(sh, e, now.UnixNano()) {
	}
}

// allowUnsafe is seed 001's check-then-insert (docs/seeds.md), kept racy on purpose to
// demonstrate the race: it counts under the lock, lets go of it (and yields,
// as seed 001's round trip to the database would), then records the attempt
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
	e := s.get(sh, k, h, p, r.Now)
	if e != nil {
		before := e.weight()
		e.record(r.Now.UnixNano(), r.Cost)
		s.grew(sh, e, before, r.Now)
	}
	sh.mu.Unlock()
	if e == nil {
		return s.full(p, r.Now)
	}
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
		return e.decide(p, 0, now)
	}
	var fresh entry
	return fresh.decide(p, 0, now)
}

// Reset forgets k under p and returns the units its state counted (see
// limiter.Store).
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
	return e.units(), nil
}

// ResetSubject forgets every key of subject under p, whatever its scope, and
// returns the units their state counted. It visits every shard, one at a time.
func (s *Store) ResetSubject(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	if err := validate(p, limiter.Key{Subject: subject}); err != nil {
		return 0, fmt.Errorf("memstore: reset subject: %w", err)
	}
	return s.sweep(ctx, "reset subject", func(e *entry) int64 {
		if e.key.policy != p.Name || e.key.subject != subject {
			return 0
		}
		n := e.units()
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
	var unknown error // sweep calls f in this goroutine
	total, err := s.sweep(ctx, "prune", func(e *entry) int64 {
		if _, ok := names[e.key.policy]; !ok {
			return 0
		}
		dropped, err := e.prune(n)
		if err != nil && unknown == nil {
			unknown = err
		}
		return dropped
	})
	return total, errors.Join(err, unknown)
}

// sweep calls f on every entry, shard by shard under each shard's lock,
// deletes the entries f leaves empty, and sums what f returns.
func (s *Store) sweep(ctx context.Context, what string, f func(*entry) int64) (int64, error) {
	var total int64
	for sh := range s.allShards() {
		if s.closed.Load() {
			return total, fmt.Errorf("memstore: %s: %w", what, limiter.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("memstore: %s: %w", what, err)
		}
		sh.mu.Lock()
		// Backwards, so that remove only moves entries already visited.
		for i := len(sh.list) - 1; i >= 0; i-- {
			e := sh.list[i]
			before := e.weight()
			total += f(e)
			sh.used += e.weight() - before
			if e.records() == 0 {
				sh.remove(i)
			}
		}
		sh.mu.Unlock()
	}
	return total, nil
}

// Capabilities says that a call never waits: it takes one shard's lock for
// one update, and does no I/O.
func (s *Store) Capabilities() limiter.Capabilities { return limiter.Capabilities{NeverWaits: true} }

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
	for sh := range s.allShards() {
		sh.mu.Lock()
		clear(sh.entries)
		clear(sh.list)
		sh.list = sh.list[:0]
		sh.used = 0
		sh.mu.Unlock()
	}
	return nil
}

// Len returns how many keys the store holds now, across every policy. It
// locks each shard in turn, so it is exact only when nothing else runs.
func (s *Store) Len() int {
	n := 0
	for sh := range s.allShards() {
		sh.mu.Lock()
		n += len(sh.list)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many keys were evicted because their shard was full,
// since New.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// RefusedEvictions returns how many of the evicted keys were exhausted, so
// that their holders got a fresh budget: a bound too small for the keys
// active within a window, or a flood of exhausted keys.
func (s *Store) RefusedEvictions() uint64 { return s.refusedEvictions.Load() }

// RefusedNew returns how many new keys WithRefuseWhenFull refused, since New.
func (s *Store) RefusedNew() uint64 { return s.refusedNew.Load() }

// validate checks a policy and a key.
func validate(p limiter.Policy, k limiter.Key) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return k.Validate()
}

// get returns k's entry under p, creating it (and evicting another when the
// shard is full) when missing, and clearing it when p's algorithm or window
// changed since it was written. It returns nil when the shard is full and
// WithRefuseWhenFull forbids evicting. sh must be locked.
func (s *Store) get(sh *shard, k *mapKey, h uint64, p limiter.Policy, now time.Time) *entry {
	if e := sh.find(k, h); e != nil {
		if !e.holds(p) {
			sh.used -= e.weight() - 1
			e.state = state{alg: p.Algorithm, window: int64(p.Window)}
		}
		return e
	}
	for sh.used >= sh.max && len(sh.list) > 0 {
		if !s.evict(sh, nil, now.UnixNano()) {
			return nil
		}
	}
	e := &entry{key: k.clone(), hash: h, state: state{alg: p.Algorithm, window: int64(p.Window)}}
	sh.add(e)
	return e
}
