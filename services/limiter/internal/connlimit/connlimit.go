// Package connlimit bounds the connections a listener hands to a server: at
// most a number open at once, and at most a number per client address (IPv6
// grouped by a prefix, as rate-limit keys are). Addresses the operator
// exempts (trusted proxies, which speak for many clients) are bounded by the
// listener's total only.
//
// When a new connection finds no slot, an idle one is reclaimed for it
// rather than the new one refused: a connection the HTTP server reports idle
// (accepted but silent, or a keep-alive between requests; see TrackState),
// or a gRPC one with no call in flight (see Options.IdleBetweenCalls), is
// closed, taken from the client holding the most connections, never
// from a client holding no more than the newcomer. A client at its own
// share may likewise swap one of its idle connections for the new one.
// Only when nothing can be reclaimed is the new connection closed as soon
// as it is accepted, so its descriptor is given back at once. Idle
// connections held by a few addresses therefore cannot exhaust the
// process's descriptors and lock every other client out.
package connlimit

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

// Options are a Listener's bounds.
type Options struct {
	// Max is the most connections open at once; < 1 is no bound (and no
	// reclaiming: a slot is never short).
	Max int
	// PerClient is the most connections open at once from one client
	// address; < 1 is no bound.
	PerClient int
	// IPv6Prefix groups IPv6 clients by this many leading bits, as the
	// rate limits do; 0 (or a value outside 1..128) means
	// httplimit.DefaultIPv6Prefix.
	IPv6Prefix int
	// Exempt reports whether a client address is bounded by Max only (a
	// trusted proxy); nil exempts none. It is called once per accepted
	// connection and must be safe for concurrent use.
	Exempt func(netip.Addr) bool
	// IdleBetweenCalls hands every connection out idle, and so
	// reclaimable, and keeps it so but while a call is in flight on it
	// (see BeginCall): for a server without TrackState that multiplexes
	// calls on a connection (gRPC), whose connections would otherwise be
	// busy from the first byte, so that ones stalled in their handshake,
	// or open with no call, could hold every slot until their deadline.
	IdleBetweenCalls bool
}

// Listener is a net.Listener whose Accept hands out connections within its
// Options. It is safe for concurrent use.
type Listener struct {
	net.Listener
	opts Options
	keys *httplimit.Clients // keys client addresses

	mu      sync.RWMutex
	open    int
	clients map[string]*client
	byAddrs map[addrs]*conn // with IdleBetweenCalls: for BeginCall

	refused, reclaimed atomic.Uint64
}

// client is what one client address holds.
type client struct {
	exempt bool
	conns  map[*conn]struct{}
}

// Wrap bounds ln with o.
func Wrap(ln net.Listener, o Options) *Listener {
	keys, err := httplimit.NewClients(httplimit.IPv6Prefix(o.IPv6Prefix))
	if err != nil { // a prefix out of range
		keys, _ = httplimit.NewClients() // the defaults are valid
	}
	return &Listener{Listener: ln, opts: o, keys: keys, clients: map[string]*client{}, byAddrs: map[addrs]*conn{}}
}

// Accept returns the next connection within the bounds, reclaiming an idle
// connection to make room for it when it can, and closing those it cannot
// make room for as they come.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, ip := l.clientOf(c.RemoteAddr())
		exempt := l.opts.Exempt != nil && ip.IsValid() && l.opts.Exempt(ip)
		nc := &conn{Conn: c, l: l, key: key}
		if l.opts.IdleBetweenCalls {
			nc.state.Store(stateIdle)
			nc.addrs, nc.indexed = addrsOf(c.LocalAddr(), c.RemoteAddr())
			nc.end = nc.endCall
		}
		admitted, victim := l.take(nc, exempt)
		if victim != nil {
			l.reclaimed.Add(1)
			victim.Conn.Close()
		}
		if admitted {
			return nc, nil
		}
		l.refused.Add(1)
		c.Close()
	}
}

// Refused returns how many connections were closed on arrival because no
// slot could be made for them.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Reclaimed returns how many idle connections were closed to make room for
// new ones.
func (l *Listener) Reclaimed() uint64 { return l.reclaimed.Load() }

// Open returns how many connections handed out are still open.
func (l *Listener) Open() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.open
}

// Idle returns how many connections handed out are idle (see TrackState
// and BeginCall).
func (l *Listener) Idle() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := 0
	for _, cl := range l.clients {
		for c := range cl.conns {
			if c.state.Load() == stateIdle {
				n++
			}
		}
	}
	return n
}

// take admits nc when the bounds allow it, or when an idle connection can
// be reclaimed for it: that one is returned, its slot already given back,
// for the caller to close outside the lock.
func (l *Listener) take(nc *conn, exempt bool) (admitted bool, victim *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cl := l.clients[nc.key]
	if cl == nil {
		cl = &client{conns: map[*conn]struct{}{}}
	}
	cl.exempt = exempt // the latest answer: the operator's list may change
	overOwn := !exempt && l.opts.PerClient > 0 && len(cl.conns) >= l.opts.PerClient
	if overOwn || (l.opts.Max > 0 && l.open >= l.opts.Max) {
		if overOwn {
			// At its own share: only one of its own idle connections may go.
			victim = cl.idleConn()
		} else {
			victim = l.fairVictim(cl)
		}
		if victim == nil || !victim.state.CompareAndSwap(stateIdle, stateClosed) {
			return false, nil
		}
		l.forget(victim)
	}
	l.open++
	cl.conns[nc] = struct{}{}
	l.clients[nc.key] = cl
	if nc.indexed {
		l.byAddrs[nc.addrs] = nc
	}
	return true, victim
}

