package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/nearcache"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/fallback"
	"github.com/tollgate/tollgate/services/limiter/internal/telemetry"
)

// storeStack is the store the service decides on, built from the
// configuration by openStack alone: the configured backend with its
// metrics, its keys bounded, and when its state is remote the
// on_store_error fallback and the near cache above that. Each snapshot
// decides on its own view of it (forPolicies).
type storeStack struct {
	backend  backend
	bounded  limiter.Store    // backend's store under the key bound: probes see its own errors
	fallback *fallback.Store  // on_store_error; nil unless the store is remote
	near     *nearcache.Store // refusals answered locally; nil unless the store is remote
}

// backend is the configured store with what only its kind knows, learnt
// where it is opened rather than by testing its type later.
type backend struct {
	store      limiter.Store
	collectors []prometheus.Collector // its gauges and counters, read at scrape time
	logFiles   func(*slog.Logger)     // says at start what it writes to disk; nil: nothing
}

// openStack opens the configured store and builds the stack above it,
// registering every layer's metrics on reg. clientTime: see openBackend.
// With tracing (not nil) the store's own calls are traced. On error
// nothing is left open.
func openStack(cfg config.Config, clientTime bool, reg prometheus.Registerer, log *slog.Logger, tracing *telemetry.Tracing) (*storeStack, error) {
	b, err := openBackend(cfg, clientTime, log)
	if err != nil {
		return nil, err
	}
	s := &storeStack{backend: b}
	store := b.store
	if tracing != nil {
		store = tracing.Store(store)
	}
	// Every store, and the fallback's memory store, holds bounded keys.
	if s.bounded, err = limiter.NewKeyBound(store, cfg.MaxKeyBytes); err != nil {
		return nil, errors.Join(&config.Error{Field: "max_key_bytes", Reason: err.Error()}, b.store.Close())
	}
	collectors := b.collectors
	if limiter.CapabilitiesOf(b.store).Remote {
		if s.fallback, err = fallback.New(s.bounded, cfg.MemoryMaxKeys, reg, log); err != nil {
			return nil, errors.Join(err, b.store.Close())
		}
		s.near = nearcache.New(s.bounded, nil)
		collectors = append(collectors, nearCacheCollector{s.near})
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(fmt.Errorf("app: register metrics: %w", err), b.store.Close())
		}
	}
	return s, nil
}

// forPolicies returns the store a snapshot of cfg's policies decides on:
// the bounded store, under the fallback with the policies' on_store_error
// modes and the near cache with their near_cache settings when the store
// is remote. It opens nothing: every view shares the stack's state.
func (s *storeStack) forPolicies(cfg config.Live, policies []limiter.Policy) limiter.Store {
	store := s.bounded
	if s.fallback != nil {
		store = s.fallback.WithPolicies(policies, func(policy string) fallback.Mode {
			return fallbackMode(cfg.StoreErrorModeOf(policy))
		})
	}
	if s.near != nil {
		// Above the fallback: while Redis cannot decide, a local policy's
		// refusals are its memory store's, and are cached as such.
		store = s.near.With(store, cfg.NearCacheOf)
	}
	return store
}

// fallbackMode is the fallback's mode for a configured on_store_error.
func fallbackMode(m config.StoreErrorMode) fallback.Mode {
	switch m {
	case config.FailOpen:
		return fallback.FailOpen
	case config.Local:
		return fallback.Local
	default:
		return fallback.FailClosed
	}
}

// remote reports whether the store's state lives outside the process.
func (s *storeStack) remote() bool { return limiter.CapabilitiesOf(s.bounded).Remote }

// warnEviction warns when the store's server may evict Tollgate's keys when
// its memory is full: an evicted counter is a fresh budget.
func (s *storeStack) warnEviction(ctx context.Context, log *slog.Logger) {
	r, ok := s.backend.store.(limiter.EvictionReporter)
	if !ok {
		return
	}
	policy, evicts, err := r.EvictionPolicy(ctx)
	switch {
	case err != nil:
		log.Debug("redis maxmemory-policy unknown", "error", err)
	case evicts:
		log.Warn("redis may evict rate-limit counters when its memory is full, and an evicted counter starts again from a full budget: set maxmemory-policy noeviction and size maxmemory (docs/operating.md, Memory (Redis))", "maxmemory_policy", policy)
	}
}

// adminGuardKeys bounds the clients the admin guard remembers.
const adminGuardKeys = 100_000

// adminFailureStore returns the store that counts wrong admin keys per
// client: this process's own, whatever the configured store, so that
// guessing costs no round trip and no shared state; bounded, a full one
// evicting clients that are not blocked first.
func adminFailureStore() *memstore.Store { return memstore.New(memstore.WithMaxKeys(adminGuardKeys)) }

