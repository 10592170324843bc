package offenders_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
)

// Throw-away keys refused once each must not push a real abuser off the
// list: with plain Space-Saving, 6,000 of them evicted an abuser refused 50
// times from a 100-entry sketch.
func TestThrowAwayKeysDoNotFlushAnAbuser(t *testing.T) {
	s := offenders.NewSketch(offenders.DefaultCapacity)
	abuser := offenders.Item{Policy: "ping", Key: "abuser"}
	for range 50 {
		s.Record(abuser)
	}
	for i := range 6_000 {
		s.Record(offenders.Item{Policy: "ping", Key: "throwaway-" + strconv.Itoa(i)})
	}
	e, ok := s.Lookup(abuser)
	require.True(t, ok, "the abuser is still listed after 6,000 throw-away keys")
	assert.Equal(t, uint64(50), e.Count-e.Error, "the abuser's count stays exact")
	assert.Equal(t, abuser, offenders.Merge(s)[0].Item, "and first")
}

// Flushing costs the attacker about capacity × the abuser's count: keys
// refused as often as the abuser do take the place of the least counted.
func TestRepeatedKeysStillEnter(t *testing.T) {
	s := offenders.NewSketch(2)
	for _, k := range []string{"a", "a", "a", "b", "c"} {
		s.Record(offenders.Item{Key: k})
	}
	_, ok := s.Lookup(offenders.Item{Key: "c"})
	assert.False(t, ok, "c, seen once, does not displace b (seen once)")
	s.Record(offenders.Item{Key: "c"})
	e, ok := s.Lookup(offenders.Item{Key: "c"})
	require.True(t, ok, "c, seen twice, displaces b (seen once)")
	assert.Equal(t, offenders.Entry{Item: offenders.Item{Key: "c"}, Count: 2, Error: 1}, e)
}
