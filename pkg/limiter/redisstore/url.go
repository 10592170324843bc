package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tollgate/tollgate/pkg/limiter/redisurl"
)

// Kind says how a store reaches Redis.
type Kind = redisurl.Kind

// The kinds of deployment a URL names.
const (
	Single   = redisurl.Single   // one server: redis://, rediss://
	Cluster  = redisurl.Cluster  // Redis Cluster: redis+cluster://, rediss+cluster://
	Sentinel = redisurl.Sentinel // a primary watched by Sentinel: redis+sentinel://, rediss+sentinel://
)

// Target is what a Redis URL names, as ParseURL reads it.
type Target struct {
	Kind Kind
	// Addrs are the host:port addresses: the server, the cluster's seed
	// nodes, or the sentinels.
	Addrs []string
	// Master is the name Sentinel knows the primary by (Sentinel only).
	Master string
	// DB is the database number (not Cluster, which has only 0).
	DB int
	// TLS is true for the rediss schemes.
	TLS bool

	username, password string
	single             *redis.Options // Single: go-redis's own reading of the URL
}

// ErrURLHash is ParseURL's error for a URL holding a '#', which would end
// it: the text after it, often the rest of a password, would be ignored.
// It quotes nothing of the URL, and wraps ErrInvalidConfig.
var ErrURLHash = redisurl.ErrHash

// ParseURL reads a Redis URL without connecting (the forms are
// redisurl.Parse's):
//
//	redis://[user:password@]host:port[/db]            one server (go-redis's URL, query options too)
//	redis+cluster://[user:password@]host:port[,host:port…][/]
//	redis+sentinel://[user:password@]host:port[,host:port…]/MASTER[/db]
//
// and the same with rediss for TLS. For Sentinel, user and password are
// those of the data nodes; the sentinels are reached without. Errors wrap
// ErrInvalidConfig.
func ParseURL(raw string) (Target, error) {
	u, err := redisurl.Parse(raw)
	if err != nil {
		return Target{}, err
	}
	if u.Kind != Single {
		return Target{Kind: u.Kind, Addrs: u.Addrs, Master: u.Master, DB: u.DB, TLS: u.TLS, username: u.Username, password: u.Password}, nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return Target{}, fmt.Errorf("redisstore: URL: %v: %w", err, ErrInvalidConfig)
	}
	return Target{Kind: Single, Addrs: []string{o.Addr}, DB: o.DB, TLS: u.TLS,
		username: o.Username, password: o.Password, single: o}, nil
}

// ioOptions are the connection settings every kind of client gets.
type ioOptions struct {
	tls      *tls.Config // rediss' CAs and client certificate; nil: the defaults
	poolSize int
	timeout  time.Duration // socket read and write bound: the probe timeout
	dial     time.Duration
}

// router sends a key's calls to the node that owns it.
type router interface {
	// nodeFor returns the client of the primary that owns key.
	nodeFor(ctx context.Context, key string) (*redis.Client, error)
	// eachPrimary calls fn on every primary, concurrently, and joins the
	// errors, each naming its node.
	eachPrimary(ctx context.Context, fn func(context.Context, *redis.Client) error) error
	// name returns how metrics and errors name node.
	name(node *redis.Client) string
	// nodeAt returns the client of the node at addr, which a MOVED or ASK
	// redirection named (Cluster only: a member of the cluster).
	nodeAt(ctx context.Context, addr string) (*redis.Client, error)
	// failed tells the router that a call to node failed: the topology may
	// have changed (a cluster reloads its slot map, lazily).
	failed()
	close() error
}

// newRouter returns the clients for t. No call is retried by go-redis
// (MaxRetries -1): a script whose reply was lost may have run, and running
// it again would count one attempt twice; a failed call is honest instead.
// Every socket read and write is bounded by o.timeout, and the store's
// context deadlines, set when a call is written, bound it further.
func newRouter(t Target, o ioOptions) router {
	var tlsConfig *tls.Config
	if t.TLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.tls != nil {
			tlsConfig = o.tls.Clone()
		}
	}
	switch t.Kind {
	case Cluster:
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: t.Addrs, Username: t.username, Password: t.password, TLSConfig: tlsConfig,
			PoolSize: o.poolSize, DialTimeout: o.dial, ReadTimeout: o.timeout, WriteTimeout: o.timeout, PoolTimeout: o.timeout,
			ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1, MaxRedirects: -1, DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		node := func(addr string) *redis.Client {
			opt := redis.Options{Addr: addr, Username: t.username, Password: t.password, TLSConfig: tlsConfig, PoolSize: o.poolSize}
			o.apply(&opt)
			return redis.NewClient(&opt)
		}
		return &clusterRouter{c: c, newNode: node, nodes: map[string]*redis.Client{}}
	case Sentinel:
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: t.Master, SentinelAddrs: t.Addrs, Username: t.username, Password: t.password, DB: t.DB, TLSConfig: tlsConfig,
			PoolSize: o.poolSize, DialTimeout: o.dial, ReadTimeout: o.timeout, WriteTimeout: o.timeout, PoolTimeout: o.timeout,
			ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1, DisableIdentity: true,
		})
		return &singleRouter{c: c, label: "sentinel:" + t.Master}
	}
	opt := *t.single
	if t.TLS && o.tls != nil {
		name := opt.TLSConfig.ServerName // the host, as go-redis set it
		opt.TLSConfig = o.tls.Clone()
		if opt.TLSConfig.ServerName == "" {
			opt.TLSConfig.ServerName = name
		}
	}
	if o.poolSize > 0 {
		opt.PoolSize = o.poolSize
	}
	o.apply(&opt)
	return &singleRouter{c: redis.NewClient(&opt), label: opt.Addr}
}

