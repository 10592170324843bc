package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
	"github.com/tollgate/tollgate/services/limiter/internal/openapitest"
)

func TestMetricsAfterKnownTraffic(t *testing.T) {
	s := newServer(t, openSQLite(t), func(o *options) { o.StoreName = "sqlite" })
	for range 5 {
		s.ping("m") // 3 allowed, 2 limited
	}
	for range 2 {
		s.check("5", "/a") // 2 allowed
	}
	s.check("x", "/a")                                                 // 400 before any decision
	s.do(req{method: http.MethodGet, target: "/status?key=m"})         // a peek: no decision
	s.do(req{method: http.MethodGet, target: "/nowhere/" + "u123456"}) // unmatched

	m := s.metrics()
	for _, line := range []string{
		`tollgate_decisions_total{policy="ping",result="allowed"} 3`,
		`tollgate_decisions_total{policy="ping",result="limited"} 2`,
		`tollgate_decisions_total{policy="ping",result="shadow_limited"} 0`,
		`tollgate_decisions_total{policy="check",result="allowed"} 2`,
		`tollgate_decisions_total{policy="check",result="limited"} 0`,
		`tollgate_store_errors_total{store="sqlite"} 0`,
		`tollgate_decision_duration_seconds_count{store="sqlite"} 7`,
		`tollgate_http_requests_total{code_class="2xx",route="/ping"} 3`,
		`tollgate_http_requests_total{code_class="4xx",route="/ping"} 2`,
		`tollgate_http_requests_total{code_class="2xx",route="/rate/check"} 2`,
		`tollgate_http_requests_total{code_class="4xx",route="/rate/check"} 1`,
		`tollgate_http_requests_total{code_class="2xx",route="/status"} 1`,
		`tollgate_http_requests_total{code_class="4xx",route="unmatched"} 1`,
	} {
		assert.Contains(t, m, line+"\n")
	}
	assert.NotContains(t, m, "u123456", "raw paths never become labels")
}

func TestStoreErrorsAnswer503AndAreCounted(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t), func(o *options) {
				o.StoreName = sk.name
				o.Policies = append(o.Policies, apiPolicy)
			})
			require.Equal(t, http.StatusOK, s.do(req{method: http.MethodGet, target: "/readyz"}).Code)
			require.NoError(t, s.store.Close())

			for _, r := range []req{
				{method: http.MethodGet, target: "/ping"},
				{method: http.MethodGet, target: "/status?key=a"},
				{method: http.MethodPost, target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "1"}},
				{method: http.MethodGet, target: "/rate/status?endpoint=/a", header: map[string]string{"X-User-Id": "1"}},
				{method: http.MethodDelete, target: "/rate/reset/1", header: map[string]string{"X-Admin-Key": adminKey}},
				{method: http.MethodPost, target: "/v1/check", body: `{"policy":"api","key":"a"}`},
				{method: http.MethodGet, target: "/readyz"},
			} {
				w := s.do(r)
				assertProblem(t, w, http.StatusServiceUnavailable, "unavailable")
				assert.Equal(t, "1", w.Header().Get("Retry-After"), r.target)
			}
			assert.Contains(t, s.metrics(), `tollgate_store_errors_total{store="`+sk.name+`"} 7`+"\n")
			assert.Equal(t, http.StatusOK, s.do(req{method: http.MethodGet, target: "/healthz"}).Code, "liveness does not depend on the store")
		})
	}
}

func TestHealthAndReadiness(t *testing.T) {
	draining := false
	s := newServer(t, openMemory(t), func(o *options) { o.Draining = func() bool { return draining } })
	w := s.do(req{method: http.MethodGet, target: "/healthz"})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, map[string]any{"status": "ok"}, decode(t, w))
	w = s.do(req{method: http.MethodGet, target: "/readyz"})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, map[string]any{"status": "ready"}, decode(t, w))

	// envoyproxy/ratelimit's path, probed by Envoy Gateway, answers alike.
	w = s.do(req{method: http.MethodGet, target: "/healthcheck"})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, map[string]any{"status": "ready"}, decode(t, w))

	draining = true
	assertProblem(t, s.do(req{method: http.MethodGet, target: "/readyz"}), http.StatusServiceUnavailable, "unavailable")
	assertProblem(t, s.do(req{method: http.MethodGet, target: "/healthcheck"}), http.StatusServiceUnavailable, "unavailable")
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	s := newServer(t, openMemory(t))
	for _, target := range []string{"/nope", "/ping/", "/rate/reset/", "/rate/reset/1/x", "/PING"} {
		assertProblem(t, s.do(req{method: http.MethodGet, target: target}), http.StatusNotFound, "not-found")
	}
	w := s.do(req{method: http.MethodPost, target: "/ping"})
	assertProblem(t, w, http.StatusMethodNotAllowed, "method-not-allowed")
	assert.Equal(t, "GET, HEAD", w.Header().Get("Allow"))
	w = s.do(req{method: http.MethodGet, target: "/rate/check"})
	assertProblem(t, w, http.StatusMethodNotAllowed, "method-not-allowed")
	assert.Equal(t, "POST", w.Header().Get("Allow"))
}

