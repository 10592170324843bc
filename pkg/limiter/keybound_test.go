package limiter_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

func bounded(t testing.TB, s limiter.Store) *limiter.KeyBound {
	t.Helper()
	b, err := limiter.NewKeyBound(s, limiter.DefaultKeyBytes)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// The bound changes how keys are stored, never a decision.
func TestKeyBoundConformance(t *testing.T) {
	limitertest.Run(t, func(t testing.TB) limiter.Store { return bounded(t, memstore.New()) })
}

// The wrapper declares what the store declares (a remote store stays
// remote: the service's outage handling depends on it).
func TestKeyBoundKeepsCapabilities(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(srv.Prefix()))
	require.NoError(t, err)
	assert.True(t, limiter.CapabilitiesOf(bounded(t, s)).Remote)
	assert.Equal(t, limiter.CapabilitiesOf(memstore.New()), limiter.CapabilitiesOf(bounded(t, memstore.New())))
}

func TestNewKeyBoundRefusesBadBounds(t *testing.T) {
	for _, n := range []int{0, limiter.MinKeyBytes - 1, limiter.MaxKeyLen + 1} {
		_, err := limiter.NewKeyBound(memstore.New(), n)
		assert.ErrorIs(t, err, limiter.ErrInvalidKey, "%d", n)
	}
}

// longKeys are n distinct keys of 1000 bytes whose first 900 bytes are the
// same.
func longKeys(n int) []limiter.Key {
	keys := make([]limiter.Key, n)
	for i := range keys {
		keys[i] = limiter.Key{Subject: strings.Repeat("k", 900) + fmt.Sprintf("%0100d", i), Scope: strings.Repeat("e", 300)}
	}
	return keys
}

// TestKeyBoundKeepsKeysApart: long keys that differ only past the bound are
// separate counters; the digest of a long key, sent as a key, is not that
// key's counter; Peek, Reset and ResetSubject find what Allow counted.
func TestKeyBoundKeepsKeysApart(t *testing.T) {
	ctx := context.Background()
	s := bounded(t, memstore.New())
	p := limiter.Policy{Name: "p", Algorithm: limiter.FixedWindow, Limit: 2, Window: 60e9}
	keys := longKeys(2)
	allow := func(k limiter.Key) limiter.Decision {
		d, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: t0})
		require.NoError(t, err)
		return d
	}
	assert.Equal(t, int64(1), allow(keys[0]).Count)
	assert.Equal(t, int64(2), allow(keys[0]).Count)
	assert.Equal(t, int64(1), allow(keys[1]).Count, "a key differing past the bound is its own counter")
	digest := limiter.BoundKey(keys[0], limiter.DefaultKeyBytes)
	require.True(t, strings.HasPrefix(digest.Subject, "sha256:"))
	assert.Len(t, digest.Subject, limiter.MinKeyBytes)
	assert.Equal(t, int64(1), allow(digest).Count, "a client sending another key's digest gets its own counter")
	short := limiter.Key{Subject: "short", Scope: "e"}
	assert.Equal(t, short, limiter.BoundKey(short, limiter.DefaultKeyBytes), "short keys are stored as they are")

	d, err := s.Peek(ctx, p, keys[0], t0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Count)
	n, err := s.Reset(ctx, p, keys[1])
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	n, err = s.ResetSubject(ctx, p, keys[0].Subject)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "the units of keys[0]'s window")

	_, err = s.Allow(ctx, p, limiter.Request{Key: limiter.Key{Subject: strings.Repeat("k", limiter.MaxKeyLen+1)}, Cost: 1, Now: t0})
	assert.ErrorIs(t, err, limiter.ErrInvalidKey, "keys over MaxKeyLen are refused, not hashed")
}

// TestKeyBoundInEveryStore: what the stores hold is at most the bound,
// read from the SQLite file and from Redis's key names.
func TestKeyBoundInEveryStore(t *testing.T) {
	ctx := context.Background()
	keys := longKeys(50)
	p := limiter.Policy{Name: "p", Algorithm: limiter.SlidingLog, Limit: 5, Window: 60e9}
	flood := func(t *testing.T, s limiter.Store) {
		for _, k := range keys {
			_, err := s.Allow(ctx, p, limiter.Request{Key: k, Cost: 1, Now: t0, Audit: "/ping"})
			require.NoError(t, err)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "limiter.db")
		s, err := sqlitestore.Open(path)
		require.NoError(t, err)
		flood(t, bounded(t, s))
		db, err := sql.Open("sqlite", "file:"+path)
		require.NoError(t, err)
		defer db.Close()
		for _, q := range []string{
			"SELECT MAX(LENGTH(user_id)) FROM rate_events", "SELECT MAX(LENGTH(endpoint)) FROM rate_events",
			"SELECT MAX(LENGTH(key)) FROM api_calls", "SELECT COUNT(DISTINCT user_id) FROM rate_events",
		} {
			var n int
			require.NoError(t, db.QueryRow(q).Scan(&n))
			if strings.Contains(q, "COUNT") {
				assert.Equal(t, len(keys), n, q)
			} else {
				assert.LessOrEqual(t, n, limiter.DefaultKeyBytes, q)
			}
		}
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		s, err := redisstore.Open(srv.URL(), redisstore.WithPrefix(srv.Prefix()), redisstore.WithTimeout(5*time.Second))
		require.NoError(t, err)
		flood(t, bounded(t, s))
		names, err := srv.Client().Keys(ctx, srv.Prefix()+"*").Result()
		require.NoError(t, err)
		assert.Len(t, names, len(keys))
		for _, name := range names {
			assert.LessOrEqual(t, len(name), len(srv.Prefix())+2*limiter.DefaultKeyBytes+32, name)
		}
	})
}
