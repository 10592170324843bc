package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// exact lists the atomic algorithms.
var exact = []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket}

// TestServerTimeSharesOneClock: two instances whose clocks are a minute apart
// (23:59:30 and 00:00:30, across a day boundary) share one fixed window of a
// day. With server time they enforce one limit in one window; with client
// time each instance counts in its own day's window and twice the limit
// passes: why the default is server time.
func TestServerTimeSharesOneClock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	p := policy("skew", limiter.FixedWindow, 5, 24*time.Hour)
	k := limiter.Key{Subject: "shared"}
	clocks := [2]time.Time{time.Date(2026, 1, 1, 23, 59, 30, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 30, 0, time.UTC)}
	play := func(t *testing.T, opts ...Option) (allowed int64, starts map[time.Time]int) {
		prefix := srv.Prefix() + "-" + t.Name()[len("TestServerTimeSharesOneClock/"):]
		stores := [2]*Store{openStore(t, srv, prefix, opts...), openStore(t, srv, prefix, opts...)}
		starts = map[time.Time]int{}
		for i := range 2 * p.Limit {
			d := allow(t, stores[i%2], p, k, 1, clocks[i%2])
			if d.Allowed {
				allowed++
			}
			starts[d.WindowStart]++
		}
		return allowed, starts
	}
	t.Run("server", func(t *testing.T) {
		allowed, starts := play(t)
		assert.Equal(t, p.Limit, allowed)
		assert.Equal(t, map[time.Time]int{limiter.WindowStart(serverTime(t, rdb), p.Window): int(2 * p.Limit)}, starts)
	})
	t.Run("client", func(t *testing.T) {
		allowed, starts := play(t, WithClientTime())
		assert.Equal(t, 2*p.Limit, allowed, "over-admission: each clock has its own window")
		assert.Equal(t, map[time.Time]int{
			limiter.WindowStart(clocks[0], p.Window): int(p.Limit),
			limiter.WindowStart(clocks[1], p.Window): int(p.Limit),
		}, starts)
	})
}

// TestServerTimeReported: in server-time mode the decision's times are the
// server's, whatever Request.Now says.
func TestServerTimeReported(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := openStore(t, srv, srv.Prefix())
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.TokenBucket, limiter.SlidingWindow} {
		p := policy("reported", alg, 5, time.Minute)
		before := serverTime(t, rdb)
		d := allow(t, s, p, limiter.Key{Subject: "u"}, 1, base.AddDate(-20, 0, 0))
		after := serverTime(t, rdb)
		used := d.WindowStart.Add(p.Window) // now − window, for these algorithms
		assert.False(t, used.Before(before), "%s: %s used, server said %s before", alg, used, before)
		assert.False(t, used.After(after), "%s: %s used, server said %s after", alg, used, after)
	}
}

// TestExactAcrossClients: two stores, two connection pools, 400 attempts at
// once on one key: each atomic algorithm admits exactly its limit.
func TestExactAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range exact {
		t.Run(string(alg), func(t *testing.T) {
			prefix := srv.Prefix() + "-" + string(alg)
			stores := []*Store{openStore(t, srv, prefix, WithClientTime()), openStore(t, srv, prefix, WithClientTime())}
			p := policy("exact", alg, 50, time.Minute)
			assert.Equal(t, p.Limit, burst(t, stores, p, limiter.Key{Subject: "hot"}, 400, base))
		})
	}
}

// TestUnsafeOverAdmits: the same burst on sliding_log_unsafe, whose count and
// record are two round trips, admits more than the limit. A round may by
// chance interleave harmlessly, so up to five rounds are played on fresh
// keys; one over-admission proves the race, and no round admits fewer than
// the limit.
func TestUnsafeOverAdmits(t *testing.T) {
	srv := redistest.Start(t)
	stores := []*Store{openStore(t, srv, srv.Prefix(), WithClientTime()), openStore(t, srv, srv.Prefix(), WithClientTime())}
	p := policy("unsafe", limiter.SlidingLogUnsafe, 50, time.Minute)
	var rounds []int64
	for round := range 5 {
		allowed := burst(t, stores, p, limiter.Key{Subject: "hot", Scope: strconv.Itoa(round)}, 400, base)
		require.GreaterOrEqual(t, allowed, p.Limit)
		rounds = append(rounds, allowed)
		if allowed > p.Limit {
			break
		}
	}
	t.Logf("admitted per round of 400 with limit %d: %v", p.Limit, rounds)
	assert.Greater(t, rounds[len(rounds)-1], p.Limit, "no round over-admitted")
}

