package limiter

import (
	"context"
	"slices"
)

// Capabilities is what a Store declares of itself, through the optional
// Describer interface. The zero value describes a store that runs every
// algorithm of Algorithms, keeps its state in the process and may make a
// call wait (for a disk, a writer, a connection).
type Capabilities struct {
	// Unsupported lists the algorithms the store refuses with an error
	// wrapping ErrUnsupported: a declared gap. The conformance suite fails a
	// store that refuses an algorithm it has not declared here, so an
	// algorithm added to Algorithms is run by every store or declared
	// missing by it, never skipped silently.
	Unsupported []Algorithm
	// Remote means the state lives outside the process, shared by every
	// instance that uses the store, and a call can fail for a while
	// (ErrUnavailable) and succeed again: callers may then answer without
	// the store (the service's on_store_error) and should start even while
	// it cannot answer.
	Remote bool
	// NeverWaits means a call never waits for I/O or for a turn behind
	// other callers, only for a lock held for one update (the memory
	// store): a deadline on it would bound nothing and cost a context and
	// a timer per call, so callers may leave it out.
	NeverWaits bool
}

// Describer is implemented by a Store that declares Capabilities.
type Describer interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns what s declares; the zero Capabilities when s does
// not implement Describer.
func CapabilitiesOf(s Store) Capabilities {
	if d, ok := s.(Describer); ok {
		return d.Capabilities()
	}
	return Capabilities{}
}

// Supports reports whether the store runs a: it is not a declared gap.
func (c Capabilities) Supports(a Algorithm) bool { return !slices.Contains(c.Unsupported, a) }

// EvictionReporter is implemented by a store whose server may drop the
// store's state on its own when its memory is full (Redis under a
// maxmemory-policy that evicts): an evicted counter starts again from a
// full budget, silently. EvictionPolicy returns the server's policy and
// whether it evicts, so that a service can warn at start.
type EvictionReporter interface {
	EvictionPolicy(ctx context.Context) (policy string, evicts bool, err error)
}
