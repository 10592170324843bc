package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

// TestHeaderFormatsMatchTheDraft checks the field values against the examples
// of draft-ietf-httpapi-ratelimit-headers-10.
func TestHeaderFormatsMatchTheDraft(t *testing.T) {
	burst := limiter.Policy{Name: "burst", Algorithm: limiter.FixedWindow, Limit: 100, Window: time.Minute}
	daily := limiter.Policy{Name: "daily", Algorithm: limiter.FixedWindow, Limit: 1000, Window: 24 * time.Hour}
	shadow := limiter.Policy{Name: "trial", Algorithm: limiter.FixedWindow, Limit: 5, Window: time.Second, Shadow: true}

	assert.Equal(t, `"burst";q=100;w=60, "daily";q=1000;w=86400`, httplimit.PolicyHeader([]limiter.Policy{burst, shadow, daily}))
	assert.Equal(t, `"default";r=50;t=30`, httplimit.RateLimitHeader(limiter.Policy{Name: "default", Window: time.Minute}, limiter.Decision{Remaining: 50, ResetAfter: 30 * time.Second}))
	assert.Equal(t, `"default";r=0;t=1`, httplimit.RateLimitHeader(limiter.Policy{Name: "default", Window: time.Minute}, limiter.Decision{ResetAfter: time.Nanosecond}), "t is rounded up")
	assert.Empty(t, httplimit.PolicyHeader([]limiter.Policy{shadow}), "shadow policies are not announced")

	odd := limiter.Policy{Name: `a"b\c`, Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Second}
	assert.Equal(t, `"a\"b\\c";q=1;w=1`, httplimit.PolicyHeader([]limiter.Policy{odd}))
	assert.Equal(t, `"a\"b\\c";r=1;t=0`, httplimit.RateLimitHeader(odd, limiter.Decision{Remaining: 1}))
}

// The field names assigned without Header.Set are the canonical ones, so that
// Header.Get finds them and the wire shows what Set would have written.
func TestFieldsAreCanonical(t *testing.T) {
	for _, f := range []string{httplimit.FieldPolicy, httplimit.FieldRateLimit, httplimit.FieldLimit, httplimit.FieldRemaining, httplimit.FieldReset} {
		assert.Equal(t, http.CanonicalHeaderKey(f), f)
	}
}

// Each field holds its own single value, though they share one array:
// appending to one never shows in another.
func TestFieldsAreIndependent(t *testing.T) {
	hd := http.Header{}
	d := limiter.Decision{Limit: 10, Remaining: 3, ResetAfter: 1500 * time.Millisecond}
	httplimit.NewFields(`"p";q=10;w=60`, limiter.Policy{Name: "p", Window: time.Minute}, d).Set(hd)
	hd.Add("RateLimit-Policy", "extra")
	assert.Equal(t, []string{`"p";q=10;w=60`, "extra"}, hd.Values("RateLimit-Policy"))
	assert.Equal(t, []string{`"p";r=3;t=2`}, hd.Values("RateLimit"))
	assert.Equal(t, "10", hd.Get("X-RateLimit-Limit"))
	assert.Equal(t, "3", hd.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "2", hd.Get("X-RateLimit-Reset"))

	only := http.Header{}
	httplimit.Fields{Policy: `"p";q=10;w=60`}.Set(only)
	assert.Equal(t, http.Header{"Ratelimit-Policy": {`"p";q=10;w=60`}}, only)

	none := http.Header{}
	httplimit.Fields{RateLimit: `"p";r=3;t=2`, Limit: 10}.Set(none)
	assert.Empty(t, none, "no field when every policy is a shadow")
}

func TestNewProblem(t *testing.T) {
	assert.Equal(t, httplimit.Problem{Type: "urn:tollgate:problem:validation-failed", Title: "Unprocessable Entity", Status: 422, Detail: "d"},
		httplimit.NewProblem(422, "d"))
	assert.Equal(t, "urn:tollgate:problem:unauthorized", httplimit.NewProblem(401, "d").Type)
	assert.Equal(t, httplimit.Problem{Type: "urn:tollgate:problem:internal", Title: "Internal Server Error", Status: 500, Detail: "d"},
		httplimit.NewProblem(418, "d"), "a status Tollgate never answers is a 500")
}

