package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestEvictionPolicy reads the policy of a private Redis as it is set.
func TestEvictionPolicy(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("sets maxmemory-policy: needs a private redis-server")
	}
	s, err := redisstore.Open(srv.URL(), redisstore.WithTimeout(5*time.Second)) // a busy machine is not a slow Redis
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

// BenchmarkBytesPerKey measures what one key costs in Redis's memory, per
// algorithm, with a key of 16 bytes and one of 256 (the service's
// --max-key-bytes): each iteration is one allowed attempt on a new key (ten
// for sliding_log/events=10: a sliding log costs per event);
// the growth of INFO memory's used_memory divided by the keys is reported
// as redis-bytes/key. Run it with a fixed count, e.g.
// go test -run '^$' -bench BytesPerKey -benchtime 20000x ./redisstore/
func BenchmarkBytesPerKey(b *testing.B) {
	ctx := context.Background()
	usedMemory := func(srv *redistest.Server) int64 {
		b.Helper()
		info, err := srv.Client().Info(ctx, "memory").Result()
		require.NoError(b, err)
		for line := range strings.SplitSeq(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(b, err)
				return n
			}
		}
		b.Fatal("no used_memory in INFO memory")
		return 0
	}
	for _, c := range []struct {
		alg    limiter.Algorithm
		events int
	}{
		{limiter.FixedWindow, 1}, {limiter.SlidingLog, 1}, {limiter.SlidingLog, 10},
		{limiter.SlidingWindow, 1}, {limiter.TokenBucket, 1},
	} {
		a, events := c.alg, c.events
		for _, size := range []int{16, 256} {
			b.Run(fmt.Sprintf("%s/events=%d/key=%d", a, events, size), func(b *testing.B) {
				srv := redistest.Start(b) // its own server: no other keys, the same dictionary growth
				s, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(srv.Prefix()), redisstore.WithTimeout(5*time.Second))
				require.NoError(b, err)
				defer s.Close()
				p := limiter.Policy{Name: "p", Algorithm: a, Limit: 10, Window: time.Hour}
				before := usedMemory(srv)
				keys := 0
				for b.Loop() {
					key := limiter.Key{Subject: fmt.Sprintf("%0*d", size, keys)}
					for range events {
						if _, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: time.Now()}); err != nil {
							b.Fatal(err)
						}
					}
					keys++
				}
				b.ReportMetric(float64(usedMemory(srv)-before)/float64(keys), "redis-bytes/key")
			})
		}
	}
}
