package nearcache_test

import (
	"testing"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/nearcache"
)

// The near cache is a store the service decides on: it runs the suite every
// store runs, with its default policies (DefaultEnabled: fixed_window is not
// cached, since its store counts refused attempts and a cached refusal would
// not be counted; peeks and the concurrency count would differ by design).
//
// One difference is by design (see the package doc): a repeated refusal
// keeps the Count and Remaining (and ResetAfter, WindowStart) of the
// refusal it repeats, and its RetryAfter runs from it, where the store
// reports the state at the repeat's time (a sliding window's count decays,
// and its retry estimate can move later as windows roll). So the suite runs
// with RepeatsRefusals: such a refusal's verdict is checked exactly, its
// RetryAfter bounded by the store's, and every admission, peek and other
// case whole.
func TestConformance(t *testing.T) {
	limitertest.Run(t, func(testing.TB) limiter.Store { return nearcache.New(memstore.New(), nil) }, limitertest.RepeatsRefusals())
}
