package decide_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
)

// TestHeaderFormatsMatchTheDraft checks the field values against the examples
// of draft-ietf-httpapi-ratelimit-headers-10.
func TestHeaderFormatsMatchTheDraft(t *testing.T) {
	burst := limiter.Policy{Name: "burst", Algorithm: limiter.FixedWindow, Limit: 100, Window: time.Minute}
	daily := limiter.Policy{Name: "daily", Algorithm: limiter.FixedWindow, Limit: 1000, Window: 24 * time.Hour}
	shadow := limiter.Policy{Name: "trial", Algorithm: limiter.FixedWindow, Limit: 5, Window: time.Second, Shadow: true}

	assert.Equal(t, `"burst";q=100;w=60, "daily";q=1000;w=86400`, decide.PolicyHeader([]limiter.Policy{burst, shadow, daily}))
	assert.Equal(t, `"default";r=50;t=30`, decide.RateLimitHeader("default", limiter.Decision{Remaining: 50, ResetAfter: 30 * time.Second}))
	assert.Equal(t, `"default";r=0;t=1`, decide.RateLimitHeader("default", limiter.Decision{ResetAfter: time.Nanosecond}), "t is rounded up")
	assert.Empty(t, decide.PolicyHeader([]limiter.Policy{shadow}), "shadow policies are not announced")

	odd := limiter.Policy{Name: `a"b\c`, Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Second}
	assert.Equal(t, `"a\"b\\c";q=1;w=1`, decide.PolicyHeader([]limiter.Policy{odd}))
	assert.Equal(t, `"a\"b\\c";r=1;t=0`, decide.RateLimitHeader(odd.Name, limiter.Decision{Remaining: 1}))
}
