// Package redisstore is a [limiter.Store] on Redis, for several service
// instances that must share one set of counters: one server, Redis Cluster,
// or a primary watched by Sentinel, chosen by the URL (ParseURL).
//
// Every decision is one atomic Lua script (one round trip), for all five
// algorithms; sliding_log_unsafe alone takes two round trips, count then
// record, with nothing holding them together, to demonstrate the race the
// other algorithms close. By default the scripts read the time from Redis
// (TIME of the node that owns the key), so instances with skewed clocks still
// share one clock; the Decision's times are then the server's, and
// Request.Now and Peek's now are ignored. WithClientTime uses the caller's
// time instead (tests, replays).
//
// State keys look like <prefix>:{<policy>:<subject>}:<scope>:<suffix>, with
// the user-supplied parts percent-encoded; the hash tag keeps all keys of one
// subject in one Redis Cluster slot, so one script, one reset and one SCAN
// reach one node. Every key expires by itself (PEXPIRE: two windows for the
// window algorithms, one for the log and the bucket), so Prune has nothing to
// do.
//
// The scripts of concurrent decisions share round trips: those queued while
// earlier ones are in flight are sent together, one pipeline per node, each
// caller still getting its own script's answer (WithMaxBatch).
//
// Time and failure. A call waits for its turn for as long as the caller's
// context lets it; if that runs out first, the call was never sent and fails
// with limiter.ErrOverloaded: this instance is saturated, Redis is not to
// blame. Once sent, Redis has the I/O timeout (WithTimeout) from the moment
// the call is written, and a decision Redis made is returned to a caller that
// still waits, even past its context's deadline. Calls that fail because of
// Redis wrap limiter.ErrUnavailable; a circuit breaker (WithBreaker) judges
// the failure ratio of recent round trips and, open, fails calls at once
// while Redis is down, then lets a few probes through with a generous
// timeout (WithProbeTimeout), so the store recovers by itself. No call is
// ever retried: a script whose reply was lost may have counted. A Redis
// Cluster redirection (MOVED, ASK) is a reply that says the script did not
// run: the call is sent on to the node it names (at most three times).
//
// It needs Redis 5 or later (a script that reads TIME and then writes relies
// on effects replication, the default since 5.0).
package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisurl"
)

// Defaults of the options.
const (
	DefaultTimeout      = 500 * time.Millisecond
	DefaultProbeTimeout = 2 * time.Second
	DefaultPrefix       = "tollgate"
	DefaultMaxBatch     = 64
)

// ErrInvalidConfig is wrapped by Open's errors for a bad URL or option.
var ErrInvalidConfig = redisurl.ErrInvalid

// Store keeps rate-limit state in Redis. It is safe for concurrent use by any
// number of goroutines, and several Stores (in one process or many) on one
// Redis share state atomically.
type Store struct {
	router       router
	kind         Kind
	prefix       string
	timeout      time.Duration
	probeTimeout time.Duration
	clientTime   bool
	breaker      *breaker
	batch        *batcher
	lag          *lagMonitor
	closed       atomic.Bool
	nodeErrors   sync.Map // node name -> *atomic.Uint64: failed round trips
}

var _ limiter.Store = (*Store)(nil)

type config struct {
	poolSize     int
	timeout      time.Duration
	probeTimeout time.Duration
	clientTime   bool
	prefix       string
	breaker      BreakerConfig
	onChange     func(from, to BreakerState)
	clock        limiter.Clock
	maxBatch     int
	tls          *tls.Config
}

// Option configures Open.
type Option func(*config)

// WithPoolSize sets the number of connections to Redis, per node (n >= 1;
// default go-redis's, 10 per GOMAXPROCS).
func WithPoolSize(n int) Option { return func(c *config) { c.poolSize = n } }

// WithTimeout sets the I/O timeout: how long Redis has to answer a call,
// counted from when the call is written to the connection (d > 0; default
// 500ms). The wait for a turn before that is bounded by the caller's
// context, not by this.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithProbeTimeout sets the I/O timeout of the half-open breaker's probes
// (d >= the I/O timeout; default 2s, or the I/O timeout if longer): generous, so that a Redis that is
// merely slow to come back is not declared dead again.
func WithProbeTimeout(d time.Duration) Option { return func(c *config) { c.probeTimeout = d } }

