package connlimit_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/connlimit"
)

// dialFrom connects to addr from the loopback address src (any 127.0.0.0/8
// address is local on Linux).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// serve accepts on l and keeps every connection it gets until the test
// ends, sending each a greeting byte.
func serve(t *testing.T, l *connlimit.Listener) {
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte{'!'})
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
}

// admitted reports whether the server kept c: it greets kept connections
// and closes refused ones without a word.
func admitted(t *testing.T, c net.Conn) bool {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	if err == nil {
		return true
	}
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "neither greeted nor closed in 10 s")
	return false
}

func TestBoundsPerAddressAndTotal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, connlimit.Options{Max: 3, PerClient: 2})
	serve(t, l)
	addr := ln.Addr().String()

	a1, a2, a3 := dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)
	assert.True(t, admitted(t, a1))
	assert.True(t, admitted(t, a2))
	assert.False(t, admitted(t, a3), "a third connection from one address")
	b1 := dialFrom(t, "127.0.0.3", addr)
	assert.True(t, admitted(t, b1), "another address still gets in")
	c1 := dialFrom(t, "127.0.0.4", addr)
	assert.False(t, admitted(t, c1), "over the listener's bound")
	assert.Equal(t, uint64(2), l.Refused())
	assert.Equal(t, 3, l.Open())

	// The server closing a connection gives its place back.
	require.NoError(t, a1.Close())
	require.Eventually(t, func() bool { return l.Open() == 3 }, 10*time.Second, 10*time.Millisecond)
}

// acceptInto accepts on l until the test ends, handing each connection
// to the test, unanswered, on the returned channel.
func acceptInto(t *testing.T, l *connlimit.Listener) <-chan net.Conn {
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { l.Close() })
	return accepted
}

func TestClosingGivesThePlaceBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, connlimit.Options{Max: 1})
	addr := ln.Addr().String()
	accepted := acceptInto(t, l)
	dialFrom(t, "127.0.0.1", addr)
	c := <-accepted
	assert.Equal(t, 1, l.Open())
	require.NoError(t, c.Close())
	c.Close() // a second Close fails, and gives back nothing more
	assert.Equal(t, 0, l.Open())
	dialFrom(t, "127.0.0.1", addr)
	c = <-accepted
	assert.Equal(t, 1, l.Open())
	c.Close()
}

func TestExemptAddressesAreBoundedByTheTotalOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	proxy := netip.MustParseAddr("127.0.0.2")
	l := connlimit.Wrap(ln, connlimit.Options{Max: 4, PerClient: 1, Exempt: func(a netip.Addr) bool { return a == proxy }})
	serve(t, l)
	addr := ln.Addr().String()

	for i := range 3 {
		assert.True(t, admitted(t, dialFrom(t, "127.0.0.2", addr)), "connection %d of the exempt proxy", i+1)
	}
	assert.True(t, admitted(t, dialFrom(t, "127.0.0.3", addr)), "another client's first")
	assert.False(t, admitted(t, dialFrom(t, "127.0.0.3", addr)), "another client's second, over its share")
	assert.False(t, admitted(t, dialFrom(t, "127.0.0.2", addr)), "the proxy over the listener's total")
	assert.Equal(t, 4, l.Open())
}

// httpServer serves h over l with connlimit.TrackState, until the test ends.
func httpServer(t *testing.T, l *connlimit.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ConnState: connlimit.TrackState, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

// ask sends GET / on c and reports whether an answer came back; c stays
// open (keep-alive) either way.
func ask(t *testing.T, c net.Conn) bool {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "neither answered nor closed in 10 s")
		return false
	}
	resp.Body.Close()
	return true
}

// keepAlive opens n connections from src, each asking once, and waits
// until the listener counts want of its connections idle.
func keepAlive(t *testing.T, l *connlimit.Listener, src string, n, want int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for i := range n {
		c := dialFrom(t, src, l.Addr().String())
		require.True(t, ask(t, c), "keep-alive connection %d from %s", i+1, src)
		cs = append(cs, c)
	}
	require.Eventually(t, func() bool { return l.Idle() == want }, 10*time.Second, 5*time.Millisecond, "idle connections")
	return cs
}

// closedByServer reports how many of cs the server has closed: a read sees
// the end of the stream at once (a live keep-alive connection times out).
func closedByServer(t *testing.T, cs []net.Conn) int {
	t.Helper()
	n := 0
	for _, c := range cs {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
		var b [1]byte
		if _, err := c.Read(b[:]); errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			n++
		}
	}
	return n
}

