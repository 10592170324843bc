// Package redisstore is a [limiter.Store] on Redis, for several service
// instances that must share one set of counters.
//
// Every decision is one atomic Lua script (one round trip), for all five
// algorithms; sliding_log_unsafe alone takes two round trips, count then
// record, with nothing holding them together, to demonstrate the race the
// other algorithms close. By default the scripts read the time from Redis
// (TIME), so instances with skewed clocks still share one clock; the
// Decision's times are then the server's, and Request.Now and Peek's now are
// ignored. WithClientTime uses the caller's time instead (tests, replays).
//
// State keys look like <prefix>:{<policy>:<subject>}:<scope>:<suffix>, with
// the user-supplied parts percent-encoded; the hash tag keeps all keys of one
// subject in one Redis Cluster slot. Every key expires by itself (PEXPIRE:
// two windows for the window algorithms, one for the log and the bucket), so
// Prune has nothing to do.
//
// The scripts of concurrent decisions share round trips: those queued while
// earlier ones are in flight are sent together as one pipeline, each caller
// still getting its own script's answer, so that many callers cost Redis
// and the service few reads and writes (WithMaxBatch).
//
// Every call is bounded by a deadline (WithTimeout) and its errors wrap
// [limiter.ErrUnavailable]; a circuit breaker (WithBreaker) then fails fast
// while Redis is down and lets a probe through after a cooldown, so the store
// recovers by itself.
//
// It needs Redis 5 or later (a script that reads TIME and then writes relies
// on effects replication, the default since 5.0). It talks to one node: the
// keys are laid out for Redis Cluster, but no cluster client is wired in
// (ResetSubject's SCAN would then have to visit every primary).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Defaults of the options.
const (
	DefaultTimeout  = 50 * time.Millisecond
	DefaultPrefix   = "tollgate"
	DefaultFailures = 5
	DefaultCooldown = time.Second
	DefaultMaxBatch = 64
)

// ErrInvalidConfig is wrapped by Open's errors for a bad URL or option.
var ErrInvalidConfig = errors.New("invalid configuration")

// Store keeps rate-limit state in Redis. It is safe for concurrent use by any
// number of goroutines, and several Stores (in one process or many) on one
// Redis share state atomically.
type Store struct {
	client     *redis.Client
	prefix     string
	timeout    time.Duration
	clientTime bool
	breaker    *breaker
	batch      *batcher // nil: every script is sent alone
	closed     atomic.Bool
}

var _ limiter.Store = (*Store)(nil)

type config struct {
	poolSize   int
	timeout    time.Duration
	clientTime bool
	prefix     string
	failures   int
	cooldown   time.Duration
	clock      limiter.Clock
	maxBatch   int
}

// Option configures Open.
type Option func(*config)

// WithPoolSize sets the number of connections to Redis (n >= 1; default
// go-redis's, 10 per GOMAXPROCS).
func WithPoolSize(n int) Option { return func(c *config) { c.poolSize = n } }

// WithTimeout sets the deadline of each call to Redis, dialling and retries
// included (d > 0; default 50ms). A dead or stalled Redis costs a caller at
// most this long, and nothing while the breaker is open.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithClientTime makes decisions use the caller's time (Request.Now, Peek's
// now) instead of the Redis server's. Meant for tests and replays: instances
// whose clocks disagree then disagree about windows too.
func WithClientTime() Option { return func(c *config) { c.clientTime = true } }

// WithPrefix sets the first part of every key name (default "tollgate"). It
// must not be empty nor contain { } * ? [ ] or \.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithBreaker opens the circuit breaker after failures consecutive failed
// calls (>= 1; default 5) and keeps it open for cooldown (>= 0; default 1s)
// before one probe call is let through.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return func(c *config) { c.failures, c.cooldown = failures, cooldown }
}

// WithMaxBatch bounds how many decisions' scripts are sent to Redis in one
// pipeline (n >= 1; default 64); 1 sends every script alone, one round trip
// each. Batching never holds a call back to wait for others: a call waits
// only while every flusher has a batch in flight, and leaves with the next.
func WithMaxBatch(n int) Option { return func(c *config) { c.maxBatch = n } }

// WithBreakerClock makes the circuit breaker time its cooldown with clk
// (default the system clock). Decisions never read it.
func WithBreakerClock(clk limiter.Clock) Option { return func(c *config) { c.clock = clk } }

