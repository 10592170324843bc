package fallback

import (
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// The fallback is the store the service decides with on Redis: while Redis
// answers it must be indistinguishable from the store it wraps, so it runs
// the conformance suite every store runs.
func TestFallbackConformance(t *testing.T) {
	srv := redistest.Start(t)
	n := 0
	limitertest.Run(t, func(tb testing.TB) limiter.Store {
		n++
		primary, err := redisstore.Open(srv.URL(), redisstore.WithClientTime(),
			redisstore.WithPrefix(srv.Prefix()+"-fallback-"+strconv.Itoa(n)), redisstore.WithTimeout(5*time.Second))
		require.NoError(tb, err)
		f, err := New(primary, 10_000, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		require.NoError(tb, err)
		return f
	})
}