// TestIdleConnectionReclaimedForANewClient: a listener full of one client's
// idle keep-alive connections closes one of them for a new client, instead
// of closing the new client's connection.
func TestIdleConnectionReclaimedForANewClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, connlimit.Options{Max: 4})
	httpServer(t, l, ok)
	held := keepAlive(t, l, "127.0.0.2", 4, 4)

	assert.True(t, ask(t, dialFrom(t, "127.0.0.3", l.Addr().String())), "a new client while the listener is full of idle connections")
	assert.Equal(t, uint64(1), l.Reclaimed())
	assert.Zero(t, l.Refused())
	require.Eventually(t, func() bool { return closedByServer(t, held) == 1 }, 10*time.Second, 10*time.Millisecond, "one idle connection closed")
	assert.Equal(t, 4, l.Open())
}

// TestBusyConnectionsAreNotReclaimed: connections in the middle of a
// request are never closed for a newcomer, which is refused instead.
func TestBusyConnectionsAreNotReclaimed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, connlimit.Options{Max: 2})
	entered, release := make(chan struct{}, 2), make(chan struct{})
	httpServer(t, l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	var busy []net.Conn
	for range 2 {
		c := dialFrom(t, "127.0.0.2", l.Addr().String())
		_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: t\r\n\r\n")
		require.NoError(t, err)
		busy = append(busy, c)
	}
	<-entered
	<-entered
	assert.False(t, ask(t, dialFrom(t, "127.0.0.3", l.Addr().String())), "a new client while both connections are busy")
	assert.Equal(t, uint64(1), l.Refused())
	assert.Zero(t, l.Reclaimed())
	close(release)
	for _, c := range busy {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "the busy connections are answered")
		resp.Body.Close()
	}
}

// TestNobodyGivesWayToAnEqual: when the listener is full, a newcomer's
// connection takes an idle slot only from a client holding more than the
// newcomer does, the most loaded first; so a client cannot push others out
// to grow past them.
func TestNobodyGivesWayToAnEqual(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, connlimit.Options{Max: 4})
	httpServer(t, l, ok)
	a := keepAlive(t, l, "127.0.0.2", 3, 3)
	b := keepAlive(t, l, "127.0.0.3", 1, 4)

	// B (1) may take from A (3): both hold 2 then.
	b = append(b, keepAlive(t, l, "127.0.0.3", 1, 4)...)
	require.Eventually(t, func() bool { return closedByServer(t, a) == 1 }, 10*time.Second, 10*time.Millisecond, "one of A's connections closed for B")
	// B (2) may not take from A (2), nor from itself below its share.
	assert.False(t, ask(t, dialFrom(t, "127.0.0.3", l.Addr().String())), "B's third connection while A holds as many")
	assert.Zero(t, closedByServer(t, b), "B's own connections")
	// A newcomer C (0) takes from A or B (2 each).
	assert.True(t, ask(t, dialFrom(t, "127.0.0.4", l.Addr().String())), "a new client C")
	assert.Equal(t, uint64(2), l.Reclaimed())
	assert.Equal(t, uint64(1), l.Refused())
}

// TestAClientAtItsShareSwapsItsOwnIdleConnection: a client at its
// per-client bound gets a new connection by giving up one of its idle ones,
// never one of another client's.
func TestAClientAtItsShareSwapsItsOwnIdleConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, connlimit.Options{Max: 10, PerClient: 2})
	httpServer(t, l, ok)
	other := keepAlive(t, l, "127.0.0.3", 1, 1)
	own := keepAlive(t, l, "127.0.0.2", 2, 3)

	assert.True(t, ask(t, dialFrom(t, "127.0.0.2", l.Addr().String())), "a third connection from a client at its share of 2")
	require.Eventually(t, func() bool { return closedByServer(t, own) == 1 }, 10*time.Second, 10*time.Millisecond, "one of its own idle connections closed")
	assert.Zero(t, closedByServer(t, other), "the other client's connection")
	assert.Equal(t, 3, l.Open())
}

// TestBoundsHoldUnderConcurrentDials: 64 goroutines dial 10 connections
// each from four addresses at once, the server giving back every third one
// it gets as it goes; the bounds hold throughout and the counts are exact.
func TestBoundsHoldUnderConcurrentDials(t *testing.T) {
	const maxConns, perClient = 24, 8
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, connlimit.Options{Max: maxConns, PerClient: perClient})
	var mu sync.Mutex
	var held []net.Conn
	var accepted atomic.Uint64
	byAddr := map[string]int{}
	var over []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			mu.Lock()
			if accepted.Add(1)%3 == 0 {
				c.Close()
			} else {
				held = append(held, c)
				byAddr[host]++
				if len(held) > maxConns || byAddr[host] > perClient {
					over = append(over, fmt.Sprintf("%d held, %d from %s", len(held), byAddr[host], host))
				}
			}
			mu.Unlock()
		}
	}()
	var dialled atomic.Uint64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+g%4))}, Timeout: 10 * time.Second}
			for range 10 {
				c, err := d.Dial("tcp", ln.Addr().String())
				require.NoError(t, err)
				dialled.Add(1)
				t.Cleanup(func() { c.Close() })
			}
		})
	}
	wg.Wait()
	require.Equal(t, uint64(640), dialled.Load())
	require.Eventually(t, func() bool { return accepted.Load()+l.Refused() == 640 }, 10*time.Second, 5*time.Millisecond,
		"every connection admitted or refused")
	require.NoError(t, l.Close())
	<-done
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, over, "bounds exceeded")
	assert.Equal(t, len(held), l.Open(), "open connections counted exactly")
	assert.Equal(t, maxConns, len(held), "the listener filled up")
	for _, c := range held {
		c.Close()
	}
	assert.Zero(t, l.Open())
}

