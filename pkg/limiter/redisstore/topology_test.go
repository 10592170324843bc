package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// Redis Cluster and Sentinel: every algorithm exact across two stores (two
// connection pools, as two instances have), keys spread over every primary;
// a primary killed with SIGKILL, and the stores decide again by themselves
// once a replica is promoted, the counts on the other primaries untouched.

// recoverWithin bounds how long after the promotion the stores may take to
// decide again.
const recoverWithin = 5 * time.Second

// openURL opens a store on url with prefix and opts, closed at cleanup.
func openURL(t testing.TB, url, prefix string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(url, append([]Option{WithPrefix(prefix), WithTimeout(testTimeout)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// spreadKeys returns n keys per primary under policy p, from owner (the
// address of the primary owning a store key name).
func spreadKeys(t *testing.T, prefix string, p limiter.Policy, primaries int, n int, owner func(string) string) map[string][]limiter.Key {
	t.Helper()
	out := map[string][]limiter.Key{}
	for i := 0; i < 1000; i++ {
		k := limiter.Key{Subject: fmt.Sprintf("user-%d", i)}
		addr := owner(keyName(prefix, p.Name, k, suffixOf(t, p.Algorithm)))
		if len(out[addr]) < n {
			out[addr] = append(out[addr], k)
		}
		if len(out) == primaries && full(out, n) {
			return out
		}
	}
	t.Fatalf("keys do not spread over %d primaries: %v", primaries, out)
	return nil
}

func full(m map[string][]limiter.Key, n int) bool {
	for _, ks := range m {
		if len(ks) < n {
			return false
		}
	}
	return true
}

// exactOnEveryPrimary bursts 4×limit attempts at once on each of two keys
// per primary through two stores, for every atomic algorithm, and requires
// exactly the limit allowed on each key.
func exactOnEveryPrimary(t *testing.T, stores []*Store, prefix string, primaries int, owner func(string) string) {
	for _, alg := range exact {
		p := policy("topo-"+string(alg), alg, 7, time.Hour)
		for addr, ks := range spreadKeys(t, prefix, p, primaries, 2, owner) {
			for _, k := range ks {
				assert.Equal(t, p.Limit, burst(t, stores, p, k, 4*int(p.Limit), base), "%s: key %s on %s", alg, k.Subject, addr)
			}
		}
	}
}

// failover kills the primary dead (through kill), waits for promotion (wait)
// and checks that the stores decide again within recoverWithin and that no
// count moved: keys on the other primaries hold exactly what they held, the
// dead primary's keys no more than they held (replication is asynchronous:
// the last writes may be lost with the primary, never doubled).
func failover(t *testing.T, stores []*Store, prefix string, primaries int, owner func(string) string, dead string, kill func(), wait func()) {
	p := policy("failover", limiter.FixedWindow, 1000, time.Hour)
	keys := spreadKeys(t, prefix, p, primaries, 3, owner)
	const attempts = 5
	for _, ks := range keys {
		for _, k := range ks {
			for i := range attempts {
				allow(t, stores[i%2], p, k, 1, base)
			}
		}
	}
	require.Contains(t, keys, dead)
	kill()
	wait()
	promoted := time.Now()
	for _, s := range stores {
		var err error
		for time.Since(promoted) < recoverWithin {
			if _, err = s.Peek(context.Background(), p, keys[dead][0], base); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.NoError(t, err, "a store still fails %s after the promotion", recoverWithin)
	}
	t.Logf("deciding again %s after the promotion", time.Since(promoted).Round(time.Millisecond))
	for addr, ks := range keys {
		for _, k := range ks {
			d, err := stores[0].Peek(context.Background(), p, k, base)
			require.NoError(t, err)
			if addr == dead {
				assert.LessOrEqual(t, d.Count, int64(attempts), "key %s of the killed primary: never doubled", k.Subject)
			} else {
				assert.Equal(t, int64(attempts), d.Count, "key %s on surviving primary %s", k.Subject, addr)
			}
		}
	}
	for _, s := range stores {
		d := allow(t, s, p, keys[dead][1], 1, base)
		assert.True(t, d.Allowed)
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six redis-server processes")
	}
	c := redistest.StartCluster(t)
	prefix := "tgcluster"
	stores := []*Store{openURL(t, c.URL(), prefix), openURL(t, c.URL(), prefix)}
	require.Equal(t, Cluster, stores[0].Kind())
	primaries := c.Primaries()
	require.Len(t, primaries, 3)
	require.NoError(t, stores[0].Ping(t.Context()), "every primary answers")

	t.Run("exact", func(t *testing.T) { exactOnEveryPrimary(t, stores, prefix, 3, c.OwnerOf) })
	t.Run("reset subject on its node", func(t *testing.T) {
		p := policy("reset", limiter.SlidingLog, 5, time.Hour)
		for _, scope := range []string{"a", "b"} {
			allow(t, stores[0], p, limiter.Key{Subject: "someone", Scope: scope}, 1, base)
		}
		n, err := stores[1].ResetSubject(t.Context(), p, "someone")
		require.NoError(t, err)
		assert.Equal(t, int64(2), n)
	})
	t.Run("redirections only to members", func(t *testing.T) {
		// A node answering MOVED or ASK names where to go: a member is
		// followed, any other address is not (nor gets the calls' AUTH).
		_, err := stores[0].router.nodeAt(t.Context(), "127.0.0.1:1")
		require.ErrorContains(t, err, "127.0.0.1:1, which is not a member of the cluster")
		for addr := range primaries {
			node, err := stores[0].router.nodeAt(t.Context(), addr)
			require.NoError(t, err, addr)
			require.NoError(t, node.Ping(t.Context()).Err(), addr)
		}
	})
	t.Run("slot migration", func(t *testing.T) {
		// The caller's time: no window starts while the slot moves.
		slotMigration(t, c, []*Store{openURL(t, c.URL(), prefix, WithClientTime()), openURL(t, c.URL(), prefix, WithClientTime())}, prefix)
	})
	t.Run("failover", func(t *testing.T) {
		var dead string
		for addr := range primaries {
			dead = addr
			break
		}
		kill := func() {
			c.Kill(dead)
			// Until the promotion the slot map still names the dead node:
			// Ping (and /readyz) says which node fails.
			assert.ErrorContains(t, stores[0].Ping(t.Context()), "node "+dead)
		}
		failover(t, stores, prefix, 3, c.OwnerOf, dead, kill, func() { c.WaitPromoted(dead) })
		assert.Positive(t, stores[0].Stats().NodeErrors[dead]+stores[1].Stats().NodeErrors[dead], "errors counted on the dead node")
	})
}

func TestSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five redis-server processes")
	}
	x := redistest.StartSentinel(t)
	prefix := "tgsentinel"
	stores := []*Store{openURL(t, x.URL(), prefix), openURL(t, x.URL(), prefix)}
	require.Equal(t, Sentinel, stores[0].Kind())
	require.NoError(t, stores[0].Ping(t.Context()))
	primary := x.Primary()
	owner := func(string) string { return primary }

	t.Run("exact", func(t *testing.T) { exactOnEveryPrimary(t, stores, prefix, 1, owner) })
	t.Run("failover", func(t *testing.T) {
		failover(t, stores, prefix, 1, owner, primary, func() { x.Node(primary).Stop() }, func() { x.WaitPromoted(primary) })
		assert.NotEqual(t, primary, x.Primary())
	})
}

// slotMigration moves the slot of one subject's keys to another primary
// while the stores decide on them without pause, and in each phase of the
// move decides on a key the source holds (or held) and on one it never had:
// the source then answers ASK, and MOVED once the move is done. No decision
// may fail, and every key counts exactly the attempts it was allowed.
func slotMigration(t *testing.T, c *redistest.Cluster, stores []*Store, prefix string) {
	p := policy("moving", limiter.FixedWindow, 1_000_000, time.Hour)
	key := func(scope string) limiter.Key { return limiter.Key{Subject: "mover", Scope: scope} }
	name := func(scope string) string { return keyName(prefix, p.Name, key(scope), suffixOf(t, p.Algorithm)) }
	slot, from := c.SlotOf(name("")), c.OwnerOf(name(""))
	var to string
	for addr := range c.Primaries() {
		if addr != from && (to == "" || addr < to) {
			to = addr
		}
	}
	var (
		mu       sync.Mutex
		counts   = map[string]int64{}
		failures []error
		heard    heard // what the decisions told their observer
	)
	ctx := limiter.WithStoreObserver(context.Background(), &heard)
	attempt := func(s *Store, scope string) {
		d, err := s.Allow(ctx, p, limiter.Request{Key: key(scope), Cost: 1, Now: base})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			failures = append(failures, fmt.Errorf("scope %s: %w", scope, err))
		case !d.Allowed:
			failures = append(failures, fmt.Errorf("scope %s: refused under a limit never reached", scope))
		default:
			counts[scope]++
		}
	}
	for i := range 8 { // keys on the source before the move
		attempt(stores[i%2], fmt.Sprintf("old-%d", i%4))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				attempt(stores[g%2], fmt.Sprintf("busy-%d", (g+i)%6))
			}
		})
	}
	c.MoveSlot(slot, to, func(phase string) {
		for _, s := range stores {
			attempt(s, "old-0")
			attempt(s, "new-"+phase)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, failures, "in phase %s", phase)
	})
	close(stop)
	wg.Wait()
	require.Empty(t, failures)
	assert.Equal(t, to, c.OwnerOf(name("")), "the slot moved")
	dest := redis.NewClient(&redis.Options{Addr: to})
	defer dest.Close()
	for scope, n := range counts {
		d, err := stores[0].Peek(context.Background(), p, key(scope), base)
		require.NoError(t, err)
		assert.Equal(t, n, d.Count, "scope %s", scope)
		exists, err := dest.Exists(context.Background(), name(scope)).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), exists, "scope %s's key on the new owner %s", scope, to)
	}
	assert.Greater(t, counts["busy-0"], int64(0), "decisions ran during the move")
	redirected := map[string]bool{}
	for _, c := range heard.take() {
		if c.Redirects > 0 {
			redirected[c.Node] = true
		}
	}
	assert.Equal(t, map[string]bool{to: true}, redirected, "the redirected decisions say so, naming the node they were sent on to")
}
