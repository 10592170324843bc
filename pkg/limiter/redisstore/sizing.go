package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/pkg/limiter"
)

var _ limiter.EvictionReporter = (*Store)(nil)

// EvictionPolicy returns Redis's maxmemory-policy, read from INFO memory
// (which managed services answer where they rename CONFIG away), and whether it lets Redis evict Tollgate's keys when its memory is full:
// every allkeys-* policy does, and every volatile-* policy too, since every
// key Tollgate writes has a TTL. An evicted counter is a fresh budget: the
// limit resets without a word. With noeviction a full Redis refuses writes
// instead, which Tollgate reports (503, and /readyz). The call is bounded by
// the store's timeout. On Redis Cluster every primary is asked, and the
// answer is that of a primary that evicts, if any.
func (s *Store) EvictionPolicy(ctx context.Context) (policy string, evicts bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var mu sync.Mutex
	err = s.router.eachPrimary(ctx, func(ctx context.Context, node *redis.Client) error {
		p, e, err := evictionPolicy(ctx, node)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if policy == "" || e && !evicts {
			policy, evicts = p, e
		}
		return nil
	})
	return policy, evicts, err
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