// Set writes the numbers the Fields hold, also when they were changed after
// NewFields or set by hand.
func TestFieldsSetWritesTheirNumbers(t *testing.T) {
	d := limiter.Decision{Limit: 2_000_000_000, Remaining: 1_999_999_990, ResetAfter: 59_001 * time.Millisecond}
	odd := limiter.Policy{Name: `a"b\c`, Window: time.Minute}
	f := httplimit.NewFields(`"a\"b";q=2000000000;w=60`, odd, d)
	assert.Equal(t, `"a\"b\\c";r=1999999990;t=60`, f.RateLimit)
	assert.Equal(t, f.RateLimit, httplimit.RateLimitHeader(odd, d))
	for _, tt := range []struct {
		name   string
		change func(*httplimit.Fields)
		want   [3]string
	}{
		{"as made", func(*httplimit.Fields) {}, [3]string{"2000000000", "1999999990", "60"}},
		{"remaining changed", func(f *httplimit.Fields) { f.Remaining = 7 }, [3]string{"2000000000", "7", "60"}},
		{"reset changed", func(f *httplimit.Fields) { f.Reset = -1 }, [3]string{"2000000000", "1999999990", "-1"}},
		{"made by hand", func(f *httplimit.Fields) {
			*f = httplimit.Fields{Policy: f.Policy, RateLimit: f.RateLimit, Limit: 5, Remaining: 4, Reset: 3}
		}, [3]string{"5", "4", "3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := f
			tt.change(&g)
			hd := http.Header{}
			g.Set(hd)
			assert.Equal(t, tt.want, [3]string{hd.Get("X-RateLimit-Limit"), hd.Get("X-RateLimit-Remaining"), hd.Get("X-RateLimit-Reset")})
			assert.Equal(t, f.RateLimit, hd.Get("RateLimit"))
		})
	}
}

// On a refusal the reset the fields show is Retry-After's wait, whatever the
// algorithm: a sliding_window key whose current window holds 3 of 4 and the
// previous 1, 32 s into a 60 s window, empties in 88 s but takes one more in
// 28 s. The RateLimit t never exceeds the policy's window.
func TestFieldsResetIsRetryAfterOnARefusal(t *testing.T) {
	p := limiter.Policy{Name: "p", Algorithm: limiter.SlidingWindow, Limit: 4, Window: time.Minute}
	at := limiter.WindowStart(t0, time.Minute).Add(32 * time.Second)
	d := limiter.SlidingWindowDecide(p, 1, 3, 1, at)
	require.False(t, d.Allowed)
	require.Equal(t, 88*time.Second, d.ResetAfter)
	hd := http.Header{}
	httplimit.NewFields(httplimit.PolicyHeader([]limiter.Policy{p}), p, d).Set(hd)
	httplimit.SetRetryAfter(hd, d.RetryAfter)
	assert.Equal(t, "28", hd.Get("Retry-After"))
	assert.Equal(t, hd.Get("Retry-After"), hd.Get("X-RateLimit-Reset"), "X-RateLimit-Reset and Retry-After agree on a refusal")
	assert.Equal(t, `"p";r=0;t=28`, hd.Get("RateLimit"))

	d = limiter.SlidingWindowDecide(p, 0, 1, 0, at) // allowed: the key empties in 88 s
	hd = http.Header{}
	httplimit.NewFields(httplimit.PolicyHeader([]limiter.Policy{p}), p, d).Set(hd)
	assert.Equal(t, `"p";r=3;t=60`, hd.Get("RateLimit"), "t never exceeds w")
	assert.Equal(t, "88", hd.Get("X-RateLimit-Reset"), "the legacy field has no window to respect")
}