// WithClientTime makes decisions use the caller's time (Request.Now, Peek's
// now) instead of the Redis server's. Meant for tests and replays: instances
// whose clocks disagree then disagree about windows too.
func WithClientTime() Option { return func(c *config) { c.clientTime = true } }

// WithPrefix sets the first part of every key name (default "tollgate"). It
// must not be empty nor contain { } * ? [ ] or \.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithBreaker tunes the circuit breaker (default DefaultBreaker).
func WithBreaker(b BreakerConfig) Option { return func(c *config) { c.breaker = b } }

// WithBreakerObserver calls fn on each change of the breaker's state, from
// the goroutine whose call changed it, with the breaker locked: fn must be
// quick and must not call the store (a log line, a counter).
func WithBreakerObserver(fn func(from, to BreakerState)) Option {
	return func(c *config) { c.onChange = fn }
}

// WithMaxBatch bounds how many decisions' scripts are sent to one node in
// one pipeline (n >= 1; default 64); 1 sends every script alone, one round
// trip each, from as many flushers as the pool has connections. Batching
// never holds a call back to wait for others: a call waits only while every
// flusher has a batch in flight, and leaves with the next.
func WithMaxBatch(n int) Option { return func(c *config) { c.maxBatch = n } }

// WithBreakerClock makes the circuit breaker time its interval and cooldown
// with clk (default the system clock). Decisions never read it.
func WithBreakerClock(clk limiter.Clock) Option { return func(c *config) { c.clock = clk } }

// WithTLSConfig sets the TLS of a rediss URL: the CAs Redis' certificate
// must chain to (RootCAs) and the client certificate shown to a Redis that
// asks for one (Certificates or GetClientCertificate). Without it, the
// system's CAs and no client certificate. The server name checked is the
// address's host unless c sets one. A plain redis URL refuses it.
func WithTLSConfig(c *tls.Config) Option { return func(o *config) { o.tls = c } }

func (c *config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("redisstore: "+format+": %w", append(args, ErrInvalidConfig)...)
	}
	b := c.breaker
	switch {
	case c.poolSize < 0:
		return bad("pool size %d is below 1", c.poolSize)
	case c.timeout <= 0:
		return bad("timeout %s is not positive", c.timeout)
	case c.probeTimeout < c.timeout:
		return bad("probe timeout %s is below the timeout %s", c.probeTimeout, c.timeout)
	case !validPrefix(c.prefix):
		return bad("prefix %q is empty or holds one of { } * ? [ ] \\", c.prefix)
	case !(b.Ratio > 0 && b.Ratio <= 1):
		return bad("breaker ratio %v is not in (0, 1]", b.Ratio)
	case b.MinCalls < 1:
		return bad("breaker minimum calls %d is below 1", b.MinCalls)
	case b.Interval < 10*time.Millisecond:
		return bad("breaker interval %s is below 10ms", b.Interval)
	case b.Cooldown < 0:
		return bad("breaker cooldown %s is negative", b.Cooldown)
	case b.Probes < 1:
		return bad("breaker probes %d is below 1", b.Probes)
	case c.clock == nil:
		return bad("breaker clock is nil")
	case c.maxBatch < 1:
		return bad("max batch %d is below 1", c.maxBatch)
	}
	return nil
}