func (c *config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("redisstore: "+format+": %w", append(args, ErrInvalidConfig)...)
	}
	switch {
	case c.poolSize < 0:
		return bad("pool size %d is below 1", c.poolSize)
	case c.timeout <= 0:
		return bad("timeout %s is not positive", c.timeout)
	case !validPrefix(c.prefix):
		return bad("prefix %q is empty or holds one of { } * ? [ ] \\", c.prefix)
	case c.failures < 1:
		return bad("breaker failures %d is below 1", c.failures)
	case c.cooldown < 0:
		return bad("breaker cooldown %s is negative", c.cooldown)
	case c.clock == nil:
		return bad("breaker clock is nil")
	case c.maxBatch < 1:
		return bad("max batch %d is below 1", c.maxBatch)
	}
	return nil
}

// Open returns a store on the Redis server at url, redis:// or rediss://
// (TLS), with user, password and database number taken from the URL
// (redis://user:password@host:port/db). It does not contact the server: the
// first call does, and Ping tells whether it can. Call Close to release the
// store's connections and goroutines.
func Open(url string, opts ...Option) (*Store, error) {
	c := config{
		timeout:  DefaultTimeout,
		prefix:   DefaultPrefix,
		failures: DefaultFailures,
		cooldown: DefaultCooldown,
		clock:    limiter.SystemClock{},
		maxBatch: DefaultMaxBatch,
	}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(url, "redis://") && !strings.HasPrefix(url, "rediss://") {
		return nil, fmt.Errorf("redisstore: URL scheme is not redis:// or rediss://: %w", ErrInvalidConfig)
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w: %w", ErrInvalidConfig, err)
	}
	if c.poolSize > 0 {
		o.PoolSize = c.poolSize
	}
	// Every network wait is bounded by the call's deadline.
	o.ContextTimeoutEnabled = true
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = c.timeout, c.timeout, c.timeout, c.timeout
	o.DialerRetries = 1 // one dial per attempt: a refused dial fails the call at once
	// No retries (-1; 0 would mean go-redis's default of 3). A script that
	// ran but whose reply was lost (EOF after the write) would run again on
	// a retry and count the same decision twice; a failed call is honest
	// instead: it wraps ErrUnavailable and the policy's on_store_error
	// decides. Failover still works: go-redis treats a READONLY reply (also
	// inside a script error) like a broken connection and closes it instead
	// of putting it back in the pool, so the next call dials anew and
	// re-resolves the host name (DNS, proxy or Sentinel-managed address); a
	// demoted primary loses our connections at its first refused write, and
	// a READONLY script wrote nothing, so the batcher re-sends it alone.
	o.MaxRetries = -1
	o.DisableIdentity = true // no CLIENT SETINFO round trip on each dial
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	s := &Store{
		client:     redis.NewClient(o),
		prefix:     c.prefix,
		timeout:    c.timeout,
		clientTime: c.clientTime,
		breaker:    &breaker{clock: c.clock, threshold: c.failures, cooldown: c.cooldown},
	}
	if c.maxBatch > 1 {
		s.batch = newBatcher(s.client, c.timeout, c.maxBatch)
	}
	return s, nil
}

// Allow counts one attempt of r.Cost units on r.Key under p and decides, in
// one atomic script. In server-time mode (the default) r.Now is ignored and
// the decision's times are the Redis server's. r.Audit is ignored: this store
// keeps no audit log.
func (s *Store) Allow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	if err := limiter.CheckRequest(p, r); err != nil {
		return limiter.Decision{}, fmt.Errorf("redisstore: allow: %w", err)
	}
	return s.decide(ctx, "allow", p, r.Key, r.Cost, r.Now)
}

// Peek returns k's state under p without counting anything. In server-time
// mode now is ignored.
func (s *Store) Peek(ctx context.Context, p limiter.Policy, k limiter.Key, now time.Time) (limiter.Decision, error) {
	if err := p.Validate(); err != nil {
		return limiter.Decision{}, fmt.Errorf("redisstore: peek: %w", err)
	}
	if err := k.Validate(); err != nil {
		return limiter.Decision{}, fmt.Errorf("redisstore: peek: %w", err)
	}
	return s.decide(ctx, "peek", p, k, 0, now)
}

