package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// formedWithin bounds the wait for a cluster or a Sentinel set-up to agree
// on its topology, and for a failover.
const formedWithin = 30 * time.Second

// Cluster is a private Redis Cluster of three primaries, each with one
// replica, on free loopback ports. Its node timeout is one second, so that a
// killed primary's replica is promoted within a few seconds, and the other
// primaries serve their slots meanwhile (cluster-require-full-coverage no).
type Cluster struct {
	t     testing.TB
	Nodes []*Server // every node, primaries and replicas, in start order
}

// StartCluster starts six redis-server processes in cluster mode, forms
// them into a cluster with redis-cli --cluster create (--cluster-replicas 1)
// and waits until every node sees the whole cluster healthy. The processes
// are killed at cleanup. It needs redis-server and redis-cli on PATH
// (skipped without, failed under CI=true); it never uses
// LIMITER_TEST_REDIS_URL. With LIMITER_TEST_NO_TOPOLOGIES set it skips.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	if skipTopology(t, "Redis Cluster") {
		return nil
	}
	cli := lookPath(t, "redis-cli")
	if cli == "" {
		return nil
	}
	c := &Cluster{t: t}
	args := []string{"--cluster", "create"}
	for range 6 {
		// A replica may take over whatever its link to its primary was.
		s := startPrivate(t, "cluster-enabled yes\ncluster-config-file nodes.conf\n"+
			"cluster-node-timeout 1000\ncluster-replica-validity-factor 0\ncluster-require-full-coverage no\n", false)
		if s == nil {
			return nil
		}
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
		return nil
	}
	c.WaitHealthy()
	return c
}

// URL returns redis+cluster:// with every node's address.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return "redis+cluster://" + strings.Join(addrs, ",") + "/"
}

// Node returns the node at addr, nil when none is.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// Primaries returns the addresses of the primaries that own slots, as the
// first running node sees them, and for each its slot ranges' first slots.
func (c *Cluster) Primaries() map[string][]int {
	c.t.Helper()
	for _, s := range c.Nodes {
		if s.PID() == 0 {
			continue
		}
		slots, err := clusterSlots(s)
		if err != nil {
			continue
		}
		out := map[string][]int{}
		for _, r := range slots {
			out[r.Nodes[0].Addr] = append(out[r.Nodes[0].Addr], int(r.Start))
		}
		return out
	}
	c.t.Fatal("redistest: no cluster node answers CLUSTER SLOTS")
	return nil
}

// OwnerOf returns the address of the primary that owns key's slot.
func (c *Cluster) OwnerOf(key string) string {
	c.t.Helper()
	return c.ownerOfSlot(c.SlotOf(key))
}

// ownerOfSlot returns the address of the primary that owns slot, as the
// first running node that answers sees it.
func (c *Cluster) ownerOfSlot(slot int) string {
	c.t.Helper()
	for _, s := range c.Nodes {
		if s.PID() == 0 {
			continue
		}
		ranges, err := clusterSlots(s)
		if err != nil {
			continue
		}
		for _, r := range ranges {
			if int(r.Start) <= slot && slot <= int(r.End) {
				return r.Nodes[0].Addr
			}
		}
	}
	c.t.Fatalf("redistest: no node knows the owner of slot %d", slot)
	return ""
}

// WaitHealthy waits until every running node reports cluster_state:ok, with
// three primaries, each owning slots and each with a connected replica
// among the running nodes, as every running node sees it.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	c.waitFor("healthy", func() error {
		for _, s := range c.Nodes {
			if s.PID() == 0 {
				continue
			}
			slots, err := clusterSlots(s)
			if err != nil {
				return err
			}
			primaries := map[string]bool{}
			for _, r := range slots {
				primaries[r.Nodes[0].Addr] = true
				if len(r.Nodes) < 2 && c.running() == len(c.Nodes) {
					return fmt.Errorf("%s: slots %d-%d have no replica yet", s.Addr(), r.Start, r.End)
				}
			}
			if len(primaries) != 3 {
				return fmt.Errorf("%s: sees %d primaries", s.Addr(), len(primaries))
			}
		}
		return nil
	})
}

// running counts the nodes whose process runs.
func (c *Cluster) running() int {
	n := 0
	for _, s := range c.Nodes {
		if s.PID() != 0 {
			n++
		}
	}
	return n
}

// Kill kills the node at addr with SIGKILL and waits until it has exited.
func (c *Cluster) Kill(addr string) {
	c.t.Helper()
	s := c.Node(addr)
	if s == nil {
		c.t.Fatalf("redistest: no node at %s", addr)
		return
	}
	s.Stop()
}