// openBackend opens the configured store. clientTime makes Redis decide with
// the app's clock instead of its own TIME (which keeps instances with skewed
// clocks on one time, and is the default): New asks for it with
// --redis-client-time or when a test injects a clock (WithClock), never for
// a clock shifted by WithClockOffset alone.
func openBackend(cfg config.Config, clientTime bool, log *slog.Logger) (backend, error) {
	switch cfg.Store {
	case config.StoreMemory:
		s := memstore.New(memoryOptions(cfg, log)...)
		return backend{store: s, collectors: []prometheus.Collector{memoryCollector{s}}}, nil
	case config.StoreSQLite:
		if err := os.MkdirAll(filepath.Dir(cfg.SQLitePath), 0o750); err != nil {
			return backend{}, fmt.Errorf("app: sqlite store: %w", err)
		}
		s, err := sqlitestore.Open(cfg.SQLitePath,
			sqlitestore.WithAuditRetention(cfg.AuditRetention), sqlitestore.WithDiskReserve(int64(cfg.SQLiteDiskReserve)))
		if err != nil {
			return backend{}, fmt.Errorf("app: %w", err)
		}
		return backend{store: s, collectors: []prometheus.Collector{sqliteCollector{s, log}},
			logFiles: func(log *slog.Logger) { logSQLiteFiles(log, s, cfg.SQLiteDiskReserve) }}, nil
	case config.StoreRedis:
		s, err := openRedis(cfg, clientTime, log)
		if err != nil {
			return backend{}, err
		}
		return backend{store: s, collectors: []prometheus.Collector{redisCollector{s}}}, nil
	}
	return backend{}, &config.Error{Field: "store", Reason: fmt.Sprintf("%q is not one of sqlite, memory, redis", cfg.Store)}
}

// openRedis opens the Redis store of cfg.
func openRedis(cfg config.Config, clientTime bool, log *slog.Logger) (*redisstore.Store, error) {
	quietRedisOnce.Do(func() { redis.SetLogger(redisLog{}) })
	breaker := redisstore.DefaultBreaker
	breaker.Cooldown = cfg.RedisBreakerCooldown
	opts := []redisstore.Option{redisstore.WithTimeout(cfg.RedisTimeout), redisstore.WithBreaker(breaker),
		redisstore.WithBreakerObserver(func(from, to redisstore.BreakerState) {
			log.Warn("redis circuit breaker "+to.String(), "from", from.String())
		})}
	if cfg.RedisPoolSize > 0 {
		opts = append(opts, redisstore.WithPoolSize(cfg.RedisPoolSize))
	}
	if clientTime {
		opts = append(opts, redisstore.WithClientTime())
	}
	if cfg.RedisTLSCA != "" || cfg.RedisTLSCert != "" || cfg.RedisTLSKey != "" {
		if t, err := redisstore.ParseURL(cfg.RedisURL); err == nil && !t.TLS {
			return nil, &config.Error{Field: "redis-tls-ca, redis-tls-cert, redis-tls-key", Reason: "need a rediss URL: redis:// does not use TLS"}
		}
		tc, err := clientTLSFiles("redis-tls-", cfg.RedisTLSCA, cfg.RedisTLSCert, cfg.RedisTLSKey)
		if err != nil {
			return nil, err
		}
		opts = append(opts, redisstore.WithTLSConfig(tc))
	}
	s, err := redisstore.Open(cfg.RedisURL, opts...)
	if errors.Is(err, redisstore.ErrInvalidConfig) {
		return nil, &config.Error{Field: "redis_url", Reason: err.Error()}
	}
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return s, nil
}

// quietRedisOnce installs redisLog once per process: go-redis's logger is
// global.
var quietRedisOnce sync.Once

// redisLog sends go-redis's own log lines (one per failed dial during an
// outage) to slog at debug level instead of raw lines on stderr: the store
// logs one line when it degrades and one when it recovers, and stderr stays
// one line on a failed start.
type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// logSQLiteFiles says at start what the SQLite store s writes to disk, so
// that no file appears unexplained: the database (SQLite keeps its -wal
// and -shm files beside it) and the disk reserve of reserveBytes.
func logSQLiteFiles(log *slog.Logger, s *sqlitestore.Store, reserveBytes int) {
	database, reserve := s.Files()
	if reserve == "" {
		log.Info("sqlite database, with its -wal and -shm files; no disk reserve (--sqlite-disk-reserve 0)", "database", database)
		return
	}
	log.Info("sqlite database, with its -wal and -shm files, and a disk reserve file: room kept to recover from a full disk (--sqlite-disk-reserve)",
		"database", database, "reserve", reserve, "reserve_bytes", reserveBytes)
}

// evictionWarner returns a memstore eviction hook that logs a WARN when an
// exhausted key had to be evicted (its holder gets a fresh budget), at most
// once a minute, with the number since the last line.
func evictionWarner(log *slog.Logger) func(memstore.Eviction) {
	var pending atomic.Int64
	var last atomic.Int64 // Unix ns of the last line
	return func(ev memstore.Eviction) {
		if !ev.Refused {
			return
		}
		n := pending.Add(1)
		now := time.Now().UnixNano()
		if prev := last.Load(); now-prev < int64(time.Minute) || !last.CompareAndSwap(prev, now) {
			return
		}
		pending.Add(-n)
		log.Warn("the memory store evicted exhausted keys, whose holders get a fresh budget: raise --memory-max-keys or set --memory-refuse-when-full",
			"evicted", n, "policy", ev.Policy)
	}
}

// memoryOptions are the memory store's options for cfg.
func memoryOptions(cfg config.Config, log *slog.Logger) []memstore.Option {
	opts := []memstore.Option{memstore.WithMaxKeys(cfg.MemoryMaxKeys), memstore.WithEvictionHook(evictionWarner(log))}
	if cfg.MemoryRefuseWhenFull {
		opts = append(opts, memstore.WithRefuseWhenFull())
	}
	for name, n := range cfg.MemoryPolicyMaxKeys {
		opts = append(opts, memstore.WithPolicyMaxKeys(name, n))
	}
	return opts
}
