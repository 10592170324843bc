package httplimit_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

// Durations print as exact milliseconds: 20.577, never 20.576999999999998.
// Every millisecond of the first two minutes is checked.
func TestSecondsPrintExactMilliseconds(t *testing.T) {
	bad := 0
	for ms := int64(0); ms <= 120_000; ms++ {
		b, err := json.Marshal(httplimit.Seconds(time.Duration(ms) * time.Millisecond))
		require.NoError(t, err)
		want := strings.TrimRight(strings.TrimRight(fmt.Sprintf("%d.%03d", ms/1000, ms%1000), "0"), ".")
		if string(b) != want && bad < 3 {
			assert.Equal(t, want, string(b), "%d ms", ms)
			bad++
		}
	}
	assert.Equal(t, 0.0, httplimit.Seconds(-time.Second), "never negative")
	assert.Equal(t, 1.001, httplimit.Seconds(1000500*time.Microsecond), "rounded to the millisecond")
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		-time.Hour:                  0,
		0:                           0,
		time.Nanosecond:             1,
		time.Second - 1:             1,
		time.Second:                 1,
		time.Second + 1:             2,
		59*time.Second + 500e6:      60,
		time.Hour:                   3600,
		limiter.MaxWindow:           int64(limiter.MaxWindow / time.Second),
		2*limiter.MaxWindow + 1e9/2: 2*int64(limiter.MaxWindow/time.Second) + 1,
	} {
		assert.Equal(t, want, httplimit.RetryAfterSeconds(d), "%s", d)
	}
}

func TestSeconds(t *testing.T) {
	assert.Equal(t, 1.5, httplimit.Seconds(1500*time.Millisecond))
	assert.Equal(t, 0.0, httplimit.Seconds(-time.Second))
	assert.Equal(t, 0.0, httplimit.Seconds(0))
	assert.Equal(t, 6.808, httplimit.Seconds(6808112623*time.Nanosecond))
	assert.Equal(t, 6.809, httplimit.Seconds(6808600000*time.Nanosecond))
}
