package limiter

import (
	"context"
	"time"
)

// Store keeps counters and decides atomically. Implementations must be safe
// for concurrent use; every method is atomic with respect to the others for
// the keys it touches, also across processes sharing the store.
type Store interface {
	// Allow counts one attempt of r.Cost units on r.Key under p and decides.
	Allow(ctx context.Context, p Policy, r Request) (Decision, error)
	// Peek returns the state of k under p at now without counting anything.
	Peek(ctx context.Context, p Policy, k Key, now time.Time) (Decision, error)
	// Reset forgets k under p and returns the units the forgotten state had
	// counted at its last update (not the records it was stored in):
	//   - fixed_window, sliding_window: the counts of every window still
	//     stored, not only the current one (Reset has no clock); a store keeps
	//     a window until it is pruned or expires, so two stores may differ
	//     after the windows roll over;
	//   - sliding_log: the sum of the costs of the stored events;
	//   - token_bucket: the units in flight right after its last admitted
	//     attempt (the limit minus the tokens left then), without refill.
	Reset(ctx context.Context, p Policy, k Key) (int64, error)
	// ResetSubject forgets every key of subject under p, whatever its scope,
	// and returns their units, as Reset.
	ResetSubject(ctx context.Context, p Policy, subject string) (int64, error)
	// Prune removes state that can no longer affect a decision at now: window
	// rows older than two windows, log events older than one window. It
	// returns how many records it removed. Stores that expire state by
	// themselves return 0.
	Prune(ctx context.Context, now time.Time, policies []Policy) (int64, error)
	// Ping reports whether the store can decide right now.
	Ping(ctx context.Context) error
	// Close releases the store; later calls return ErrClosed.
	Close() error
}

// Clock tells the time. Implementations return UTC.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock, in UTC.
type SystemClock struct{}

// Now returns the current UTC time.
func (SystemClock) Now() time.Time { return time.Now().UTC() }
