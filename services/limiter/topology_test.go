package main

// Two service processes on a Redis Cluster (three primaries, three
// replicas) and on a Sentinel set-up (a primary, a replica, three
// sentinels), all started by redistest: every algorithm exact across the two
// processes with the keys on every primary; then a primary killed with
// SIGKILL, and the processes answer 200/429 again within failoverWithin of
// the promotion, with no count doubled or lost on the surviving primaries.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// failoverWithin bounds how long after the promotion the service may answer
// other than 200 or 429 on the promoted node's keys (issue #12).
const failoverWithin = 5 * time.Second

// countedLimit is the limit of the policies whose counts are compared
// before and after the failover: never reached.
const countedLimit = 1000

// countedAttempts is how many attempts each counted key gets before the
// failover.
const countedAttempts = 5

// algorithms are the four atomic algorithms, which are also the names of
// the exact policies of topologyPolicies.
var algorithms = []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket"}

// counted are the policies whose counts are compared across the failover:
// the algorithms whose state does not move with time within a window
// (token_bucket refills continuously, so its remaining could go up by one
// during the test and prove nothing).
var counted = []string{"count_fixed_window", "count_sliding_log", "count_sliding_window"}

// topologyPolicies are the policies of the topology tests, windows of
// window: one exact policy per algorithm (limit), one counted policy per
// algorithm of counted (countedLimit), and probe, which the failover polls.
func topologyPolicies(window time.Duration) string {
	var b strings.Builder
	b.WriteString("policies:\n")
	for _, alg := range algorithms {
		fmt.Fprintf(&b, "  %s: { algorithm: %s, limit: %d, window: %s }\n", alg, alg, limit, window)
	}
	for _, name := range counted {
		fmt.Fprintf(&b, "  %s: { algorithm: %s, limit: %d, window: %s }\n", name, strings.TrimPrefix(name, "count_"), countedLimit, window)
	}
	fmt.Fprintf(&b, "  probe: { algorithm: fixed_window, limit: 1000000, window: %s }\n", window)
	return b.String()
}

// quietWindow returns a window of whole hours, 24h or less, whose next
// boundary (a multiple of it since the Unix epoch, as fixed_window and
// sliding_window cut time) is more than span away: the test that uses it
// cannot see a window start, whatever the hour it runs at. Redis runs on
// this machine, so its TIME is this clock.
func quietWindow(span time.Duration) time.Duration {
	now := time.Now()
	for h := 24; ; h-- {
		w := time.Duration(h) * time.Hour
		if w-time.Duration(now.UnixNano()%int64(w)) > span {
			return w
		}
	}
}

// topology is a Redis deployment under test, as the service sees it.
type topology struct {
	url       string
	primaries []string                 // the primaries' addresses
	owner     func(key string) string  // the address of the primary that owns key
	kill      func(addr string)        // kills the primary at addr with SIGKILL
	promoted  func(dead string)        // waits until a replica replaced dead
	keysOn    func(addr string) string // the service's key names on the node at addr, sorted, one a line
}

// subjectOn returns a subject whose key under policy the primary at addr
// owns, and that differs from those in taken. The slot of a key is that of
// its hash tag, {policy:subject} (redisstore's layout); the test checks
// afterwards that the keys are where it thought (keysOn).
func (tp *topology) subjectOn(t *testing.T, policy, addr string, taken map[string]bool) string {
	t.Helper()
	for i := range 10_000 {
		subject := fmt.Sprintf("s%d", i)
		if !taken[policy+":"+subject] && tp.owner("{"+policy+":"+subject+"}") == addr {
			taken[policy+":"+subject] = true
			return subject
		}
	}
	t.Fatalf("no subject of policy %s on %s", policy, addr)
	return ""
}

// remaining sends one check of key under policy to in and returns its
// remaining; the answer must be 200.
func remaining(t *testing.T, in *instance, policy, key string) int64 {
	t.Helper()
	code, body, _ := check(t, in, policy, key)
	require.Equal(t, http.StatusOK, code, "%s %s: %v", policy, key, body)
	return int64(body["remaining"].(float64))
}

