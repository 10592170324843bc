package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// EvictionPolicy returns Redis's maxmemory-policy, read from INFO memory
// (which managed services answer where they rename CONFIG away), and whether it lets Redis evict Tollgate's keys when its memory is full:
// every allkeys-* policy does, and every volatile-* policy too, since every
// key Tollgate writes has a TTL. An evicted counter is a fresh budget: the
// limit resets without a word. With noeviction a full Redis refuses writes
// instead, which Tollgate reports (503, and /readyz). The call is bounded by
// the store's timeout.
func (s *Store) EvictionPolicy(ctx context.Context) (policy string, evicts bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return evictionPolicy(ctx, s.client)
}

func evictionPolicy(ctx context.Context, c redis.Cmdable) (string, bool, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return "", false, fmt.Errorf("redisstore: eviction policy: %w", err)
	}
	for sc := bufio.NewScanner(strings.NewReader(info)); sc.Scan(); {
		if policy, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "maxmemory_policy:"); ok {
			return policy, strings.HasPrefix(policy, "allkeys-") || strings.HasPrefix(policy, "volatile-"), nil
		}
	}
	return "", false, fmt.Errorf("redisstore: eviction policy: INFO memory reports no maxmemory_policy")
}