// WaitPromoted waits until no running node sees dead owning slots and every
// one reports cluster_state:ok: a replica took dead's slots over.
func (c *Cluster) WaitPromoted(dead string) {
	c.t.Helper()
	c.waitFor("a replica of "+dead+" promoted", func() error {
		for _, s := range c.Nodes {
			if s.PID() == 0 {
				continue
			}
			slots, err := clusterSlots(s)
			if err != nil {
				return err
			}
			for _, r := range slots {
				if r.Nodes[0].Addr == dead {
					return fmt.Errorf("%s: %s still owns slots %d-%d", s.Addr(), dead, r.Start, r.End)
				}
			}
		}
		return nil
	})
}

// clusterSlots asks s, on a connection of its own, for CLUSTER SLOTS, after
// checking that it reports cluster_state:ok.
func clusterSlots(s *Server) ([]redis.ClusterSlot, error) {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return nil, err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return nil, fmt.Errorf("%s: not cluster_state:ok", s.Addr())
	}
	//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; CLUSTER SLOTS answers on every version the store supports.
	return rdb.ClusterSlots(ctx).Result()
}

// waitFor polls ok every 50ms until it returns nil, failing the test with
// its last error after formedWithin.
func (c *Cluster) waitFor(what string, ok func() error) { waitFor(c.t, what, ok) }

// waitFor polls ok every 50ms until it returns nil, failing t with its last
// error after formedWithin.
func waitFor(t testing.TB, what string, ok func() error) {
	t.Helper()
	deadline := time.Now().Add(formedWithin)
	for {
		err := ok()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: not %s within %s: %v", what, formedWithin, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ClusterClient returns a go-redis cluster client on the cluster, closed at
// cleanup, for inspecting keys from tests.
func (c *Cluster) ClusterClient() *redis.ClusterClient {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	c.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Phases of MoveSlot, after which it calls its at function.
const (
	// Migrating: the destination imports the slot, the source migrates it,
	// no key has moved yet; the source answers ASK for keys it does not
	// hold.
	Migrating = "migrating"
	// Migrated: every key of the slot is on the destination; the source
	// answers ASK for all of them.
	Migrated = "migrated"
	// Moved: every primary names the destination as the slot's owner; the
	// source answers MOVED.
	Moved = "moved"
)

// MoveSlot moves slot, with its keys, from the primary that owns it to the
// primary at to, as redis-cli --cluster reshard does: CLUSTER SETSLOT
// IMPORTING on the destination and MIGRATING on the source, MIGRATE of every
// key, then SETSLOT NODE on the destination, the source and the other
// primaries. After each phase it calls at with the phase's name (Migrating,
// Migrated, Moved), for the test to act in that state.
func (c *Cluster) MoveSlot(slot int, to string, at func(phase string)) {
	c.t.Helper()
	ctx := context.Background()
	owners := c.Primaries()
	from := c.ownerOfSlot(slot)
	if _, ok := owners[to]; !ok || from == to {
		c.t.Fatalf("redistest: move slot %d from %s to %s: the destination must be another primary", slot, from, to)
		return
	}
	clients := map[string]*redis.Client{}
	ids := map[string]string{}
	for addr := range owners {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer rdb.Close()
		id, err := rdb.Do(ctx, "cluster", "myid").Text()
		c.must(err, "CLUSTER MYID on "+addr)
		clients[addr], ids[addr] = rdb, id
	}
	c.must(clients[to].Do(ctx, "cluster", "setslot", slot, "importing", ids[from]).Err(), "SETSLOT IMPORTING")
	c.must(clients[from].Do(ctx, "cluster", "setslot", slot, "migrating", ids[to]).Err(), "SETSLOT MIGRATING")
	at(Migrating)
	host, port, _ := net.SplitHostPort(to)
	for {
		keys, err := clients[from].ClusterGetKeysInSlot(ctx, slot, 100).Result()
		c.must(err, "CLUSTER GETKEYSINSLOT")
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		c.must(clients[from].Do(ctx, args...).Err(), "MIGRATE")
	}
	at(Migrated)
	order := []string{to, from}
	for addr := range owners {
		if addr != to && addr != from {
			order = append(order, addr)
		}
	}
	for _, addr := range order {
		c.must(clients[addr].Do(ctx, "cluster", "setslot", slot, "node", ids[to]).Err(), "SETSLOT NODE on "+addr)
	}
	at(Moved)
}

// SlotOf returns the slot of key (CLUSTER KEYSLOT).
func (c *Cluster) SlotOf(key string) int {
	c.t.Helper()
	for _, s := range c.Nodes {
		if s.PID() == 0 {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		slot, err := rdb.ClusterKeySlot(context.Background(), key).Result()
		_ = rdb.Close()
		if err == nil {
			return int(slot)
		}
	}
	c.t.Fatalf("redistest: no node tells the slot of %q", key)
	return 0
}

// must fails the test when err is not nil.
func (c *Cluster) must(err error, what string) {
	c.t.Helper()
	if err != nil {
		c.t.Fatalf("redistest: %s: %v", what, err)
	}
}
