package snapshot_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 45, 0, time.UTC)

func fixed(name string, limit int64) limiter.Policy {
	return limiter.Policy{Name: name, Algorithm: limiter.FixedWindow, Limit: limit, Window: time.Minute}
}

// parts returns valid Parts on store: policies ping, check and extra; the
// seed routes ping and check.
func parts(t *testing.T, store limiter.Store) snapshot.Parts {
	t.Helper()
	m, err := decide.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	return snapshot.Parts{
		Policies:  []limiter.Policy{fixed("ping", 3), fixed("check", 5), fixed("extra", 7)},
		PingRoute: []string{"ping"}, CheckRoute: []string{"ping", "check"},
		Store: store, StoreName: "memory", Clock: limitertest.NewClock(t0), Metrics: m,
	}
}

func memory(t *testing.T) limiter.Store {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// names returns the names of a plan's policies.
func names(p *decide.Plan) []string {
	var n []string
	for _, q := range p.Policies() {
		n = append(n, q.Name)
	}
	return n
}

func TestNewResolvesTheRoutes(t *testing.T) {
	p := parts(t, memory(t))
	p.DecisionAPI = []string{"check"}
	p.Gateway = []gateway.Rule{{Match: gateway.Match{PathPrefix: "/api/"}, Policies: []string{"extra", "ping"}}}
	s, err := snapshot.New(p)
	require.NoError(t, err)
	assert.Equal(t, []string{"ping"}, names(s.Ping))
	assert.Equal(t, []string{"ping", "check"}, names(s.Check))
	assert.Equal(t, 1, s.Gateway.Len())
	assert.Equal(t, []string{"extra", "ping"}, names(s.GatewayPlan(0)))
	for name, seed := range map[string]bool{"ping": true, "check": false, "extra": false, "nowhere": false} {
		assert.Equal(t, seed, s.Seed(name), "%s: closed to /v1/check unless it opted in", name)
	}
	for _, name := range []string{"ping", "check", "extra"} {
		plan, ok := s.Single(name)
		require.True(t, ok, name)
		assert.Equal(t, []string{name}, names(plan))
	}
	_, ok := s.Single("nowhere")
	assert.False(t, ok)
	assert.NotNil(t, s.Identity, "the default resolver")
	assert.Equal(t, p.Policies, s.Stored(), "no Envoy rules")
	p.Policies[0].Limit = 99
	assert.Equal(t, int64(3), s.Stored()[0].Limit, "the snapshot keeps its own copy")
	assert.Equal(t, int64(3), s.Ping.Policies()[0].Limit)
}

func TestNewRefusesWhatCannotServe(t *testing.T) {
	for name, change := range map[string]func(p *snapshot.Parts){
		"no store":         func(p *snapshot.Parts) { p.Store = nil },
		"no clock":         func(p *snapshot.Parts) { p.Clock = nil },
		"no metrics":       func(p *snapshot.Parts) { p.Metrics = nil },
		"invalid policy":   func(p *snapshot.Parts) { p.Policies[2].Limit = 0 },
		"policy twice":     func(p *snapshot.Parts) { p.Policies[2].Name = "check" },
		"empty route":      func(p *snapshot.Parts) { p.PingRoute = nil },
		"unknown policy":   func(p *snapshot.Parts) { p.CheckRoute = []string{"ping", "nowhere"} },
		"gateway unknown":  func(p *snapshot.Parts) { p.Gateway = []gateway.Rule{{Policies: []string{"nowhere"}}} },
		"gateway no rules": func(p *snapshot.Parts) { p.Gateway = []gateway.Rule{{}} },
	} {
		p := parts(t, memory(t))
		change(&p)
		s, err := snapshot.New(p)
		assert.Error(t, err, name)
		assert.Nil(t, s, name)
	}
}

// Stored lists the configured policies, then those the Envoy rules derive.
func TestEnvoyPartsAreStored(t *testing.T) {
	rules, err := envoyrules.LoadDir(filepath.Join("..", "envoyrules", "testdata", "rules"), envoyrules.Options{})
	require.NoError(t, err)
	p := parts(t, memory(t))
	p.Envoy = rules
	s, err := snapshot.New(p)
	require.NoError(t, err)
	stored := s.Stored()
	require.Greater(t, len(stored), len(p.Policies))
	assert.Equal(t, p.Policies, stored[:len(p.Policies)])
	assert.Equal(t, rules.Policies(), stored[len(p.Policies):])
	assert.Same(t, rules, s.Envoy)
}

// TestSwapUnderConcurrentReaders publishes new snapshots while many
// goroutines decide on whichever is in force, each request loading it once
// (as the service does). Every request's decision comes whole from the
// snapshot it loaded, and the decisions counted per generation by the
// readers and by the store agree exactly. Run under -race.
func TestSwapUnderConcurrentReaders(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) limiter.Store{
		"memory": memory,
		"sqlite": func(t *testing.T) limiter.Store {
			s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "swap.db"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			const generations, readers, requests = 20, 16, 50
			store := open(t)
			base := parts(t, store)
			m, err := decide.NewMetrics(prometheus.NewRegistry())
			require.NoError(t, err)
			build := func(gen int) *snapshot.Snapshot {
				p := base
				p.Metrics = m // shared by every snapshot, as the service shares them
				// Generation gen's one policy: its own name and limit.
				p.Policies = []limiter.Policy{fixed(fmt.Sprintf("gen%d", gen), int64(1000+gen))}
				p.PingRoute, p.CheckRoute = []string{p.Policies[0].Name}, []string{p.Policies[0].Name}
				s, err := snapshot.New(p)
				require.NoError(t, err)
				return s
			}
			snaps := make([]*snapshot.Snapshot, generations)
			for g := range snaps {
				snaps[g] = build(g)
			}
			var current atomic.Pointer[snapshot.Snapshot]
			current.Store(snaps[0])

			var served [generations]atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			key := limiter.Key{Subject: "client"}
			for range readers {
				wg.Go(func() {
					<-start
					for range requests {
						s := current.Load() // once per request
						v, err := s.Decider.Route(context.Background(), s.Check, key, 1, "")
						if !assert.NoError(t, err) || !assert.Len(t, v.Results, 1) {
							return
						}
						p := s.Check.Policies()[0]
						var gen int
						if _, err := fmt.Sscanf(p.Name, "gen%d", &gen); !assert.NoError(t, err) {
							return
						}
						assert.Equal(t, p.Limit, v.Results[0].Limit, "the decision is of the snapshot loaded")
						assert.Same(t, snaps[gen], s)
						assert.True(t, v.Allowed())
						served[gen].Add(1)
					}
				})
			}
			close(start)
			// Generation g is published once the readers have answered g
			// shares of their requests, so that swaps fall among them.
			answered := func() (n int64) {
				for g := range served {
					n += served[g].Load()
				}
				return n
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
		publish:
			for g := 1; g < generations; g++ {
				for answered() < int64(g*readers*requests/generations) {
					select {
					case <-done: // a reader stopped early (an assertion failed): nothing to wait for
						break publish
					default:
						runtime.Gosched()
					}
				}
				current.Store(snaps[g])
			}
			<-done
			assert.GreaterOrEqual(t, served[0].Load(), int64(readers*requests/generations),
				"the first generation answered every request before the first swap")

			var total int64
			for g, s := range snaps {
				n := served[g].Load()
				total += n
				p := s.Check.Policies()[0]
				d, err := store.Peek(context.Background(), p, key, t0)
				require.NoError(t, err)
				assert.Equal(t, n, d.Count, "generation %d: the store counted each of its requests", g)
			}
			assert.Equal(t, int64(readers*requests), total, "every request answered by one generation")
		})
	}
}
