package limiter

import (
	"fmt"
	"strings"
)

// Algorithm names a rate-limiting algorithm. The values are the names used in
// configuration files.
type Algorithm string

// The algorithms Tollgate implements.
const (
	FixedWindow      Algorithm = "fixed_window"
	SlidingLog       Algorithm = "sliding_log"
	SlidingWindow    Algorithm = "sliding_window"
	TokenBucket      Algorithm = "token_bucket"
	SlidingLogUnsafe Algorithm = "sliding_log_unsafe"
)

// Algorithms lists every algorithm in a stable order, the unsafe
// demonstration last.
var Algorithms = []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, SlidingLogUnsafe}

// algorithmNames is Algorithms as the text of an error message.
var algorithmNames = func() string {
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}()

// ParseAlgorithm returns the algorithm named s, or an error wrapping
// [ErrUnknownAlgorithm].
func ParseAlgorithm(s string) (Algorithm, error) {
	if a := Algorithm(s); a.known() {
		return a, nil
	}
	return "", fmt.Errorf("limiter: %q: %w", s, ErrUnknownAlgorithm)
}

// known reports whether a is one of Algorithms. A switch, not a loop over
// Algorithms: stores validate the policy on every decision.
func (a Algorithm) known() bool {
	switch a {
	case FixedWindow, SlidingLog, SlidingWindow, TokenBucket, SlidingLogUnsafe:
		return true
	}
	return false
}