// betweenCalls returns a listener bounded to slots connections, with
// IdleBetweenCalls, its address, and the connections it accepts.
func betweenCalls(t *testing.T, slots int) (*connlimit.Listener, string, <-chan net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, connlimit.Options{Max: slots, IdleBetweenCalls: true})
	return l, ln.Addr().String(), acceptInto(t, l)
}

// TestConnectionsWithoutCallsAreReclaimed: with IdleBetweenCalls a
// connection is reclaimable from its arrival on, but while a call is in
// flight on it: one with no call, from a client holding two, gives way to
// another client's; one with a call never does, until its last call ends.
func TestConnectionsWithoutCallsAreReclaimed(t *testing.T) {
	l, addr, accepted := betweenCalls(t, 2)
	dialFrom(t, "127.0.0.2", addr)
	calling := <-accepted
	endFirst, endSecond := l.BeginCall(calling.LocalAddr(), calling.RemoteAddr()), l.BeginCall(calling.LocalAddr(), calling.RemoteAddr())
	endFirst()
	dialFrom(t, "127.0.0.2", addr)
	silent := <-accepted
	assert.Equal(t, 1, l.Idle(), "the one with no call is idle; the other still has one in flight")

	dialFrom(t, "127.0.0.3", addr)
	newcomer := <-accepted
	assert.Equal(t, uint64(1), l.Reclaimed(), "the connection with no call gave way")
	_, err := silent.Read(make([]byte, 1))
	assert.ErrorIs(t, err, net.ErrClosed, "the connection with no call is closed")
	assert.Nil(t, l.BeginCall(silent.LocalAddr(), silent.RemoteAddr()), "a reclaimed connection's ends name none")
	endNewcomers := l.BeginCall(newcomer.LocalAddr(), newcomer.RemoteAddr())
	assert.Zero(t, l.Idle())

	c := dialFrom(t, "127.0.0.4", addr)
	assert.False(t, admitted(t, c), "nothing left to reclaim: connections with a call in flight stay")
	assert.Equal(t, uint64(1), l.Refused())
	assert.Equal(t, 2, l.Open())

	endSecond()
	assert.Equal(t, 1, l.Idle(), "its last call ended, the first connection is idle again")
	dialFrom(t, "127.0.0.5", addr)
	<-accepted
	assert.Equal(t, uint64(2), l.Reclaimed(), "and gives way in its turn")
	_, err = calling.Read(make([]byte, 1))
	assert.ErrorIs(t, err, net.ErrClosed)
	endNewcomers()
	assert.Equal(t, 2, l.Open())
	assert.Equal(t, 2, l.Idle())
}

// TestACallInFlightIsNeverReclaimed: while one call stays in flight on the
// only slot's connection, eight goroutines begin and end 500 calls each on
// it and twenty newcomers arrive: every newcomer is refused and nothing is
// reclaimed; once the held call ends, the next newcomer reclaims it.
func TestACallInFlightIsNeverReclaimed(t *testing.T) {
	l, addr, accepted := betweenCalls(t, 1)
	dialFrom(t, "127.0.0.2", addr)
	c := <-accepted
	endHeld := l.BeginCall(c.LocalAddr(), c.RemoteAddr())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				l.BeginCall(c.LocalAddr(), c.RemoteAddr())()
			}
		})
	}
	for i := range 20 {
		assert.False(t, admitted(t, dialFrom(t, "127.0.0.3", addr)), "newcomer %d", i)
	}
	wg.Wait()
	assert.Equal(t, uint64(20), l.Refused())
	assert.Zero(t, l.Reclaimed())
	assert.Zero(t, l.Idle())

	endHeld()
	assert.Equal(t, 1, l.Idle())
	dialFrom(t, "127.0.0.3", addr)
	<-accepted
	assert.Equal(t, uint64(1), l.Reclaimed())
}
