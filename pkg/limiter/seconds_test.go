package limiter_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// Durations print as exact milliseconds: 20.577, never 20.576999999999998.
// Every millisecond of the first two minutes is checked.
func TestSecondsPrintExactMilliseconds(t *testing.T) {
	bad := 0
	for ms := int64(0); ms <= 120_000; ms++ {
		b, err := json.Marshal(limiter.Seconds(time.Duration(ms) * time.Millisecond))
		require.NoError(t, err)
		want := strings.TrimRight(strings.TrimRight(fmt.Sprintf("%d.%03d", ms/1000, ms%1000), "0"), ".")
		if string(b) != want && bad < 3 {
			assert.Equal(t, want, string(b), "%d ms", ms)
			bad++
		}
	}
	assert.Equal(t, 0.0, limiter.Seconds(-time.Second), "never negative")
	assert.Equal(t, 1.001, limiter.Seconds(1000500*time.Microsecond), "rounded to the millisecond")
}