// decide runs p's script for cost units on k (0: a peek) and rebuilds the
// decision with the root package's arithmetic from the state and time the
// script used.
func (s *Store) decide(ctx context.Context, op string, p limiter.Policy, k limiter.Key, cost int64, now time.Time) (limiter.Decision, error) {
	key := keyName(s.prefix, p.Name, k, suffixFor(p.Algorithm))
	args := make([]any, 5, 9)
	args[0], args[1] = "", "" // server time
	if s.clientTime {
		args[0], args[1] = now.Unix(), int64(now.Nanosecond())
	}
	args[2], args[3], args[4] = int64(p.Window/time.Second), p.Limit, cost
	switch p.Algorithm {
	case limiter.FixedWindow:
		v, err := s.eval(ctx, op, fixedWindowScript, key, args, 3)
		if err != nil {
			return limiter.Decision{}, err
		}
		return limiter.FixedWindowDecide(p, v[2], cost, unix(v[0], v[1])), nil
	case limiter.SlidingWindow:
		v, err := s.eval(ctx, op, slidingWindowScript, key, args, 4)
		if err != nil {
			return limiter.Decision{}, err
		}
		return limiter.SlidingWindowDecide(p, v[2], v[3], cost, unix(v[0], v[1])), nil
	case limiter.TokenBucket:
		step := int64(p.Window) / p.Limit // the emission interval, as TokenBucketDecide
		incS, incNs := split(max(cost, 1) * step)
		burstS, burstNs := split(step * p.Limit)
		v, err := s.eval(ctx, op, tokenBucketScript, key, append(args, incS, incNs, burstS, burstNs), 4)
		if err != nil {
			return limiter.Decision{}, err
		}
		d, _ := limiter.TokenBucketDecide(p, unixNano(v[2], v[3]), cost, unix(v[0], v[1]))
		return d, nil
	case limiter.SlidingLog:
		v, err := s.eval(ctx, op, slidingLogScript, key, append(args, "allow"), 8)
		if err != nil {
			return limiter.Decision{}, err
		}
		return logDecision(p, v, cost), nil
	case limiter.SlidingLogUnsafe:
		// Two round trips on purpose: between the count and the record,
		// other attempts count the same budget.
		v, err := s.eval(ctx, op, slidingLogScript, key, append(args, "check"), 8)
		if err != nil {
			return limiter.Decision{}, err
		}
		d := logDecision(p, v, cost)
		if d.Allowed && cost > 0 {
			args[0], args[1] = v[0], v[1] // record at the time the count used
			if _, err := s.eval(ctx, op, slidingLogScript, key, append(args, "record"), 8); err != nil {
				return limiter.Decision{}, err
			}
		}
		return d, nil
	}
	return limiter.Decision{}, fmt.Errorf("redisstore: %s: %q: %w", op, p.Algorithm, limiter.ErrUnknownAlgorithm)
}

// logDecision rebuilds a sliding-log decision from slidingLogScript's answer.
// limiter.SlidingLogDecide needs only the counted units, the newest counted
// event and, when refused, the event whose departure frees enough units; the
// script returns those, and the events handed to SlidingLogDecide carry the
// same units at the same times, so its result is the one it would give on
// the whole log.
func logDecision(p limiter.Policy, v []int64, cost int64) limiter.Decision {
	units, freed := v[2], v[7]
	newest := limiter.Event{At: unixNano(v[3], v[4]), Cost: units}
	var events []limiter.Event
	switch {
	case units == 0:
	case units+max(cost, 1) > p.Limit: // refused
		events = append(events, limiter.Event{At: unixNano(v[5], v[6]), Cost: freed})
		if units > freed {
			newest.Cost = units - freed
			events = append(events, newest)
		}
	default:
		events = append(events, newest)
	}
	return limiter.SlidingLogDecide(p, events, cost, unix(v[0], v[1]))
}

// eval runs script on key through the breaker and checks that it returned n
// integers.
func (s *Store) eval(ctx context.Context, op string, script *redis.Script, key string, args []any, n int) ([]int64, error) {
	var v []int64
	err := s.call(ctx, op, func(ctx context.Context) error {
		var err error
		if s.batch != nil {
			v, err = s.batch.run(ctx, script, key, args)
		} else {
			v, err = script.Run(ctx, s.client, []string{key}, args...).Int64Slice()
		}
		if err == nil && len(v) != n {
			err = fmt.Errorf("script returned %d values, want %d", len(v), n)
		}
		return err
	})
	return v, err
}

// call runs fn with the store's deadline, through the circuit breaker.
func (s *Store) call(ctx context.Context, op string, fn func(context.Context) error) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %s: %w", op, limiter.ErrClosed)
	}
	probe, ok := s.breaker.acquire()
	if !ok {
		return fmt.Errorf("redisstore: %s: circuit breaker open: %w", op, limiter.ErrUnavailable)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	err := fn(cctx)
	cancel()
	switch {
	case err == nil:
		s.breaker.release(probe, succeeded)
		return nil
	case errors.Is(err, errNotSent): // never reached Redis: no news about it
		s.breaker.release(probe, abandoned)
	case callerGaveUp(ctx): // no news about Redis
		s.breaker.release(probe, abandoned)
		cause := context.Cause(ctx)
		if cause == nil { // the deadline passed, the timer has not fired yet
			cause = context.DeadlineExceeded
		}
		err = fmt.Errorf("%w (%v)", cause, err)
	default:
		s.breaker.release(probe, failed)
	}
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %s: %w", op, limiter.ErrClosed)
	}
	return fmt.Errorf("redisstore: %s: %w: %w", op, limiter.ErrUnavailable, err)
}

