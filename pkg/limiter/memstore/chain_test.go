package memstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Keys whose hashes collide share a chain: each is found by its own key, and
// removing any of them, first, middle or last of the chain, leaves the others
// findable and the map free of the removed one.
func TestCollidingHashesChain(t *testing.T) {
	const h = 42
	keys := []mapKey{{"p", "a", ""}, {"p", "b", ""}, {"p", "c", ""}, {"q", "a", ""}}
	for victim := range keys {
		t.Run(keys[victim].policy+"/"+keys[victim].subject, func(t *testing.T) {
			sh := &shard{entries: make(map[uint64]*entry)}
			for _, k := range keys {
				sh.add(&entry{key: k, hash: h})
			}
			for _, k := range keys {
				e := sh.find(&k, h)
				require.NotNil(t, e, "key %v", k)
				assert.Equal(t, k, e.key)
			}
			missing := mapKey{"p", "z", ""}
			assert.Nil(t, sh.find(&missing, h))

			sh.remove(sh.find(&keys[victim], h).index)
			assert.Nil(t, sh.find(&keys[victim], h))
			for i, k := range keys {
				if i != victim {
					e := sh.find(&k, h)
					require.NotNil(t, e, "key %v after removing %v", k, keys[victim])
					assert.Equal(t, e, sh.list[e.index], "index of %v", k)
				}
			}
			for len(sh.list) > 0 {
				sh.remove(0)
			}
			assert.Empty(t, sh.entries)
		})
	}
}
