package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/services/limiter/client"
)

func newEnvoy(t *testing.T, addr string, opts ...client.Option) *client.Envoy {
	t.Helper()
	e, err := client.NewEnvoy(addr, append([]client.Option{client.WithTimeout(callTimeout)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestShouldRateLimit: two per minute for user u1, then OVER_LIMIT; an
// unmatched descriptor is always OK; hits 0 counts one, as in Envoy.
func TestShouldRateLimit(t *testing.T) {
	svc := startService(t)
	e := newEnvoy(t, svc.grpcAddr)
	ctx := context.Background()
	u1 := client.Descriptor{{Key: "user", Value: "u1"}}
	other := client.Descriptor{{Key: "team", Value: "x"}}

	for i := range 2 {
		d, err := e.ShouldRateLimit(ctx, "shop", uint32(i), u1, other)
		require.NoError(t, err)
		require.True(t, d.Allowed, "call %d", i)
		require.Len(t, d.Statuses, 2)
		st := d.Statuses[0]
		assert.Equal(t, client.DescriptorStatus{Allowed: true, Limit: 2, Unit: "MINUTE", Remaining: int64(1 - i), ResetAfter: st.ResetAfter}, st)
		assert.Positive(t, st.ResetAfter)
		assert.LessOrEqual(t, st.ResetAfter, time.Minute)
		assert.Equal(t, client.DescriptorStatus{Allowed: true}, d.Statuses[1], "no rule matched")
	}
	d, err := e.ShouldRateLimit(ctx, "shop", 1, u1, other)
	require.NoError(t, err, "over the limit is a decision")
	assert.False(t, d.Allowed)
	assert.False(t, d.Unavailable)
	assert.False(t, d.Statuses[0].Allowed)
	assert.True(t, d.Statuses[1].Allowed)
}

// TestShouldRateLimitBadRequest: an empty domain is the caller's bug, an
// InvalidArgument status, never the failure mode.
func TestShouldRateLimitBadRequest(t *testing.T) {
	svc := startService(t)
	e := newEnvoy(t, svc.grpcAddr, client.WithFailureMode(client.FailOpen))
	d, err := e.ShouldRateLimit(context.Background(), "", 1, client.Descriptor{{Key: "user", Value: "u"}})
	require.Error(t, err)
	assert.NotErrorIs(t, err, client.ErrUnavailable)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Equal(t, client.EnvoyDecision{}, d)
}
