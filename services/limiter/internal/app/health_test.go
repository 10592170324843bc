package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/services/limiter/internal/envoy"
)

// TestGRPCHealthFollowsReadiness watches grpc.health.v1 on a real gRPC
// server of a Redis-backed app: SERVING while Redis answers, NOT_SERVING
// once it is gone (when /readyz answers 503), SERVING again when it is back
// (/readyz 200). Each change is waited for on the Watch stream, with a
// deadline, never a sleep.
func TestGRPCHealthFollowsReadiness(t *testing.T) {
	srv := redistest.Start(t)
	a := newApp(t, load(t, "--store=redis", "--redis-url="+srv.URL(), "--redis-timeout=5s",
		"--grpc-addr=127.0.0.1:0", "--envoy-config", envoyRules), limitertest.NewClock(t0))
	conn := grpcClient(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: envoy.ServiceName})
	require.NoError(t, err)
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for {
			resp, err := watch.Recv()
			require.NoError(t, err, "waiting for %s", want)
			if resp.GetStatus() == want {
				return
			}
		}
	}
	readyz := func() int {
		t.Helper()
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code
	}

	next(healthpb.HealthCheckResponse_SERVING)
	assert.Equal(t, http.StatusOK, readyz())

	srv.Stop()
	next(healthpb.HealthCheckResponse_NOT_SERVING)
	assert.Equal(t, http.StatusServiceUnavailable, readyz())
	check, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, check.GetStatus(), "the server's overall status too")

	srv.Restart()
	next(healthpb.HealthCheckResponse_SERVING)
	assert.Equal(t, http.StatusOK, readyz())
}
