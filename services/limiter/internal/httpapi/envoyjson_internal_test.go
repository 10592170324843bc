package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/envoy"
)

// POST /json maps the envoy package's errors to problems in one place: an
// invalid request is 400 with the error's message, the rest is the store's
// unavailability with its cause kept (shed, cancelled, failed).
func TestEnvoyProblem(t *testing.T) {
	var req rlsv3.RateLimitRequest
	_, invalidRequest := envoy.Decide(context.Background(), nil, nil, &req)
	for _, bad := range []error{invalidRequest, envoy.DecodeJSON([]byte(`{"domain":`), &req)} {
		require.ErrorIs(t, bad, envoy.ErrInvalid)
		p := envoyProblem(bad)
		assert.Equal(t, http.StatusBadRequest, p.status)
		assert.Equal(t, bad.Error(), p.detail)
		assert.NoError(t, p.cause, "nothing to log")
	}

	p := envoyProblem(fmt.Errorf("store: %w", limiter.ErrOverloaded))
	assert.Equal(t, []any{http.StatusServiceUnavailable, "overloaded"}, []any{p.status, p.slug})
	p = envoyProblem(fmt.Errorf("store: %w", context.Canceled))
	assert.Equal(t, []any{http.StatusServiceUnavailable, "the request was cancelled"}, []any{p.status, p.detail})
	assert.NoError(t, p.cause, "a client gone is not logged")
	failed := errors.New("disk I/O error")
	p = envoyProblem(failed)
	assert.Equal(t, http.StatusServiceUnavailable, p.status)
	assert.Equal(t, failed, p.cause, "logged")
}
