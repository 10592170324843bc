package offenders

import "hash/maphash"

// Admission filter. Plain Space-Saving lets any item that is not monitored
// take the place of the least counted one, so an attacker could flush a real
// abuser off the list with throw-away keys refused once each (6,000 of them
// flushed an abuser refused 50 times from 100 counters). A Sketch therefore
// also counts every item in a small count-min sketch (Cormode and
// Muthukrishnan, 2005), and an item that is not monitored takes a place only
// once its estimate there exceeds the least monitored count, as TinyLFU does
// for caches. Flushing the list now costs about capacity × the abuser's
// count in refusals.
//
// The guarantees stay Space-Saving's: an item kept out was seen at most Min
// times (its estimate, which never under-counts, was at most Min when it was
// last refused entry, and Min never decreases); an item let in was seen at
// most Min+1 times (it was kept out at its previous occurrence), so its
// entry Count = Min+1, Error = Min still brackets its true count; the counts
// still sum to at most N, so Min ≤ N/k and every item seen more than N/k
// times is monitored.
const (
	admitDepth = 4
	admitWidth = 2048 // a power of two
)

// admission is a count-min sketch with conservative update: only the rows
// at the item's current minimum are incremented.
type admission struct {
	seed maphash.Seed
	rows [admitDepth][admitWidth]uint32
}

func newAdmission() *admission { return &admission{seed: maphash.MakeSeed()} }

// slots returns it's counter in each row, from one seeded hash (double
// hashing). The hash seed is per process, so a client cannot aim collisions.
func (a *admission) slots(it Item) [admitDepth]uint32 {
	h := maphash.Comparable(a.seed, it)
	h1, h2 := uint32(h), uint32(h>>32)|1
	var s [admitDepth]uint32
	for i := range s {
		s[i] = (h1 + uint32(i)*h2) & (admitWidth - 1)
	}
	return s
}

// add counts one occurrence of it and returns its new estimate, which is at
// least its true count.
func (a *admission) add(it Item) uint64 {
	s := a.slots(it)
	least := uint32(1<<32 - 1)
	for i, j := range s {
		least = min(least, a.rows[i][j])
	}
	if least == 1<<32-1 {
		return uint64(least) // saturated
	}
	for i, j := range s {
		if a.rows[i][j] == least {
			a.rows[i][j]++
		}
	}
	return uint64(least) + 1
}

func (a *admission) reset() { a.rows = [admitDepth][admitWidth]uint32{} }