// load ranks a client for reclaiming: the connections it holds; an exempt
// one (a trusted proxy, speaking for many clients) counts as one client per
// PerClient of them.
func (l *Listener) load(cl *client) int {
	if cl.exempt && l.opts.PerClient > 0 {
		return len(cl.conns) / l.opts.PerClient
	}
	return len(cl.conns)
}

// fairVictim returns an idle connection of the client with the highest load
// that holds one, provided that load is above the newcomer's: a client is
// never made to give way to one that holds as much as it does.
func (l *Listener) fairVictim(newcomer *client) *conn {
	var victim *conn
	best := l.load(newcomer)
	for _, cl := range l.clients {
		if load := l.load(cl); load > best {
			if c := cl.idleConn(); c != nil {
				victim, best = c, load
			}
		}
	}
	return victim
}

// idleConn returns one of cl's idle connections, or nil.
func (cl *client) idleConn() *conn {
	for c := range cl.conns {
		if c.state.Load() == stateIdle {
			return c
		}
	}
	return nil
}

// forget gives c's slot back; the caller holds l.mu and has moved c to
// stateClosed, so this happens once per connection.
func (l *Listener) forget(c *conn) {
	l.open--
	cl := l.clients[c.key]
	delete(cl.conns, c)
	if len(cl.conns) == 0 {
		delete(l.clients, c.key)
	}
	if c.indexed && l.byAddrs[c.addrs] == c { // a later connection may have the same ends
		delete(l.byAddrs, c.addrs)
	}
}

// clientOf names the client of a connection: its address as a rate-limit
// key (IPv6 by the prefix), with the address itself; or the whole address
// text and no address when it is not IP.
func (l *Listener) clientOf(a net.Addr) (string, netip.Addr) {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			ip = ip.Unmap()
			return l.keys.AddrKey(ip), ip
		}
	}
	return a.String(), netip.Addr{}
}

// The states of a connection. Only an idle one may be reclaimed; the move
// to stateClosed, by Close or by a reclaim, happens once and gives the slot
// back.
const (
	stateBusy   int32 = iota // serving (a request or a call), or not tracked
	stateIdle                // accepted and silent, or between two requests (or calls)
	stateClosed              // its slot given back
)

// conn gives its place back once, on the first Close or when reclaimed.
type conn struct {
	net.Conn
	l     *Listener
	key   string
	state atomic.Int32

	// With IdleBetweenCalls: its addresses, when they are TCP ones, and
	// the calls in flight on it.
	addrs   addrs
	indexed bool
	end     func() // endCall, made once
	callMu  sync.Mutex
	calls   int
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	for s := c.state.Load(); s != stateClosed; s = c.state.Load() {
		if c.state.CompareAndSwap(s, stateClosed) {
			c.l.mu.Lock()
			c.l.forget(c)
			c.l.mu.Unlock()
			break
		}
	}
	return err
}

// addrs are a TCP connection's two ends, which name it on a listener.
type addrs struct{ local, remote netip.AddrPort }

// addrsOf returns the ends of a TCP connection; false for another kind.
func addrsOf(local, remote net.Addr) (addrs, bool) {
	lt, ok1 := local.(*net.TCPAddr)
	rt, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return addrs{}, false
	}
	return addrs{lt.AddrPort(), rt.AddrPort()}, true
}

// TrackState is an http.Server ConnState hook that tells a Listener which
// of its connections are idle, and so may be reclaimed: a new connection
// until its first request arrives, and a keep-alive connection between
// requests. Connections of other listeners (and those a server hijacks)
// are left alone; a connection wrapped by crypto/tls is unwrapped.
func TrackState(nc net.Conn, s http.ConnState) {
	c := of(nc)
	if c == nil {
		return
	}
	switch s {
	case http.StateNew, http.StateIdle:
		c.state.CompareAndSwap(stateBusy, stateIdle)
	case http.StateActive, http.StateHijacked:
		c.state.CompareAndSwap(stateIdle, stateBusy)
	}
}

// BeginCall marks the connection of l between local and remote (a server's
// peer addresses) busy, so not to be reclaimed, until the end it returns is
// called and no other call is in flight on it. With no such connection, or
// without IdleBetweenCalls, it returns nil.
func (l *Listener) BeginCall(local, remote net.Addr) (end func()) {
	a, ok := addrsOf(local, remote)
	if !ok {
		return nil
	}
	l.mu.RLock()
	c := l.byAddrs[a]
	l.mu.RUnlock()
	if c == nil {
		return nil
	}
	c.callMu.Lock()
	if c.calls++; c.calls == 1 {
		c.state.CompareAndSwap(stateIdle, stateBusy) // fails once reclaimed or closed: the call dies with it
	}
	c.callMu.Unlock()
	return c.end
}

// endCall ends a call begun on c: it is idle again, and reclaimable, once no
// other call is in flight on it.
func (c *conn) endCall() {
	c.callMu.Lock()
	if c.calls--; c.calls == 0 {
		c.state.CompareAndSwap(stateBusy, stateIdle)
	}
	c.callMu.Unlock()
}

// of returns the Listener's connection nc is or wraps with crypto/tls;
// nil for another.
func of(nc net.Conn) *conn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, _ := nc.(*conn)
	return c
}