// TestTTLs: every key a decision writes expires, within two windows for the
// window algorithms and one for the others; a peek writes nothing.
func TestTTLs(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	for _, alg := range limiter.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			prefix := srv.Prefix() + "-" + string(alg)
			s := openStore(t, srv, prefix)
			p := policy("ttl", alg, 5, time.Minute)
			_, err := s.Peek(t.Context(), p, limiter.Key{Subject: "u", Scope: "s"}, base)
			require.NoError(t, err)
			assert.Empty(t, keysOf(t, rdb, prefix), "keys after a peek")

			allow(t, s, p, limiter.Key{Subject: "u", Scope: "s"}, 1, base)
			bound := p.Window
			if alg == limiter.FixedWindow || alg == limiter.SlidingWindow {
				bound = 2 * p.Window
			}
			keys := keysOf(t, rdb, prefix)
			require.Len(t, keys, 1)
			for _, key := range keys {
				ttl, err := rdb.PTTL(t.Context(), key).Result()
				require.NoError(t, err)
				assert.Positive(t, ttl, key)
				assert.LessOrEqual(t, ttl, bound, key)
			}
			if bound == p.Window {
				return
			}
			// The expiry is set by a window's first units only: shorten it
			// as if most of it had passed; another attempt in the same window
			// leaves it, the next window's first one sets two windows again,
			// for its own field (the client's clock moves the window here).
			ct := openStore(t, srv, prefix+"-client", WithClientTime())
			k := limiter.Key{Subject: "c", Scope: "s"}
			allow(t, ct, p, k, 1, base)
			key := keysOf(t, rdb, prefix+"-client")[0]
			require.NoError(t, rdb.PExpire(t.Context(), key, time.Second).Err())
			allow(t, ct, p, k, 1, base.Add(time.Second))
			ttl, err := rdb.PTTL(t.Context(), key).Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, time.Second, "a window's later units leave the expiry")
			allow(t, ct, p, k, 1, base.Add(p.Window))
			ttl, err = rdb.PTTL(t.Context(), key).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, p.Window, "the next window's first units renew the expiry")
		})
	}
}

// TestStateStaysBounded: a key used for many windows keeps a bounded state:
// at most three window fields, and the log only the events of the last two
// windows.
func TestStateStaysBounded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := openStore(t, srv, srv.Prefix(), WithClientTime())
	k := limiter.Key{Subject: "long-lived"}
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow} {
		p := policy("bounded", alg, 5, 10*time.Second)
		key := keyName(s.prefix, p.Name, k, suffixOf(t, alg))
		for i := range 20 {
			allow(t, s, p, k, 1, base.Add(time.Duration(i)*p.Window))
			n, err := rdb.HLen(t.Context(), key).Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, n, int64(3), "%s after %d windows", alg, i+1)
		}
	}
	p := policy("bounded", limiter.SlidingLog, 5, 10*time.Second)
	key := keyName(s.prefix, p.Name, k, suffixLog)
	admitted := 0
	for i := range 100 { // one attempt a second, half of them over the limit
		if allow(t, s, p, k, 1, base.Add(time.Duration(i)*time.Second)).Allowed {
			admitted++
		}
		n, err := rdb.ZCard(t.Context(), key).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, n, 2*p.Limit+1, "events kept after %d seconds", i+1)
	}
	assert.Equal(t, 50, admitted)
}

// TestHostileKeys: subjects and scopes that would break a naive layout are
// distinct counters in Redis, and the resets remove exactly theirs.
func TestHostileKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := openStore(t, srv, srv.Prefix(), WithClientTime())
	p := policy("p}:{*", limiter.SlidingLog, 1, time.Minute)
	scopes := []string{"", "a}b", "*", "x:y", "["}
	for _, subject := range hostile {
		for _, scope := range scopes {
			k := limiter.Key{Subject: subject, Scope: scope}
			assert.True(t, allow(t, s, p, k, 1, base).Allowed, "%+v collides with an earlier key", k)
		}
	}
	keys := keysOf(t, rdb, s.prefix)
	assert.Len(t, keys, len(hostile)*len(scopes))
	slots := map[string]uint16{} // hash tag -> slot
	for _, key := range keys {
		open, end := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
		require.Less(t, open, end, key)
		tag := key[open+1 : end]
		if s, ok := slots[tag]; ok {
			assert.Equal(t, s, slot(key), key)
		}
		slots[tag] = slot(key)
	}
	assert.Len(t, slots, len(hostile), "one hash tag per subject")

	n, err := s.ResetSubject(t.Context(), p, "*")
	require.NoError(t, err)
	assert.Equal(t, int64(len(scopes)), n, "units of subject *")
	n, err = s.Reset(t.Context(), p, limiter.Key{Subject: "a}b", Scope: "x:y"})
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	for _, subject := range hostile {
		for _, scope := range scopes {
			k := limiter.Key{Subject: subject, Scope: scope}
			d, err := s.Peek(t.Context(), p, k, base)
			require.NoError(t, err)
			want := int64(1)
			if subject == "*" || k == (limiter.Key{Subject: "a}b", Scope: "x:y"}) {
				want = 0
			}
			assert.Equal(t, want, d.Count, "%+v", k)
		}
	}
}

