package memstore

import (
	"hash/maphash"
	"iter"
	"math/bits"
	"strings"
	"sync"
)

// part is a set of shards holding at most a number of keys.
type part struct {
	shards []shard
	mask   uint64
}

// shard is one lock and the keys it guards, padded to a cache line so that
// neighbouring shards' locks do not share one. entries maps a key's hash to
// its entry, the first of a chain (linked by next) when hashes collide; list
// holds the same entries in no order, for sampling and sweeps, each entry
// knowing its index. used sums the entries' weights, bounded by max.
type shard struct {
	mu      sync.Mutex
	entries map[uint64]*entry
	list    []*entry
	used    int
	max     int
	_       [8]byte
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
	sh.used += e.weight()
	e.index = len(sh.list)
	sh.list = append(sh.list, e)
	e.next = sh.entries[e.hash]
	sh.entries[e.hash] = e
}

// remove deletes the entry at index i of the list, moving the last one into
// its place, and unlinks it from its chain. sh must be locked.
func (sh *shard) remove(i int) {
	e := sh.list[i]
	sh.used -= e.weight()
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

// newPart returns maxKeys of room over shards shards, rounded up to a power
// of two and lowered so that each holds at least one key.
func newPart(maxKeys, shards int) part {
	n := 1 << bits.Len(uint(shards-1)) // next power of two
	for n > maxKeys {
		n /= 2
	}
	pt := part{shards: make([]shard, n), mask: uint64(n - 1)}
	for i := range pt.shards {
		// Spread the remainder so that the shards hold exactly maxKeys.
		pt.shards[i].max = maxKeys / n
		if i < maxKeys%n {
			pt.shards[i].max++
		}
		pt.shards[i].entries = make(map[uint64]*entry)
	}
	return pt
}

// shard returns k's hash and the shard that holds k.
func (s *Store) shard(k *mapKey) (*shard, uint64) {
	pt := &s.main
	if s.byPolicy != nil {
		if own := s.byPolicy[k.policy]; own != nil {
			pt = own
		}
	}
	h := maphash.Comparable(s.seed, *k)
	return &pt.shards[h&pt.mask], h
}

// allShards yields every shard of every part.
func (s *Store) allShards() iter.Seq[*shard] {
	return func(yield func(*shard) bool) {
		for _, pt := range s.parts {
			for i := range pt.shards {
				if !yield(&pt.shards[i]) {
					return
				}
			}
		}
	}
}
