package limitertest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// The suite skips only a declared gap that the store refuses; every other
// mismatch between what a store declares and what it does fails.
func TestSupportedPolicesTheMatrix(t *testing.T) {
	refused := fmt.Errorf("x: %w", limiter.ErrUnsupported)
	gap := limiter.Capabilities{Unsupported: []limiter.Algorithm{limiter.TokenBucket}}
	other := errors.New("x: disk full")
	tests := []struct {
		name     string
		caps     limiter.Capabilities
		err      error
		skip     bool
		failWith string
	}{
		{"runs what it declares", limiter.Capabilities{}, nil, false, ""},
		{"declared gap refused", gap, refused, true, ""},
		{"undeclared gap", limiter.Capabilities{}, refused, false, "without declaring the gap"},
		{"declared gap but runs it", gap, nil, false, "declares token_bucket unsupported"},
		{"declared gap, other error", gap, other, false, "declares token_bucket unsupported"},
		{"other error", limiter.Capabilities{}, other, false, "disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skip, err := supported(tt.caps, limiter.TokenBucket, tt.err)
			assert.Equal(t, tt.skip, skip)
			if tt.failWith == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.failWith)
		})
	}
	assert.True(t, gap.Supports(limiter.FixedWindow))
	assert.False(t, gap.Supports(limiter.TokenBucket))
}
