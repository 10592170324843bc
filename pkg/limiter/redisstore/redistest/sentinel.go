package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the Sentinel set-up knows its primary by.
const MasterName = "tollgate"

// Sentinel is a private primary, its replica and three sentinels (quorum
// 2) watching it, on free loopback ports. A primary silent for one second is
// down, so a killed primary's replica is promoted within a few seconds.
type Sentinel struct {
	t         testing.TB
	Data      []*Server // the primary as started, then its replica
	Sentinels []*Server
}

// StartSentinel starts the set-up and waits until every sentinel knows the
// primary, its replica and the two other sentinels. The processes are
// killed at cleanup. It needs redis-server on PATH (skipped without, failed
// under CI=true); it never uses LIMITER_TEST_REDIS_URL. With
// LIMITER_TEST_NO_TOPOLOGIES set it skips.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	if skipTopology(t, "Sentinel set-up") {
		return nil
	}
	primary := startPrivate(t, "", false)
	if primary == nil {
		return nil
	}
	host, port, _ := net.SplitHostPort(primary.Addr())
	replica := startPrivate(t, "replicaof "+host+" "+port+"\n", false)
	x := &Sentinel{t: t, Data: []*Server{primary, replica}}
	conf := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 2\nsentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 10000\nsentinel parallel-syncs %[1]s 1\n", MasterName, host, port)
	for range 3 {
		x.Sentinels = append(x.Sentinels, startPrivate(t, conf, true))
	}
	waitFor(t, "a Sentinel set-up", func() error {
		for _, s := range x.Sentinels {
			if err := sentinelKnows(s, 1, 2); err != nil {
				return err
			}
		}
		return nil
	})
	return x
}

// URL returns redis+sentinel:// with the sentinels' addresses and the
// primary's name.
func (x *Sentinel) URL() string {
	addrs := make([]string, len(x.Sentinels))
	for i, s := range x.Sentinels {
		addrs[i] = s.Addr()
	}
	return "redis+sentinel://" + strings.Join(addrs, ",") + "/" + MasterName
}

// Primary returns the address of the primary as the first sentinel sees it.
func (x *Sentinel) Primary() string {
	x.t.Helper()
	rdb := redis.NewSentinelClient(&redis.Options{Addr: x.Sentinels[0].Addr(), MaxRetries: -1})
	defer rdb.Close()
	addr, err := rdb.GetMasterAddrByName(context.Background(), MasterName).Result()
	if err != nil {
		x.t.Fatal("redistest: sentinel: " + err.Error())
		return ""
	}
	return net.JoinHostPort(addr[0], addr[1])
}

// Node returns the data node at addr, nil when none is.
func (x *Sentinel) Node(addr string) *Server {
	for _, s := range x.Data {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// WaitPromoted waits until every sentinel names a primary other than dead,
// and that node answers as a primary (ROLE master).
func (x *Sentinel) WaitPromoted(dead string) {
	x.t.Helper()
	waitFor(x.t, "a replica of "+dead+" promoted", func() error {
		for _, s := range x.Sentinels {
			rdb := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			addr, err := rdb.GetMasterAddrByName(context.Background(), MasterName).Result()
			_ = rdb.Close()
			if err != nil {
				return err
			}
			if now := net.JoinHostPort(addr[0], addr[1]); now == dead {
				return fmt.Errorf("sentinel %s still names %s", s.Addr(), dead)
			}
		}
		node := redis.NewClient(&redis.Options{Addr: x.Primary(), MaxRetries: -1})
		defer node.Close()
		role, err := node.Do(context.Background(), "ROLE").Slice()
		if err != nil {
			return err
		}
		if len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("the named primary answers ROLE %v", role)
		}
		return nil
	})
}

// sentinelKnows checks that sentinel s knows the primary with replicas
// replicas and others other sentinels.
func sentinelKnows(s *Server, replicas, others int) error {
	rdb := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := rdb.Replicas(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	o, err := rdb.Sentinels(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	if len(r) < replicas || len(o) < others {
		return fmt.Errorf("sentinel %s knows %d replicas and %d other sentinels", s.Addr(), len(r), len(o))
	}
	return nil
}