// Open returns a store on the Redis that url names (see ParseURL: one
// server, a cluster or a Sentinel-watched primary; TLS with the rediss
// schemes). It does not contact Redis: the first call does, and Ping tells
// whether it can. Call Close to release the store's connections and
// goroutines.
func Open(url string, opts ...Option) (*Store, error) {
	c := config{
		timeout:  DefaultTimeout,
		prefix:   DefaultPrefix,
		breaker:  DefaultBreaker,
		clock:    limiter.SystemClock{},
		maxBatch: DefaultMaxBatch,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.probeTimeout == 0 {
		c.probeTimeout = max(DefaultProbeTimeout, c.timeout)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	t, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	if c.tls != nil && !t.TLS {
		return nil, fmt.Errorf("redisstore: a TLS configuration for a redis:// URL, which does not use TLS (rediss:// does): %w", ErrInvalidConfig)
	}
	pool := c.poolSize
	if pool == 0 {
		pool = 10 * runtime.GOMAXPROCS(0) // go-redis's default, which the flushers need to know
	}
	s := &Store{
		router:       newRouter(t, ioOptions{poolSize: pool, timeout: c.probeTimeout, dial: c.probeTimeout, tls: c.tls}),
		kind:         t.Kind,
		prefix:       c.prefix,
		timeout:      c.timeout,
		probeTimeout: c.probeTimeout,
		clientTime:   c.clientTime,
		breaker:      newBreaker(c.breaker, c.clock, c.onChange),
		lag:          newLagMonitor(c.timeout/4, 2*c.timeout),
	}
	flushers := 2 // each with a batch in flight: enough to keep one connection per node busy
	if c.maxBatch == 1 {
		flushers = pool
	}
	s.batch = newBatcher(s.router, s.lag, c.timeout, c.probeTimeout, flushers, c.maxBatch, s.classify, s.report)
	return s, nil
}

// Kind returns the kind of Redis deployment the store talks to.
func (s *Store) Kind() Kind { return s.kind }

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
	suffix, err := suffixFor(p.Algorithm)
	if err != nil {
		return limiter.Decision{}, fmt.Errorf("redisstore: %s: %w", op, err)
	}
	key := keyName(s.prefix, p.Name, k, suffix)
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

// eval runs script on key through the breaker and the batcher and checks
// that it returned n integers.
func (s *Store) eval(ctx context.Context, op string, script *redis.Script, key string, args []any, n int) ([]int64, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("redisstore: %s: %w", op, limiter.ErrClosed)
	}
	probe, ok := s.breaker.acquire()
	var t *trip
	if obs := limiter.StoreObserverOf(ctx); obs != nil {
		t = new(trip)
		state, _ := s.breaker.status()
		defer s.observe(obs, script, state, t)
	}
	if !ok {
		return nil, fmt.Errorf("redisstore: %s: circuit breaker open: %w", op, limiter.ErrUnavailable)
	}
	v, o, err := s.batch.run(ctx, script, key, args, probe, t)
	if probe {
		s.breaker.probed(o)
	}
	if err == nil && len(v) != n {
		err = fmt.Errorf("script returned %d values, want %d", len(v), n)
	}
	return v, s.wrap(op, err)
}

// observe tells obs of one script call on its way out: script, the
// breaker's state when the call asked it, the call's round trips t.
func (s *Store) observe(obs limiter.StoreObserver, script *redis.Script, breaker BreakerState, t *trip) {
	call := limiter.StoreCall{Batch: t.batch, Script: scriptName(script), Redirects: t.redirects, Resent: t.resent, Breaker: breaker.String()}
	if t.node != nil {
		call.Node = s.router.name(t.node)
	}
	obs.ObserveStore(call)
}

// direct runs fn through the breaker with the I/O timeout (the probe timeout
// for a probe): resets, scans and pings, which do not queue for a flusher.
// fn reports each of its round trips with the outcome judge gives its error
// (onNode does).
func (s *Store) direct(ctx context.Context, op string, fn func(ctx context.Context, judge func(error) outcome) error) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %s: %w", op, limiter.ErrClosed)
	}
	probe, ok := s.breaker.acquire()
	if !ok {
		return fmt.Errorf("redisstore: %s: circuit breaker open: %w", op, limiter.ErrUnavailable)
	}
	timeout := s.timeout
	if probe {
		timeout = s.probeTimeout
	}
	judge := func(err error) outcome {
		if err != nil && callerGaveUp(ctx) { // no news about Redis
			return abandoned
		}
		return s.classify(err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	err := fn(cctx, judge)
	cancel()
	if probe {
		s.breaker.probed(judge(err))
	}
	if err != nil && callerGaveUp(ctx) {
		return fmt.Errorf("redisstore: %s: %w (%v)", op, callerErr(ctx), err)
	}
	return s.wrap(op, err)
}

// onNode makes one round trip, fn, to the node that owns key and reports its
// outcome as judge says; a redirection is followed (follow tells fn whether
// it must send ASKING first).
func (s *Store) onNode(ctx context.Context, key string, judge func(error) outcome, fn func(ctx context.Context, node *redis.Client, asking bool) error) error {
	node, err := s.router.nodeFor(ctx, key)
	if err != nil {
		s.router.failed()
		return err
	}
	err = fn(ctx, node, false)
	s.report(node, judge(err))
	return follow(ctx, s.router, s.report, judge, node, err, fn)
}

// wrap prefixes err with the operation and says what kind of failure it is:
// closed, overloaded (never sent), the caller's own (context), or Redis's
// (ErrUnavailable).
func (s *Store) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case s.closed.Load(), errors.Is(err, errBatcherClosed):
		return fmt.Errorf("redisstore: %s: %w", op, limiter.ErrClosed)
	case errors.Is(err, limiter.ErrOverloaded), errors.Is(err, context.Canceled):
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return fmt.Errorf("redisstore: %s: %w: %w", op, limiter.ErrUnavailable, err)
}

