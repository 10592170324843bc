package connlimit_test

import (
	"errors"
	"io"
	"net"
	"sync"
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
	l := connlimit.Wrap(ln, 3, 2)
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

func TestClosingGivesThePlaceBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := connlimit.Wrap(ln, 1, 0)
	addr := ln.Addr().String()
	accepted := make(chan net.Conn, 1)
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