// callerGaveUp reports whether the caller's own context ended, or its
// deadline passed: a network read bounded by that deadline can time out a
// moment before the context's timer marks it done.
func callerGaveUp(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// Reset deletes k's keys under p, whatever algorithm wrote them, in one
// atomic script, and returns how many records they held (window fields, log
// instants, bucket states).
func (s *Store) Reset(ctx context.Context, p limiter.Policy, k limiter.Key) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("redisstore: reset: %w", err)
	}
	if err := k.Validate(); err != nil {
		return 0, fmt.Errorf("redisstore: reset: %w", err)
	}
	keys := make([]string, len(suffixes))
	for i, suffix := range suffixes {
		keys[i] = keyName(s.prefix, p.Name, k, suffix)
	}
	return s.reset(ctx, "reset", keys)
}

// ResetSubject deletes the keys of every scope of subject under p and
// returns how many records they held. It finds them with SCAN MATCH on the
// subject's escaped key prefix, page by page, each page within the timeout;
// it is not atomic as a whole. On error it returns the records removed so
// far.
func (s *Store) ResetSubject(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("redisstore: reset subject: %w", err)
	}
	if err := (limiter.Key{Subject: subject}).Validate(); err != nil {
		return 0, fmt.Errorf("redisstore: reset subject: %w", err)
	}
	pattern := subjectPrefix(s.prefix, p.Name, subject) + "*"
	var (
		total  int64
		cursor uint64
	)
	for {
		var keys []string
		err := s.call(ctx, "reset subject", func(ctx context.Context) error {
			var err error
			keys, cursor, err = s.client.Scan(ctx, cursor, pattern, 1000).Result()
			return err
		})
		if err != nil {
			return total, err
		}
		if len(keys) > 0 {
			n, err := s.reset(ctx, "reset subject", keys)
			total += n
			if err != nil {
				return total, err
			}
		}
		if cursor == 0 {
			return total, nil
		}
	}
}

// reset deletes keys, all in one slot, with resetScript.
func (s *Store) reset(ctx context.Context, op string, keys []string) (int64, error) {
	var n int64
	err := s.call(ctx, op, func(ctx context.Context) error {
		var err error
		n, err = resetScript.Run(ctx, s.client, keys).Int64()
		return err
	})
	return n, err
}

// Prune returns 0: every key expires by itself two windows (window
// algorithms) or one window (log, bucket) after its last write.
func (s *Store) Prune(context.Context, time.Time, []limiter.Policy) (int64, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("redisstore: prune: %w", limiter.ErrClosed)
	}
	return 0, nil
}

// Ping sends PING within the timeout. While the circuit breaker is open it
// fails at once with an error wrapping limiter.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	return s.call(ctx, "ping", func(ctx context.Context) error {
		return s.client.Ping(ctx).Err()
	})
}

// Degraded reports whether the circuit breaker is open (or half-open, its
// probe not yet back): calls fail fast instead of reaching Redis.
func (s *Store) Degraded() bool { return s.breaker.isOpen() }

// Close waits for the batches in flight, then closes the connections. Later
// calls return errors wrapping limiter.ErrClosed, Close included.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("redisstore: close: %w", limiter.ErrClosed)
	}
	if s.batch != nil {
		s.batch.close()
	}
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("redisstore: close: %w", err)
	}
	return nil
}

// unix returns the time of Unix seconds sec and nanoseconds ns, in UTC.
func unix(sec, ns int64) time.Time { return time.Unix(sec, ns).UTC() }

// unixNano returns Unix seconds sec and nanoseconds ns as Unix nanoseconds.
func unixNano(sec, ns int64) int64 { return sec*int64(time.Second) + ns }

// split returns the non-negative duration d nanoseconds as whole seconds and
// nanoseconds.
func split(d int64) (sec, ns int64) {
	return d / int64(time.Second), d % int64(time.Second)
}

// Capabilities says that the state lives in Redis, shared by every
// instance, and that a call can fail while Redis cannot answer.
func (s *Store) Capabilities() limiter.Capabilities { return limiter.Capabilities{Remote: true} }