// report counts the outcome of one round trip to node: for the breaker, and
// per node when it failed.
func (s *Store) report(node *redis.Client, o outcome) {
	s.breaker.observe(o)
	if o != failed {
		return
	}
	name := s.router.name(node)
	n, ok := s.nodeErrors.Load(name)
	if !ok {
		n, _ = s.nodeErrors.LoadOrStore(name, new(atomic.Uint64))
	}
	n.(*atomic.Uint64).Add(1)
}

// classify tells what an error of a round trip says about Redis.
func (s *Store) classify(err error) outcome {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	switch {
	case err == nil:
		return succeeded
	case moved: // the slot moved: Redis answered, the slot map is stale
		s.router.failed()
		return succeeded
	case ask: // the slot is moving: Redis answered, the slot map still holds
		return succeeded
	case errors.Is(err, errNotSent), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, context.Canceled):
		return abandoned
	case isIOTimeout(err) && s.lag.starved():
		return abandoned // the reply may have waited for this process, not the other way round
	}
	return failed
}

// isIOTimeout reports whether err is a network timeout or a passed deadline
// (the store's I/O deadline: callers' deadlines are told apart before).
func isIOTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
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

// callerErr is the error of a caller that gave up: its context's cause, or
// DeadlineExceeded when the deadline passed before the context's timer
// fired.
func callerErr(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return context.DeadlineExceeded
}

// Reset deletes k's keys under p, whatever algorithm wrote them, in one
// atomic script, and returns the units they held (see limiter.Store): window
// counts, event costs, the bucket's units in flight when it was last set.
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
	return s.reset(ctx, "reset", p, keys)
}

