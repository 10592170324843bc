package limiter

import "context"

// StoreCall is what a store tells of one call it served: the fields it
// knows, the others zero. The service turns it into a trace span's
// attributes; the library itself records nothing.
type StoreCall struct {
	// Batch is how many calls, this one included, shared the call's
	// transaction (sqlitestore's writer) or round trip (redisstore's
	// pipeline); 0: not batched.
	Batch int
	// Node is the Redis node that answered last: host:port, or
	// "sentinel:<master>" behind Sentinel.
	Node string
	// Script is the Redis decision script run, named by its algorithm.
	Script string
	// Redirects counts the Redis Cluster redirections (MOVED, ASK) the call
	// followed; Resent counts the times it was sent again alone because its
	// pipelined reply said the script had not run (NOSCRIPT, READONLY).
	Redirects, Resent int
	// Breaker is the Redis circuit breaker's state when the call asked it:
	// "closed", "open" (refused without a round trip) or "half_open".
	Breaker string
}

// StoreObserver hears of the store calls made with a context that carries
// it (WithStoreObserver). ObserveStore is called on the caller's goroutine
// before the call returns, once per script or transaction the call ran
// (sliding_log_unsafe runs two on Redis), and must be quick. Stores report
// their decisions (Allow, Peek) and the writer's work (sqlitestore);
// memstore has nothing to report.
type StoreObserver interface {
	ObserveStore(StoreCall)
}

type storeObserverKey struct{}

// WithStoreObserver returns ctx carrying o: the stores report each call
// made with it to o.
func WithStoreObserver(ctx context.Context, o StoreObserver) context.Context {
	return context.WithValue(ctx, storeObserverKey{}, o)
}

// StoreObserverOf returns the observer ctx carries, nil when none. It
// allocates nothing: a store asks it on every call, and reports nothing
// when it is nil.
func StoreObserverOf(ctx context.Context) StoreObserver {
	o, _ := ctx.Value(storeObserverKey{}).(StoreObserver)
	return o
}
