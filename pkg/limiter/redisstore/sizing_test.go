package redisstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestEvictionPolicy reads the policy of a private Redis as it is set.
func TestEvictionPolicy(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("sets maxmemory-policy: needs a private redis-server")
	}
	s, err := redisstore.Open(srv.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for policy, evicts := range map[string]bool{
		"noeviction": false, "allkeys-lru": true, "allkeys-random": true,
		"volatile-ttl": true, "volatile-lfu": true,
	} {
		require.NoError(t, srv.Client().ConfigSet(ctx, "maxmemory-policy", policy).Err())
		got, ev, err := s.EvictionPolicy(ctx)
		require.NoError(t, err)
		assert.Equal(t, policy, got)
		assert.Equal(t, evicts, ev, policy)
	}
}