// twoInstancesOn runs the topology test on tp: two service processes, every
// algorithm exact across them on every primary, then dead killed.
func twoInstancesOn(t *testing.T, tp *topology, dead string) {
	window := quietWindow(5 * time.Minute)
	policies := topologyPolicies(window)
	instances := []*instance{
		launchInstance(t, nil, tp.url, policies, generous),
		launchInstance(t, nil, tp.url, policies, generous),
	}
	taken := map[string]bool{}

	t.Run("exact on every primary", func(t *testing.T) {
		want := map[string][]string{} // primary -> the hash tags it must hold
		for _, alg := range algorithms {
			for _, addr := range tp.primaries {
				subject := tp.subjectOn(t, alg, addr, taken)
				got := burst(t, instances, alg, subject, 4*limit)
				assert.Equal(t, int64(limit), sum(got), "%s on %s: allowed across both instances %v", alg, addr, got)
				want[addr] = append(want[addr], "{"+alg+":"+subject+"}")
			}
		}
		for _, addr := range tp.primaries {
			keys := tp.keysOn(addr)
			assert.Equal(t, len(algorithms), strings.Count(keys, "\n"), "keys on %s:\n%s", addr, keys)
			for _, tag := range want[addr] {
				assert.Contains(t, keys, tag, "primary %s", addr)
			}
		}
	})

	t.Run("failover", func(t *testing.T) {
		type countedKey struct{ policy, subject, addr string }
		var keys []countedKey
		for _, policy := range counted {
			for _, addr := range tp.primaries {
				for range 2 {
					keys = append(keys, countedKey{policy, tp.subjectOn(t, policy, addr, taken), addr})
				}
			}
		}
		for _, k := range keys {
			for i := range countedAttempts {
				assert.Equal(t, int64(countedLimit-i-1), remaining(t, instances[i%2], k.policy, k.subject), "%+v", k)
			}
		}
		probe := tp.subjectOn(t, "probe", dead, taken)
		var others []string // probe subjects on the other primaries
		for _, addr := range tp.primaries {
			if addr != dead {
				others = append(others, tp.subjectOn(t, "probe", addr, taken))
			}
		}

		tp.kill(dead)
		// Until the promotion, the other primaries keep deciding, even
		// with a third of the traffic failing on the dead one: the circuit
		// breaker (one per instance) opens at half.
		for round := range 5 {
			for i, in := range instances {
				code, _, _ := check(t, in, "probe", probe)
				t.Logf("round %d, instance %d: %d on the dead primary's key", round, i, code)
				for _, subject := range others {
					code, body, _ := check(t, in, "probe", subject)
					assert.Equal(t, http.StatusOK, code, "instance %d, a surviving primary's key: %v", i, body)
				}
			}
		}
		tp.promoted(dead)
		promoted := time.Now()
		for i, in := range instances {
			// Poll until the service decides again: the bound is on the
			// service, a loaded machine only makes the polls fewer.
			var code int
			var body map[string]any
			for {
				code, body, _ = check(t, in, "probe", probe)
				if code == http.StatusOK || code == http.StatusTooManyRequests || time.Since(promoted) > failoverWithin {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, code,
				"instance %d still answers %d %v %s after the promotion", i, code, body, failoverWithin)
			t.Logf("instance %d decides again %s after the promotion", i, time.Since(promoted).Round(time.Millisecond))
		}

		for _, k := range keys {
			after := countedLimit - remaining(t, instances[0], k.policy, k.subject) - 1 // the count before this check
			if k.addr == dead {
				// Replication is asynchronous: the last writes may go with
				// the primary, but nothing is ever counted twice.
				assert.LessOrEqual(t, after, int64(countedAttempts), "%+v on the killed primary", k)
			} else {
				assert.Equal(t, int64(countedAttempts), after, "%+v on a surviving primary", k)
			}
		}
	})
}

// nodeKeys returns the service's keys (tollgate:*) on the node at addr,
// sorted, one a line.
func nodeKeys(t *testing.T, addr string) string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "tollgate:*").Result()
	require.NoError(t, err, "KEYS on %s", addr)
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "\n")
	}
	return b.String()
}

func TestInstancesOnCluster(t *testing.T) {
	skipShort(t)
	c := redistest.StartCluster(t)
	primaries := c.Primaries()
	require.Len(t, primaries, 3)
	tp := &topology{url: c.URL(), owner: c.OwnerOf, kill: c.Kill, promoted: c.WaitPromoted,
		keysOn: func(addr string) string { return nodeKeys(t, addr) }}
	for addr := range primaries {
		tp.primaries = append(tp.primaries, addr)
	}
	slices.Sort(tp.primaries)
	twoInstancesOn(t, tp, tp.primaries[0])
}

func TestInstancesOnSentinel(t *testing.T) {
	skipShort(t)
	x := redistest.StartSentinel(t)
	primary := x.Primary()
	tp := &topology{url: x.URL(), primaries: []string{primary},
		owner:    func(string) string { return primary },
		kill:     func(addr string) { x.Node(addr).Stop() },
		promoted: x.WaitPromoted,
		keysOn:   func(addr string) string { return nodeKeys(t, addr) }}
	twoInstancesOn(t, tp, primary)
	assert.NotEqual(t, primary, x.Primary(), "a replica was promoted")
}
