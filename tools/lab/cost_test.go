package main

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCostMeasuresEveryStore(t *testing.T) {
	c := costConfig{keys: 60, limit: 10, window: time.Minute, stores: []string{storeMemory, storeSQLite, storeRedis}, clients: 4}
	_, redisErr := exec.LookPath("redis-server")
	if redisErr != nil && os.Getenv("CI") == "true" {
		t.Fatal("redis-server is not on PATH under CI=true")
	}
	r, err := cost(context.Background(), c, reporter{quiet: true})
	require.NoError(t, err)
	byKey := map[string]costRow{}
	for _, row := range r.Rows {
		byKey[row.Store+"/"+row.Algorithm] = row
		assert.Equal(t, int64(60*20), row.Decisions)
		assert.Equal(t, int64(60*10), row.Admitted, "%s/%s: the first limit attempts of each key pass", row.Store, row.Algorithm)
		if row.Store == storeSQLite && row.Algorithm != "sliding_log" {
			// 60 small rows fit in the free space of the empty
			// database's pages: SQLite grows by whole pages.
			assert.GreaterOrEqual(t, row.BytesPerKey, 0.0, "%s/%s", row.Store, row.Algorithm)
		} else {
			assert.Positive(t, row.BytesPerKey, "%s/%s", row.Store, row.Algorithm)
		}
	}
	stores := []string{storeMemory, storeSQLite}
	if redisErr == nil {
		stores = append(stores, storeRedis)
		assert.Empty(t, r.Skipped)
	} else {
		require.Len(t, r.Skipped, 1)
		assert.Contains(t, r.Skipped[0], "redis-server is not on PATH")
	}
	assert.Len(t, r.Rows, 4*len(stores))
	// A sliding log keeps one event per admitted unit (10 here), the other
	// algorithms a counter or two. In memory an event is 16 bytes, and the
	// other fields of a key's state are the same whatever the algorithm.
	mem := byKey["memory/sliding_log"].BytesPerKey
	assert.Greater(t, mem, byKey["memory/fixed_window"].BytesPerKey+5*16)
	assert.Greater(t, mem, byKey["memory/token_bucket"].BytesPerKey+5*16)
	for _, st := range stores[1:] { // a row, or a sorted-set member, per event
		assert.Greater(t, byKey[st+"/sliding_log"].BytesPerKey, 2*byKey[st+"/fixed_window"].BytesPerKey, st)
		assert.Greater(t, byKey[st+"/sliding_log"].BytesPerKey, 2*byKey[st+"/token_bucket"].BytesPerKey, st)
	}
	// The fixed window counts refused attempts too (seed 000's upsert);
	// the others write only what they admit: half the attempts.
	for _, st := range []string{storeMemory, storeSQLite} {
		assert.InDelta(t, 1.0, byKey[st+"/fixed_window"].WritesPerDecision, 1e-9, st)
		for _, alg := range []string{"sliding_log", "sliding_window", "token_bucket"} {
			assert.InDelta(t, 0.5, byKey[st+"/"+alg].WritesPerDecision, 1e-9, st+"/"+alg)
		}
	}
	if redisErr == nil {
		// Redis counts each command that changed the keyspace: the
		// counter at every attempt, its expiry once, with a window's first
		// units: 21 writes for a key's 20 attempts.
		assert.InDelta(t, 21.0/20, byKey["redis/fixed_window"].WritesPerDecision, 1e-9)
		assert.InDelta(t, 0.5, byKey["redis/token_bucket"].WritesPerDecision, 1e-9)
	}
}