func TestPanicAnswersAProblemWithoutLeakingIt(t *testing.T) {
	s := newServer(t, openMemory(t))
	s.engine.GET("/boom", func(*gin.Context) { panic("secret-panic-value") })
	w := httptest.NewRecorder() // /boom is this test's, not in the OpenAPI document: checked as its shared 500
	s.engine.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/boom", nil))
	require.NoError(t, openapitest.Service(t).CheckResponse("Internal", w.Header(), w.Body.Bytes()))
	p := assertProblem(t, w, http.StatusInternalServerError, "internal")
	assert.NotContains(t, w.Body.String(), "secret-panic-value")
	id := w.Header().Get("X-Request-Id")
	require.NotEmpty(t, id)
	assert.Equal(t, "urn:tollgate:request:"+id, p["instance"])
	assert.Contains(t, s.logs.String(), "secret-panic-value", "the panic goes to the log")
	assert.Contains(t, s.logs.String(), "request_id="+id)
	assert.Equal(t, http.StatusOK, s.ping("after").Code, "the engine keeps serving")
}

func TestRequestID(t *testing.T) {
	s := newServer(t, openMemory(t))
	w := s.do(req{method: http.MethodGet, target: "/healthz", header: map[string]string{"X-Request-Id": "abc-123_X.y"}})
	assert.Equal(t, "abc-123_X.y", w.Header().Get("X-Request-Id"), "a well-formed id is kept")

	for _, bad := range []string{"has space", "a\"b", strings.Repeat("a", 65), "é"} {
		w := s.do(req{method: http.MethodGet, target: "/healthz", header: map[string]string{"X-Request-Id": bad}})
		got := w.Header().Get("X-Request-Id")
		assert.NotEqual(t, bad, got)
		assert.Len(t, got, 26, "a fresh id replaces a malformed one")
	}
	a := s.do(req{method: http.MethodGet, target: "/healthz"}).Header().Get("X-Request-Id")
	b := s.do(req{method: http.MethodGet, target: "/healthz"}).Header().Get("X-Request-Id")
	assert.NotEqual(t, a, b)
}

func TestAccessLog(t *testing.T) {
	s := newServer(t, openMemory(t), func(o *options) { o.AccessLog = httpapi.AccessLogAll })
	s.ping("client-secret-key")
	s.check("77", "/a")
	s.do(req{method: http.MethodDelete, target: "/rate/reset/77", header: map[string]string{"X-Admin-Key": adminKey}})
	s.do(req{method: http.MethodDelete, target: "/rate/reset/77", header: map[string]string{"X-Admin-Key": "wrong-admin-guess"}})

	lines := strings.Split(strings.TrimSpace(s.logs.String()), "\n")
	require.Len(t, lines, 5, "one line per request, and one for the wrong admin key")
	assert.Contains(t, lines[3], "admin key refused")
	for _, want := range []string{"route=/ping", "route=/rate/check", "route=/rate/reset/:userId", "status=403"} {
		assert.Contains(t, s.logs.String(), want)
	}
	for _, l := range slices.Delete(slices.Clone(lines), 3, 4) {
		for _, attr := range []string{"method=", "route=", "status=", "latency=", "request_id="} {
			assert.Contains(t, l, attr)
		}
	}
	assert.Contains(t, lines[0], "client="+s.refusals.Hash("key:client-secret-key"))
	for _, secret := range []string{"client-secret-key", adminKey, "wrong-admin-guess", "X-Admin-Key"} {
		assert.NotContains(t, s.logs.String(), secret)
	}
}
