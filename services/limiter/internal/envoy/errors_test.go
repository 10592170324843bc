package envoy

import (
	"context"
	"errors"
	"fmt"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
)

// Decide's errors are plain errors its callers test with errors.Is: an
// invalid request is ErrInvalid, a decision the store could not make keeps
// its cause (a closed store, a caller gone) and is not ErrInvalid.
func TestDecideErrorsArePlain(t *testing.T) {
	decideOn := func(t *testing.T, store limiter.Store) func(ctx context.Context, req *rlsv3.RateLimitRequest) error {
		snap := newService(t, fixtures(t), store, limitertest.NewClock(t0), prometheus.NewRegistry()).current()
		return func(ctx context.Context, req *rlsv3.RateLimitRequest) error {
			_, err := Decide(ctx, snap.Decider, snap.Envoy, req)
			return err
		}
	}
	valid := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("customer", "vip")}}

	decide := decideOn(t, stores["memory"](t))
	err := decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge"})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "envoy: invalid request: the rate limit descriptor list must not be empty", err.Error())
	override := entries("customer", "vip")
	override.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	require.ErrorIs(t, decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{override}}), ErrInvalid)

	store := stores["sqlite"](t) // SQLite's calls honour the context
	decide = decideOn(t, store)
	require.NoError(t, decide(context.Background(), valid))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	err = decide(gone, valid)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrInvalid)
	require.NoError(t, store.Close())
	err = decide(context.Background(), valid)
	require.ErrorIs(t, err, limiter.ErrClosed)
	assert.NotErrorIs(t, err, ErrInvalid)
}

// The gRPC edge turns each kind of error into its status.
func TestGRPCStatusOfEachError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want codes.Code
	}{
		{invalid("no domain"), codes.InvalidArgument},
		{fmt.Errorf("store: %w", limiter.ErrOverloaded), codes.ResourceExhausted},
		{fmt.Errorf("store: %w: %w", limiter.ErrOverloaded, context.DeadlineExceeded), codes.ResourceExhausted},
		{fmt.Errorf("store: %w", context.Canceled), codes.Canceled},
		// a shed call whose caller also went away: the caller is gone, as POST /json says
		{fmt.Errorf("store: %w: %w", limiter.ErrOverloaded, context.Canceled), codes.Canceled},
		{fmt.Errorf("store: %w", limiter.ErrUnavailable), codes.Unavailable},
		{context.DeadlineExceeded, codes.Unavailable},
		{errors.New("disk I/O error"), codes.Unavailable},
	} {
		st, ok := status.FromError(grpcStatus(tt.err))
		require.True(t, ok, "%v", tt.err)
		assert.Equal(t, tt.want, st.Code(), "%v", tt.err)
		assert.Contains(t, st.Message(), tt.err.Error(), "the cause is in the message")
	}
}
