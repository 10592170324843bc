// Package offenders tells who is being rate limited without one metric
// series per client: a Space-Saving heavy-hitters sketch (Metwally, Agrawal
// and El Abbadi, 2005) keeps k counters whatever the number of distinct
// keys, and a Tracker rotates two sketches so that its report covers the
// recent past only.
//
// Space-Saving's guarantee, for a sketch that has seen N items: every item
// seen more than N/k times is monitored; a monitored item's count
// over-estimates its true count by at most its reported error; an item that
// is not monitored was seen at most Min times.
package offenders

import (
	"cmp"
	"slices"
)

// Item identifies what is counted: a policy and a client key (already in the
// form to report: hashed or raw, the caller's choice).
type Item struct {
	Policy string
	Key    string
}

// Entry is one monitored item. Its true count lies in [Count-Error, Count].
type Entry struct {
	Item
	Count uint64 // over-estimate of the times Item was recorded
	Error uint64 // how much Count may over-estimate
}

// Sketch is a Space-Saving summary with a fixed capacity. The zero value is
// not usable: call NewSketch. A Sketch is not safe for concurrent use (a
// Tracker serialises its access).
type Sketch struct {
	capacity int
	seen     uint64       // N: every Record
	index    map[Item]int // an item's position in entries
	entries  []Entry      // a binary min-heap on Count
	admit    *admission   // estimates of the items not monitored
}

// NewSketch returns an empty sketch that monitors at most capacity items;
// capacity < 1 counts as 1.
func NewSketch(capacity int) *Sketch {
	capacity = max(capacity, 1)
	return &Sketch{capacity: capacity, index: make(map[Item]int, capacity), entries: make([]Entry, 0, capacity), admit: newAdmission()}
}

// Record counts one occurrence of it. When the sketch is full and it is not
// monitored, it takes the place of the item with the smallest count, and
// inherits that count as its error, once it has been seen more often than
// that count (see admit.go). O(log capacity); no allocation once the sketch
// is full (see BenchmarkTrackerRecord).
func (s *Sketch) Record(it Item) {
	s.seen++
	estimate := s.admit.add(it)
	if i, ok := s.index[it]; ok {
		s.entries[i].Count++
		s.siftDown(i)
		return
	}
	if len(s.entries) < s.capacity {
		s.index[it] = len(s.entries)
		s.entries = append(s.entries, Entry{Item: it, Count: 1})
		s.siftUp(len(s.entries) - 1)
		return
	}
	least := &s.entries[0]
	if estimate <= least.Count {
		return // kept out: seen at most Min times
	}
	delete(s.index, least.Item)
	*least = Entry{Item: it, Count: least.Count + 1, Error: least.Count}
	s.index[it] = 0
	s.siftDown(0)
}

// Len returns how many items are monitored, at most the capacity.
func (s *Sketch) Len() int { return len(s.entries) }

// Seen returns how many times Record was called since the last Reset.
func (s *Sketch) Seen() uint64 { return s.seen }

// Min bounds the count of any item that is not monitored: the smallest
// monitored count when the sketch is full, else 0 (an item not monitored
// was never recorded).
func (s *Sketch) Min() uint64 {
	if len(s.entries) < s.capacity {
		return 0
	}
	return s.entries[0].Count
}

// Lookup returns the entry of it, and whether it is monitored.
func (s *Sketch) Lookup(it Item) (Entry, bool) {
	i, ok := s.index[it]
	if !ok {
		return Entry{}, false
	}
	return s.entries[i], true
}

// Reset empties the sketch and keeps its memory.
func (s *Sketch) Reset() {
	clear(s.index)
	s.admit.reset()
	s.entries = s.entries[:0]
	s.seen = 0
}

// Merge returns the entries monitored by any of sketches, with counts and
// errors summed so that each true total count still lies in
// [Count-Error, Count]: where a sketch does not monitor an item, its share
// is between 0 and that sketch's Min, which is added to both. The entries
// are sorted by count, largest first, then by policy and key.
func Merge(sketches ...*Sketch) []Entry {
	var out []Entry
	seen := map[Item]bool{}
	for _, s := range sketches {
		for _, e := range s.entries {
			if seen[e.Item] {
				continue
			}
			seen[e.Item] = true
			total := Entry{Item: e.Item}
			for _, o := range sketches {
				if oe, ok := o.Lookup(e.Item); ok {
					total.Count += oe.Count
					total.Error += oe.Error
				} else {
					total.Count += o.Min()
					total.Error += o.Min()
				}
			}
			out = append(out, total)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// siftUp moves entry i towards the root while its parent counts more.
func (s *Sketch) siftUp(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if s.entries[parent].Count <= s.entries[i].Count {
			return
		}
		s.swap(i, parent)
		i = parent
	}
}

// siftDown moves entry i away from the root while a child counts less.
func (s *Sketch) siftDown(i int) {
	for {
		least := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(s.entries) && s.entries[c].Count < s.entries[least].Count {
				least = c
			}
		}
		if least == i {
			return
		}
		s.swap(i, least)
		i = least
	}
}

func (s *Sketch) swap(i, j int) {
	s.entries[i], s.entries[j] = s.entries[j], s.entries[i]
	s.index[s.entries[i].Item] = i
	s.index[s.entries[j].Item] = j
}