// apply sets the I/O settings of a client of one node: a server, or a
// cluster node that a redirection named.
func (o ioOptions) apply(opt *redis.Options) {
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = o.dial, o.timeout, o.timeout, o.timeout
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = 1 // one dial per attempt: a refused dial fails the call at once
	opt.MaxRetries = -1
	opt.DisableIdentity = true // no CLIENT SETINFO round trip on each dial
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// singleRouter is one client: a server, or Sentinel's current primary (the
// failover client follows promotions, and go-redis drops a connection that
// answered READONLY, so a demoted primary loses our connections at its first
// refused write).
type singleRouter struct {
	c     *redis.Client
	label string
}

func (r *singleRouter) nodeFor(context.Context, string) (*redis.Client, error) { return r.c, nil }

func (r *singleRouter) eachPrimary(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	if err := fn(ctx, r.c); err != nil {
		return fmt.Errorf("node %s: %w", r.label, err)
	}
	return nil
}

func (r *singleRouter) name(*redis.Client) string { return r.label }
func (r *singleRouter) failed()                   {}
func (r *singleRouter) close() error              { return r.c.Close() }

func (r *singleRouter) nodeAt(_ context.Context, addr string) (*redis.Client, error) {
	return nil, fmt.Errorf("%s redirected the call to %s, and it is not a cluster node", r.label, addr)
}

// clusterRouter routes each key to its slot's primary with go-redis's slot
// map, and sends to that node's own client: the ClusterClient's Process and
// Pipelined would retry a call whose connection broke after it was written
// (they retry network errors with redirects), and a script may have run by
// then. The store follows redirections (MOVED, ASK) itself (see follow),
// through clients of its own for the nodes they name: a node that imports a
// slot may own none yet, and go-redis has no client for it.
type clusterRouter struct {
	c       *redis.ClusterClient
	newNode func(addr string) *redis.Client

	mu    sync.Mutex
	nodes map[string]*redis.Client // redirection targets, by address
}

func (r *clusterRouter) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	return r.c.MasterForKey(ctx, key)
}

func (r *clusterRouter) eachPrimary(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	var (
		mu   sync.Mutex
		errs []error
	)
	err := r.c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		if err := fn(ctx, node); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("node %s: %w", node.Options().Addr, err))
			mu.Unlock()
		}
		return nil
	})
	if err != nil { // the slot map could not be had
		return fmt.Errorf("cluster: %w", err)
	}
	return errors.Join(errs...)
}

func (r *clusterRouter) name(node *redis.Client) string { return node.Options().Addr }
func (r *clusterRouter) failed()                        { r.c.ReloadState(context.Background()) }

// nodeAt returns the client of the cluster member at addr. A redirection
// to an address that is not a member (CLUSTER NODES, asked again for every
// address not met before) is not followed: a node cannot send the calls,
// and the AUTH of their connections, anywhere it likes. Asking again also
// closes the clients of addresses that are no longer members.
func (r *clusterRouter) nodeAt(ctx context.Context, addr string) (*redis.Client, error) {
	r.mu.Lock()
	closed, node := r.nodes == nil, r.nodes[addr]
	r.mu.Unlock()
	if closed {
		return nil, errBatcherClosed
	}
	if node != nil {
		return node, nil
	}
	list, err := r.c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("cluster: the members could not be had to follow a redirection to %s: %w", addr, err)
	}
	members := clusterMembers(list)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodes == nil {
		return nil, errBatcherClosed
	}
	for a, n := range r.nodes {
		if !members[a] {
			delete(r.nodes, a)
			_ = n.Close() // calls in flight on it fail, as on a node gone
		}
	}
	if !members[addr] {
		return nil, fmt.Errorf("the call was redirected to %s, which is not a member of the cluster", addr)
	}
	if node = r.nodes[addr]; node == nil {
		node = r.newNode(addr)
		r.nodes[addr] = node
	}
	return node, nil
}

// clusterMembers reads the addresses of CLUSTER NODES' answer: each line's
// second field, "ip:port@cport" or "ip:port@cport,hostname" (then
// hostname:port is a member's address too).
func clusterMembers(list string) map[string]bool {
	members := map[string]bool{}
	for line := range strings.Lines(list) {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		addr, rest, _ := strings.Cut(fields[1], "@")
		if addr == "" || strings.HasPrefix(addr, ":") { // a node whose address is not known yet
			continue
		}
		members[addr] = true
		if _, hostname, ok := strings.Cut(rest, ","); ok && hostname != "" {
			if _, port, err := net.SplitHostPort(addr); err == nil {
				members[net.JoinHostPort(hostname, port)] = true
			}
		}
	}
	return members
}

func (r *clusterRouter) close() error {
	r.mu.Lock()
	nodes := r.nodes
	r.nodes = nil
	r.mu.Unlock()
	errs := []error{r.c.Close()}
	for _, node := range nodes {
		errs = append(errs, node.Close())
	}
	return errors.Join(errs...)
}
