package redisstore

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// replyDropper is a TCP proxy to a Redis server that, once, swallows the
// reply to the first script call (EVALSHA/EVAL) and closes that connection:
// the script ran, its answer was lost. Later connections are forwarded.
type replyDropper struct {
	l       net.Listener
	dropped atomic.Bool
	wg      sync.WaitGroup
}

func newReplyDropper(t *testing.T, upstream string) *replyDropper {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &replyDropper{l: l}
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c, upstream) })
		}
	})
	t.Cleanup(func() { _ = l.Close(); p.wg.Wait() })
	return p
}

func (p *replyDropper) serve(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	var scriptSent atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if bytes.Contains(bytes.ToUpper(buf[:n]), []byte("EVAL")) {
					scriptSent.Store(true)
				}
				if _, werr := u.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				_ = u.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := u.Read(buf)
		if n > 0 && scriptSent.Load() && p.dropped.CompareAndSwap(false, true) {
			return // the script's reply is lost with the connection
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A script whose reply is lost has already counted: the store must not run
// it again (go-redis's retries would), or one attempt counts twice. The call
// fails as unavailable instead, and Redis holds exactly one attempt.
func TestLostReplyIsNotRetried(t *testing.T) {
	srv := redistest.Start(t)
	direct := openStore(t, srv, srv.Prefix()+"lost", WithClientTime())
	p := policy("lost", limiter.FixedWindow, 10, 60e9)
	// Load the script into the server's cache through a healthy connection,
	// so that the proxied EVALSHA runs it rather than answering NOSCRIPT.
	allow(t, direct, p, limiter.Key{Subject: "warm"}, 1, base)

	proxy := newReplyDropper(t, srv.Addr())
	s, err := Open("redis://"+proxy.l.Addr().String()+"/0", WithPrefix(srv.Prefix()+"lost"), WithClientTime(), WithTimeout(testTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	k := limiter.Key{Subject: "once"}
	_, err = s.Allow(context.Background(), p, limiter.Request{Key: k, Cost: 1, Now: base})
	require.True(t, proxy.dropped.Load(), "the proxy dropped a script reply")
	require.ErrorIs(t, err, limiter.ErrUnavailable)

	d, err := direct.Peek(context.Background(), p, k, base)
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Count, "the attempt was counted once, not retried")
}