// TestScriptFlushSurvived: after SCRIPT FLUSH the next EVALSHA answers
// NOSCRIPT and the store falls back to EVAL; state is intact.
func TestScriptFlushSurvived(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Shared() {
		t.Skip("SCRIPT FLUSH would empty the script cache of every user of " + redistest.EnvURL)
	}
	rdb := srv.Client()
	s := openStore(t, srv, srv.Prefix(), WithClientTime())
	for _, alg := range limiter.Algorithms {
		p := policy("flush-"+string(alg), alg, 5, time.Minute)
		k := limiter.Key{Subject: "u"}
		allow(t, s, p, k, 1, base)
		require.NoError(t, rdb.ScriptFlush(t.Context()).Err())
		d := allow(t, s, p, k, 1, base)
		assert.True(t, d.Allowed, alg)
		assert.Equal(t, int64(2), d.Count, alg)
	}
}

func TestOpenRejectsBadConfig(t *testing.T) {
	const url = "redis://127.0.0.1:1/0"
	bad := map[string][]Option{
		"pool size":      {WithPoolSize(-1)},
		"zero timeout":   {WithTimeout(0)},
		"empty prefix":   {WithPrefix("")},
		"glob prefix":    {WithPrefix("a*")},
		"tag prefix":     {WithPrefix("{a}")},
		"zero ratio":     {WithBreaker(BreakerConfig{Ratio: 0, MinCalls: 1, Interval: time.Second, Probes: 1})},
		"ratio over 1":   {WithBreaker(BreakerConfig{Ratio: 1.5, MinCalls: 1, Interval: time.Second, Probes: 1})},
		"no min calls":   {WithBreaker(BreakerConfig{Ratio: 0.5, MinCalls: 0, Interval: time.Second, Probes: 1})},
		"short interval": {WithBreaker(BreakerConfig{Ratio: 0.5, MinCalls: 1, Interval: time.Millisecond, Probes: 1})},
		"neg cooldown":   {WithBreaker(BreakerConfig{Ratio: 0.5, MinCalls: 1, Interval: time.Second, Cooldown: -1, Probes: 1})},
		"no probes":      {WithBreaker(BreakerConfig{Ratio: 0.5, MinCalls: 1, Interval: time.Second, Probes: 0})},
		"short probes":   {WithProbeTimeout(time.Millisecond)},
		"nil clock":      {WithBreakerClock(nil)},
		"negative again": {WithTimeout(-time.Second)},
	}
	for name, opts := range bad {
		_, err := Open(url, opts...)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	for _, u := range []string{"", "unix:///tmp/redis.sock", "http://127.0.0.1:6379", "redis://127.0.0.1:6379/notadb", "redis://[::1"} {
		_, err := Open(u)
		assert.ErrorIs(t, err, ErrInvalidConfig, "%q", u)
	}
	s, err := Open("rediss://user:secret@127.0.0.1:1/3", WithPoolSize(2))
	require.NoError(t, err, "Open does not dial")
	o := s.router.(*singleRouter).c.Options()
	assert.Equal(t, 3, o.DB)
	assert.Equal(t, "secret", o.Password)
	assert.NotNil(t, o.TLSConfig)
	assert.Equal(t, 2, o.PoolSize)
	assert.LessOrEqual(t, o.MaxRetries, 0, "no retries: a script may have run")
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Close(), limiter.ErrClosed)
}

// ExampleOpen shows the store behind a limiter.Limiter.
func ExampleOpen() {
	s, err := Open("redis://127.0.0.1:6379/0", WithPrefix("myapp"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	l, err := limiter.New(s, limiter.Policy{Name: "api", Algorithm: limiter.SlidingWindow, Limit: 100, Window: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = l // l.Allow(ctx, limiter.Key{Subject: clientID}) decides on the shared counters
	fmt.Println(l.Policy().Name)
	// Output: api
}
