package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
)

// The field names assigned without Header.Set are the canonical ones, so that
// Header.Get finds them and the wire shows what Set would have written.
func TestLimitFieldsAreCanonical(t *testing.T) {
	for _, f := range []string{fieldPolicy, fieldRateLimit, fieldLimit, fieldRemaining, fieldReset} {
		assert.Equal(t, http.CanonicalHeaderKey(f), f)
	}
}

// Each field holds its own single value, though they share one array:
// appending to one never shows in another.
func TestLimitFieldsAreIndependent(t *testing.T) {
	hd := http.Header{}
	d := limiter.Decision{Limit: 10, Remaining: 3, ResetAfter: 1500_000_000}
	setLimitFields(hd, decide.Header{
		Policy: `"p";q=10;w=60`, RateLimit: decide.RateLimitHeader("p", d),
		Limit: d.Limit, Remaining: d.Remaining, Reset: limiter.RetryAfterSeconds(d.ResetAfter),
	})
	hd.Add("RateLimit-Policy", "extra")
	assert.Equal(t, []string{`"p";q=10;w=60`, "extra"}, hd.Values("RateLimit-Policy"))
	assert.Equal(t, []string{`"p";r=3;t=2`}, hd.Values("RateLimit"))
	assert.Equal(t, "10", hd.Get("X-RateLimit-Limit"))
	assert.Equal(t, "3", hd.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "2", hd.Get("X-RateLimit-Reset"))

	only := http.Header{}
	setLimitFields(only, decide.Header{Policy: `"p";q=10;w=60`})
	assert.Equal(t, http.Header{"Ratelimit-Policy": {`"p";q=10;w=60`}}, only)
}

func TestCodeClass(t *testing.T) {
	for status, want := range map[int]string{100: "1xx", 200: "2xx", 204: "2xx", 301: "3xx", 429: "4xx", 503: "5xx", 600: "6xx", 999: "9xx"} {
		assert.Equal(t, want, codeClass(status), "status %d", status)
	}
}