// ResetSubject deletes the keys of every scope of subject under p and
// returns the units they held, as Reset. It finds them with SCAN MATCH on the
// subject's escaped key prefix, page by page, each page within the timeout,
// on the one node that owns the subject's hash tag; it is not atomic as a
// whole. On error it returns the units removed so far.
func (s *Store) ResetSubject(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("redisstore: reset subject: %w", err)
	}
	if err := (limiter.Key{Subject: subject}).Validate(); err != nil {
		return 0, fmt.Errorf("redisstore: reset subject: %w", err)
	}
	prefix := subjectPrefix(s.prefix, p.Name, subject)
	var (
		total  int64
		cursor uint64
	)
	for {
		var keys []string
		err := s.direct(ctx, "reset subject", func(ctx context.Context, judge func(error) outcome) error {
			// SCAN names no key: no node redirects it.
			return s.onNode(ctx, prefix, judge, func(ctx context.Context, node *redis.Client, _ bool) error {
				var err error
				keys, cursor, err = node.Scan(ctx, cursor, prefix+"*", 1000).Result()
				return err
			})
		})
		if err != nil {
			return total, err
		}
		if len(keys) > 0 {
			n, err := s.reset(ctx, "reset subject", p, keys)
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

// reset deletes keys of p, all in one slot, with resetScript, and returns
// their units.
func (s *Store) reset(ctx context.Context, op string, p limiter.Policy, keys []string) (int64, error) {
	var n int64
	err := s.direct(ctx, op, func(ctx context.Context, judge func(error) outcome) error {
		return s.onNode(ctx, keys[0], judge, func(ctx context.Context, node *redis.Client, asking bool) error {
			v, err := runScript(ctx, node, asking, resetScript, keys).Slice()
			if err != nil {
				return err
			}
			n, err = resetUnits(p, v)
			return err
		})
	})
	return n, err
}

// resetUnits adds to the units resetScript counted (v[0]) the units in
// flight of each bucket it deleted (v[1:], "tat_s:tat_ns:at_s:at_ns") at the
// time of its last update, under p. A bucket written before buckets kept
// that time ("tat_s:tat_ns") counts 0.
func resetUnits(p limiter.Policy, v []any) (int64, error) {
	n, ok := v[0].(int64)
	if !ok {
		return 0, fmt.Errorf("reset script answered %T", v[0])
	}
	for _, b := range v[1:] {
		text, _ := b.(string)
		var tatS, tatNs, atS, atNs int64
		if c, _ := fmt.Sscanf(text, "%d:%d:%d:%d", &tatS, &tatNs, &atS, &atNs); c < 4 {
			continue
		}
		d, _ := limiter.TokenBucketDecide(p, unixNano(tatS, tatNs), 0, unix(atS, atNs))
		n += d.Count
	}
	return n, nil
}

// Prune returns 0: every key expires by itself two windows (window
// algorithms) or one window (log, bucket) after its last write.
func (s *Store) Prune(context.Context, time.Time, []limiter.Policy) (int64, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("redisstore: prune: %w", limiter.ErrClosed)
	}
	return 0, nil
}

// Ping sends PING to every primary within the timeout; the error names the
// nodes that failed. While the circuit breaker is open it fails at once with
// an error wrapping limiter.ErrUnavailable that says so.
func (s *Store) Ping(ctx context.Context) error {
	return s.direct(ctx, "ping", func(ctx context.Context, judge func(error) outcome) error {
		return s.router.eachPrimary(ctx, func(ctx context.Context, node *redis.Client) error {
			err := node.Ping(ctx).Err()
			s.report(node, judge(err))
			return err
		})
	})
}

// Degraded reports whether the circuit breaker is open or half-open: calls
// fail fast instead of reaching Redis, but for a few probes.
func (s *Store) Degraded() bool {
	state, _ := s.breaker.status()
	return state != BreakerClosed
}

// Stats is what the store tells about its health, for metrics.
type Stats struct {
	// Breaker is the circuit breaker's state, and BreakerOpens how many
	// times it has opened.
	Breaker      BreakerState
	BreakerOpens uint64
	// NodeErrors counts the failed round trips per node (host:port; the
	// Sentinel master's name for Sentinel).
	NodeErrors map[string]uint64
	// Calls counts the scripts sent to Redis (decisions; resets, scans and
	// pings are not counted).
	Calls uint64
}

// Stats returns the store's health counters.
func (s *Store) Stats() Stats {
	st := Stats{NodeErrors: map[string]uint64{}}
	st.Breaker, st.BreakerOpens = s.breaker.status()
	st.Calls = s.batch.sent.Load()
	s.nodeErrors.Range(func(k, v any) bool {
		st.NodeErrors[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return st
}

// Close waits for the batches in flight, then closes the connections. Later
// calls return errors wrapping limiter.ErrClosed, Close included.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("redisstore: close: %w", limiter.ErrClosed)
	}
	s.batch.close()
	s.lag.stop()
	if err := s.router.close(); err != nil {
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
