package redisstore

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster redirections. While a slot moves between primaries (a
// reshard), its old owner answers ASK for the keys it no longer holds (the
// new owner serves them to a client that sends ASKING first), and once the
// move is done, MOVED; a node answers MOVED too to a client whose slot map
// is stale. Either reply means the node did not run the command: sending the
// script on to the node it names cannot count an attempt twice, so the store
// follows them, unlike a lost reply, which it never retries.

// maxRedirects bounds the redirections one call follows: one slot move is
// one ASK or one MOVED; a call redirected more than this meets a cluster
// whose map keeps changing, and fails (having run nowhere).
const maxRedirects = 3

// redirection returns the address that a MOVED or ASK error reply names,
// and whether it is ASK; addr is empty for any other error. An address
// without a host (a node that does not know its own) is on from's host.
func redirection(err error, from *redis.Client) (addr string, ask bool) {
	if addr, ok := redis.IsMovedError(err); ok {
		return onHostOf(addr, from), false
	}
	if addr, ok := redis.IsAskError(err); ok {
		return onHostOf(addr, from), true
	}
	return "", false
}

func onHostOf(addr string, from *redis.Client) string {
	if !strings.HasPrefix(addr, ":") {
		return addr
	}
	host, _, _ := net.SplitHostPort(from.Options().Addr)
	return net.JoinHostPort(host, addr[1:])
}

// follow sends a call whose reply, err from node from, was a redirection to
// the node it names, with call, as long as the replies redirect and at most
// maxRedirects times, and returns the last reply's error. call is told
// whether the redirection was ASK (it must then send ASKING first, on the
// same connection: runScript does). Each round trip is reported on its node
// with the outcome judge gives it.
func follow(ctx context.Context, r router, report func(*redis.Client, outcome), judge func(error) outcome,
	from *redis.Client, err error, call func(ctx context.Context, node *redis.Client, asking bool) error) error {
	for range maxRedirects {
		addr, ask := redirection(err, from)
		if addr == "" {
			return err
		}
		node, nerr := r.nodeAt(ctx, addr)
		if nerr != nil {
			return fmt.Errorf("%w (not followed: %w)", err, nerr)
		}
		err = call(ctx, node, ask)
		report(node, judge(err))
		from = node
	}
	return err
}

// runScript runs script on node: with Script.Run (EVALSHA, then EVAL if the
// node lacks the script), or, after an ASK redirection, as ASKING then EVAL
// in one pipeline, so that both go on one connection (ASKING holds for the
// next command of its connection only).
func runScript(ctx context.Context, node *redis.Client, asking bool, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if !asking {
		return script.Run(ctx, node, keys, args...)
	}
	var cmd *redis.Cmd
	// Pipelined's error is that of the first failed command; each has its own.
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "asking")
		cmd = script.Eval(ctx, p, keys, args...)
		return nil
	})
	return cmd
}
