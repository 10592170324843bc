// Package connlimit bounds the connections a listener hands to a server: at
// most a number open at once, and at most a number per client address (IPv6
// grouped by /64, as rate-limit keys are). A connection over either bound is
// closed as soon as it is accepted, so its descriptor is given back at once:
// idle connections held by one client cannot exhaust the process's
// descriptors and lock every other client out.
package connlimit

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

// Listener is a net.Listener whose Accept hands out at most Max connections
// open at once, at most PerAddr from one client address. It is safe for
// concurrent use.
type Listener struct {
	net.Listener
	max, perAddr int

	mu     sync.Mutex
	open   int
	byAddr map[string]int

	refused atomic.Uint64
}

// Wrap bounds ln: at most max connections open at once and at most perAddr
// per client address; a bound < 1 is no bound.
func Wrap(ln net.Listener, max, perAddr int) *Listener {
	return &Listener{Listener: ln, max: max, perAddr: perAddr, byAddr: map[string]int{}}
}

// Accept returns the next connection within the bounds, closing those over
// them as they come.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientKey(c.RemoteAddr())
		if l.take(key) {
			return &conn{Conn: c, l: l, key: key}, nil
		}
		l.refused.Add(1)
		c.Close()
	}
}

// Refused returns how many connections were closed because of a bound.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Open returns how many connections handed out are still open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *Listener) take(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.max > 0 && l.open >= l.max) || (l.perAddr > 0 && l.byAddr[key] >= l.perAddr) {
		return false
	}
	l.open++
	l.byAddr[key]++
	return true
}

func (l *Listener) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[key]--; l.byAddr[key] <= 0 {
		delete(l.byAddr, key)
	}
}

// peers keys connection addresses as the rate limits do (IPv6 by /64).
var peers, _ = httplimit.NewClients() // the default options are valid

// clientKey names the client of a connection: its address as a rate-limit
// key (IPv6 by /64), or the whole address text when it is not IP.
func clientKey(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return peers.AddrKey(ip)
		}
	}
	return a.String()
}

// conn gives its place back once, on the first Close.
type conn struct {
	net.Conn
	l    *Listener
	key  string
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}
