// Package redisurl reads the Redis URLs that redisstore connects to, with
// no Redis client and nothing outside the standard library: a
// configuration can check a URL without depending on a store. redisstore's
// ParseURL reads a URL through Parse, then lets go-redis read a single
// server's query options.
//
// Its errors read "redisstore: URL: ...", as redisstore's own, since it is
// the store that reports them.
package redisurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every error of Parse (and is redisstore's
// ErrInvalidConfig).
var ErrInvalid = errors.New("invalid configuration")

// ErrHash is Parse's error for a URL holding a '#', which would end it: the
// text after it, often the rest of a password, would be ignored. It quotes
// nothing of the URL, and wraps ErrInvalid.
var ErrHash = fmt.Errorf("redisstore: URL: a '#' ends a URL: write a '#' of the user or password as %%23: %w", ErrInvalid)

// Kind says how a store reaches Redis.
type Kind int

// The kinds of deployment a URL names.
const (
	// Single is one server: redis://, rediss://.
	Single Kind = iota
	// Cluster is Redis Cluster: redis+cluster://, rediss+cluster://.
	Cluster
	// Sentinel is a primary watched by Sentinel: redis+sentinel://,
	// rediss+sentinel://.
	Sentinel
)

func (k Kind) String() string {
	switch k {
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	default:
		return "single"
	}
}

// URL is what a Redis URL names, as Parse reads it.
type URL struct {
	Kind Kind
	TLS  bool // the rediss schemes
	// Addrs are the host:port addresses of a cluster's seed nodes or the
	// sentinels (Cluster and Sentinel only: a single server's address is
	// go-redis's reading, with its defaults).
	Addrs []string
	// Master is the name Sentinel knows the primary by, and DB the
	// database number (Sentinel only).
	Master string
	DB     int
	// Username and Password are the URL's user info (Cluster and
	// Sentinel: for Sentinel, those of the data nodes).
	Username, Password string
}

// Parse reads a Redis URL:
//
//	redis://[user:password@]host:port[/db]            one server (go-redis's URL, query options too)
//	redis+cluster://[user:password@]host:port[,host:port…][/]
//	redis+sentinel://[user:password@]host:port[,host:port…]/MASTER[/db]
//
// and the same with rediss for TLS. Of a single server's URL it checks the
// scheme and that net/url reads it; the rest (address, database, query
// options) is go-redis's, which redisstore applies. Errors wrap ErrInvalid.
func Parse(raw string) (URL, error) {
	bad := func(format string, args ...any) (URL, error) {
		return URL{}, fmt.Errorf("redisstore: URL: "+format+": %w", append(args, ErrInvalid)...)
	}
	if strings.Contains(raw, "#") {
		// The rest would be a fragment: redis://:12#s3cret@host reads as
		// port 12 of localhost, the secret left in the fragment.
		return URL{}, ErrHash
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return bad("no scheme; want redis://, rediss://, redis+cluster:// or redis+sentinel://")
	}
	u := URL{TLS: strings.HasPrefix(scheme, "rediss")}
	switch scheme {
	case "redis", "rediss":
		if _, err := url.Parse(raw); err != nil {
			return bad("%v", err)
		}
		return u, nil
	case "redis+cluster", "rediss+cluster":
		u.Kind = Cluster
	case "redis+sentinel", "rediss+sentinel":
		u.Kind = Sentinel
	default:
		return bad("scheme %q is not one of redis, rediss, redis+cluster, rediss+cluster, redis+sentinel, rediss+sentinel", scheme)
	}
	// The host list has commas, which net/url takes for part of one host;
	// split it off first and let net/url read the user info.
	authority, path, _ := strings.Cut(rest, "/")
	if strings.ContainsAny(path, "?#") || strings.ContainsAny(authority, "?#") {
		return bad("query and fragment are not supported with %s", scheme)
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		info, err := url.Parse("redis://" + authority[:at+1] + "h")
		if err != nil {
			return bad("user info: %v", err)
		}
		u.Username = info.User.Username()
		u.Password, _ = info.User.Password()
		authority = authority[at+1:]
	}
	for addr := range strings.SplitSeq(authority, ",") {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return bad("address %q is not host:port", addr)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad("address %q: port is not in 1..65535", addr)
		}
		u.Addrs = append(u.Addrs, addr)
	}
	parts := strings.Split(path, "/")
	switch {
	case u.Kind == Cluster && path != "":
		return bad("a cluster URL has no path (the cluster has only database 0): %q", path)
	case u.Kind == Sentinel && (parts[0] == "" || len(parts) > 2):
		return bad("a sentinel URL needs the primary's name, /MASTER or /MASTER/db")
	case u.Kind == Sentinel && len(parts) == 2:
		db, err := strconv.Atoi(parts[1])
		if err != nil || db < 0 {
			return bad("database %q is not a number", parts[1])
		}
		u.DB = db
	}
	if u.Kind == Sentinel {
		u.Master = parts[0]
	}
	return u, nil
}
