package redisstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestConformance runs the shared suite in client-time mode (the suite
// scripts time through Request.Now), each store on its own key prefix of one
// private redis-server. The generous timeout keeps a loaded machine from
// turning the suite's 500-goroutine bursts into timeouts; the timeout itself
// is tested in outage_test.go.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	n := 0
	limitertest.Run(t, func(tb testing.TB) limiter.Store {
		n++
		s, err := redisstore.Open(srv.URL(), redisstore.WithClientTime(),
			redisstore.WithPrefix(srv.Prefix()+"-"+strconv.Itoa(n)), redisstore.WithTimeout(5*time.Second))
		require.NoError(tb, err)
		return s
	})
}
