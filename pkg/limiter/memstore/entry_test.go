package memstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// An entry whose algorithm prune has no case for is an error and keeps its
// state: no other algorithm's rule may drop what it holds.
func TestPruneRefusesAnUnknownAlgorithm(t *testing.T) {
	const window = int64(10e9)
	for _, a := range limiter.Algorithms {
		e := &entry{state: state{alg: a, window: window}}
		_, err := e.prune(100 * window)
		require.NoError(t, err, "%s has a prune rule", a)
	}
	e := &entry{state: state{alg: "leaky_bucket", window: window, tat: 5, events: []limiter.Event{{At: 1, Cost: 1}}}}
	e.slots[0] = slot{start: 1, count: 3}
	before := e.state
	n, err := e.prune(100 * window)
	assert.ErrorIs(t, err, limiter.ErrUnknownAlgorithm)
	assert.Zero(t, n)
	assert.Equal(t, before, e.state, "the state is left as it was")
}

// The decision arithmetic refuses it too.
func TestDecideRefusesAnUnknownAlgorithm(t *testing.T) {
	e := &entry{}
	_, err := e.decide(limiter.Policy{Name: "p", Algorithm: "leaky_bucket", Limit: 1, Window: 1e9}, 1, time.Unix(1_767_225_600, 0).UTC())
	assert.ErrorIs(t, err, limiter.ErrUnknownAlgorithm)
}
