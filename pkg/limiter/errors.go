package limiter

import "errors"

// Errors. Stores wrap them with context; test with errors.Is.
var (
	ErrInvalidPolicy    = errors.New("invalid policy")
	ErrUnknownAlgorithm = errors.New("unknown algorithm")
	ErrInvalidKey       = errors.New("invalid key")
	ErrInvalidCost      = errors.New("invalid cost")
	ErrUnsupported      = errors.New("algorithm not supported by this store")
	ErrClosed           = errors.New("store closed")
	ErrUnavailable      = errors.New("store unavailable")
	// ErrOverloaded: the call never reached the store, its caller's time
	// ran out while it waited for its turn. The instance is saturated; the
	// store is not to blame, and an answer may come from another instance.
	ErrOverloaded = errors.New("instance overloaded")
)
