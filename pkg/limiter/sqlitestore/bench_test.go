package sqlitestore_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

// benchKeys is how many keys each benchmark goroutine cycles through.
const benchKeys = 1024

// benchPolicy: a one-second window with a high limit, so that nearly every
// attempt is allowed and writes, while the clock advances 1 ms per attempt and
// old sliding-log events leave the window.
func benchPolicy(a limiter.Algorithm) limiter.Policy {
	return limiter.Policy{Name: "bench", Algorithm: a, Limit: 1000, Window: time.Second}
}

// attempt returns the i-th attempt of the worker whose keys start at prefix.
func attempt(prefix string, i int) limiter.Request {
	return limiter.Request{
		Key:  limiter.Key{Subject: prefix + strconv.Itoa(i%benchKeys), Scope: "/bench"},
		Cost: 1,
		Now:  t0.Add(time.Duration(i) * time.Millisecond),
	}
}

// BenchmarkAllow measures one decision per algorithm, from one goroutine
// (each waits for its own commit: no batching) and from parallel ones
// (GOMAXPROCS×4 callers, distinct keys, group-committed).
func BenchmarkAllow(b *testing.B) {
	for _, a := range limiter.Algorithms {
		p := benchPolicy(a)
		b.Run(string(a)+"/sequential", func(b *testing.B) {
			s, _ := newStore(b)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := s.Allow(ctx, p, attempt("k", i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(string(a)+"/parallel", func(b *testing.B) {
			s, _ := newStore(b)
			benchParallel(b, func(prefix string, i int) error {
				_, err := s.Allow(context.Background(), p, attempt(prefix, i))
				return err
			})
			reportBatch(b, s)
		})
	}
}

// BenchmarkPeek measures a read through the read-only pool.
func BenchmarkPeek(b *testing.B) {
	for _, a := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingLog, limiter.TokenBucket} {
		p := benchPolicy(a)
		s, _ := newStore(b)
		for i := range benchKeys {
			if _, err := s.Allow(context.Background(), p, attempt("k", i)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(string(a)+"/parallel", func(b *testing.B) {
			benchParallel(b, func(_ string, i int) error {
				r := attempt("k", i)
				_, err := s.Peek(context.Background(), p, r.Key, r.Now)
				return err
			})
		})
	}
}

// BenchmarkCommit compares, in one run and under each synchronous mode, the
// cost per fixed-window decision from parallel callers with group commit
// (batches of up to 256), with one transaction per decision (batch bound 1),
// and the cost of seed 000's upsert (docs/seeds.md) alone as one autocommit statement per
// attempt on a plain pool (a write with no read and no decision).
func BenchmarkCommit(b *testing.B) {
	p := benchPolicy(limiter.FixedWindow)
	for _, sync := range []string{"NORMAL", "FULL"} {
		for _, batch := range []int{256, 1} {
			b.Run("sync="+sync+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				s, _ := newStore(b, sqlitestore.WithSynchronous(sync), sqlitestore.WithMaxBatch(batch))
				benchParallel(b, func(prefix string, i int) error {
					_, err := s.Allow(context.Background(), p, attempt(prefix, i))
					return err
				})
				reportBatch(b, s)
			})
		}
		b.Run("sync="+sync+"/autocommit_upsert", func(b *testing.B) {
			_, path := newStore(b) // creates the schema
			db := rawDB(b, path)
			db.SetMaxOpenConns(1) // synchronous is per connection
			if _, err := db.Exec("PRAGMA synchronous = " + sync); err != nil {
				b.Fatal(err)
			}
			st, err := db.Prepare(`INSERT INTO rate_limit_windows (policy, key, endpoint, window_start, count) VALUES (?, ?, ?, ?, 1)
				ON CONFLICT(policy, key, endpoint, window_start) DO UPDATE SET count = count + 1`)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			benchParallel(b, func(prefix string, i int) error {
				r := attempt(prefix, i)
				_, err := st.Exec(p.Name, r.Key.Subject, r.Key.Scope, sqlitestore.WindowStartText(limiter.WindowStart(r.Now, p.Window)))
				return err
			})
		})
	}
}

// benchParallel runs f from GOMAXPROCS×4 goroutines, each with its own key
// prefix and attempt counter.
func benchParallel(b *testing.B, f func(prefix string, i int) error) {
	b.Helper()
	var workers atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		prefix := "w" + strconv.FormatInt(workers.Add(1), 10) + "-"
		for i := 0; pb.Next(); i++ {
			if err := f(prefix, i); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// reportBatch reports the mean number of decisions per transaction.
func reportBatch(b *testing.B, s *sqlitestore.Store) {
	b.Helper()
	if st := s.Stats(); st.Batches > 0 {
		b.ReportMetric(float64(st.Applied)/float64(st.Batches), "decisions/commit")
	}
}

// BenchmarkAllowManyKeys is the HTTP bench's shape at the store (make bench:
// 100,000 keys drawn at random, a fixed window of one second): 32 callers
// share one clock that advances 100 µs per decision, so most decisions open
// a new window for their key (an insert, not an update), and the table holds
// a few hundred thousand rows, more than SQLite's default page cache.
func BenchmarkAllowManyKeys(b *testing.B) {
	for _, a := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.TokenBucket} {
		b.Run(string(a), func(b *testing.B) {
			s, _ := newStore(b)
			p := benchPolicy(a)
			p.Limit = 1_000_000_000 // never reached; token_bucket's least: a token a nanosecond
			var clock atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(uint64(clock.Add(1)), 1))
				for pb.Next() {
					r := limiter.Request{
						Key:  limiter.Key{Subject: "k-" + strconv.Itoa(rng.IntN(100_000)), Scope: "/bench"},
						Cost: 1,
						Now:  t0.Add(time.Duration(clock.Add(1)) * 100 * time.Microsecond),
					}
					if _, err := s.Allow(context.Background(), p, r); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportBatch(b, s)
		})
	}
}
