package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

var (
	apiPolicy    = limiter.Policy{Name: "api", Algorithm: limiter.TokenBucket, Limit: 3, Window: 30 * time.Second}
	shadowPolicy = limiter.Policy{Name: "canary", Algorithm: limiter.SlidingWindow, Limit: 1, Window: time.Minute, Shadow: true}
)

func newV1Server(t *testing.T, store limiter.Store) *server {
	return newServer(t, store, func(o *options) { o.Policies = append(o.Policies, apiPolicy, shadowPolicy) })
}

func (s *server) v1(body string) *httptest.ResponseRecorder {
	s.t.Helper()
	return s.do(req{method: http.MethodPost, target: "/v1/check", body: body})
}

func TestV1Check(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newV1Server(t, sk.open(t))

			w := s.v1(`{"policy":"api","key":"k1"}`)
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			assert.Equal(t, map[string]any{
				"allowed": true, "limit": 3.0, "remaining": 2.0, "count": 1.0,
				"reset_after": 10.0, "retry_after": 0.0, "policy": "api", "key": "k1",
			}, decode(t, w), "GCRA: one token every 10 s")
			assert.Equal(t, `"api";q=3;w=30`, w.Header().Get("RateLimit-Policy"))
			assert.Equal(t, `"api";r=2;t=10`, w.Header().Get("RateLimit"))

			w = s.v1(`{"policy":"api","key":"k1","cost":2}`)
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			assert.Equal(t, 0.0, decode(t, w)["remaining"])

			w = s.v1(`{"policy":"api","key":"k1"}`)
			p := assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
			assert.Equal(t, []any{"api"}, p["violated-policies"])
			assert.Equal(t, 10.0, p["retry_after"])
			assert.Equal(t, "10", w.Header().Get("Retry-After"))
			assert.Equal(t, `"api";r=0;t=10`, w.Header().Get("RateLimit"), "on a refusal t is Retry-After's wait, not the 30 s until the bucket is full")
			assert.Equal(t, "10", w.Header().Get("X-RateLimit-Reset"))

			s.clock.Advance(10 * time.Second)
			assert.Equal(t, http.StatusOK, s.v1(`{"policy":"api","key":"k1"}`).Code, "one token back after 10 s")
			assert.Equal(t, http.StatusOK, s.v1(`{"policy":"api","key":"k2","cost":3}`).Code, "a full bucket admits the limit at once")
		})
	}
}

func TestV1CheckShadowPolicyNeverRefuses(t *testing.T) {
	s := newV1Server(t, openMemory(t))
	w := s.v1(`{"policy":"canary","key":"k"}`)
	require.Equal(t, http.StatusOK, w.Code)
	assert.NotContains(t, decode(t, w), "shadow_denied")
	assert.Empty(t, w.Header().Get("RateLimit-Policy"), "a shadow policy limits nothing, so announces nothing")

	w = s.v1(`{"policy":"canary","key":"k"}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	b := decode(t, w)
	assert.Equal(t, true, b["allowed"])
	assert.Equal(t, true, b["shadow_denied"])
	assert.Contains(t, s.metrics(), `tollgate_decisions_total{policy="canary",result="shadow_limited"} 1`+"\n")
}

func TestV1CheckValidation(t *testing.T) {
	tests := []struct {
		name string
		body string
		want int
	}{
		{"no body", "", 400},
		{"unparsable", `{"policy":`, 400},
		{"trailing garbage", `{"policy":"api","key":"k"}x`, 400},
		{"not an object", `"api"`, 400},
		{"too large", `{"policy":"api","key":"k","pad":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`, 413},
		{"policy missing", `{"key":"k"}`, 422},
		{"policy empty", `{"policy":"","key":"k"}`, 422},
		{"policy not a string", `{"policy":1,"key":"k"}`, 422},
		{"key missing", `{"policy":"api"}`, 422},
		{"key empty", `{"policy":"api","key":""}`, 422},
		{"key not a string", `{"policy":"api","key":["k"]}`, 422},
		{"key too long", `{"policy":"api","key":"` + strings.Repeat("k", limiter.MaxKeyLen+1) + `"}`, 422},
		{"key invalid UTF-8", "{\"policy\":\"api\",\"key\":\"\xc3\"}", 422},
		{"cost zero", `{"policy":"api","key":"k","cost":0}`, 422},
		{"cost negative", `{"policy":"api","key":"k","cost":-1}`, 422},
		{"cost fractional", `{"policy":"api","key":"k","cost":1.5}`, 422},
		{"cost a string", `{"policy":"api","key":"k","cost":"1"}`, 422},
		{"cost over int64", `{"policy":"api","key":"k","cost":99999999999999999999}`, 422},
		{"cost over the limit", `{"policy":"api","key":"k","cost":4}`, 422},
		{"cost at the limit", `{"policy":"api","key":"k","cost":3}`, 200},
		{"cost null means 1", `{"policy":"api","key":"k","cost":null}`, 200},
		{"unknown policy", `{"policy":"nope","key":"k"}`, 404},
		{"unknown policy, bad key", `{"policy":"nope","key":""}`, 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newV1Server(t, openMemory(t))
			w := s.v1(tt.body)
			require.Equal(t, tt.want, w.Code, w.Body.String())
			if tt.want != http.StatusOK {
				assert.Equal(t, httplimit.ProblemContentType, w.Header().Get("Content-Type"))
			}
		})
	}
}
