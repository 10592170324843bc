package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
	"github.com/tollgate/tollgate/services/limiter/internal/openapitest"
)

// The gateway configuration of these tests: 5 per minute per client on
// /api/, per X-Api-Key (else per client) on /keyed/, 50 per minute for
// everyone together on /burst/, nothing on the rest.
var (
	apiGW   = limiter.Policy{Name: "api_gw", Algorithm: limiter.SlidingWindow, Limit: 5, Window: time.Minute}
	burstGW = limiter.Policy{Name: "burst_gw", Algorithm: limiter.FixedWindow, Limit: 50, Window: time.Minute}
)

func gatewayServer(t testing.TB, store limiter.Store) *server {
	clients, err := httplimit.NewClients(httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.1/32")))
	require.NoError(t, err)
	return newServer(t, store, func(o *options) {
		o.Policies = append(o.Policies, apiGW, burstGW)
		o.Identity = &identity.Resolver{Clients: clients}
		o.Gateway = []gateway.Rule{
			{Match: gateway.Match{PathPrefix: "/api/"}, Policies: []string{"api_gw"}, Key: gateway.Key{Kind: gateway.KeyClient}},
			{Match: gateway.Match{PathPrefix: "/keyed/"}, Policies: []string{"api_gw"}, Key: gateway.Key{Kind: gateway.KeyHeader, Header: "X-Api-Key"}},
			{Match: gateway.Match{PathPrefix: "/keyed/"}, Policies: []string{"api_gw"}, Key: gateway.Key{Kind: gateway.KeyClient}},
			{Match: gateway.Match{Method: "POST", PathPrefix: "/burst/"}, Policies: []string{"burst_gw"}, Key: gateway.Key{Kind: gateway.KeyGlobal}},
			{Match: gateway.Match{Host: "limited.test", PathPrefix: "/host/"}, Policies: []string{"api_gw"}, Key: gateway.Key{Kind: gateway.KeyClient}},
		}
	})
}

// forward asks /v1/forward-auth (query: "" or "?refuse_status=...") about
// a request for uri from the gateway at 10.0.0.1, the client being client,
// with extra headers.
func (s *server) forward(query, uri, client string, extra map[string]string) *httptest.ResponseRecorder {
	s.t.Helper()
	h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": uri, "X-Forwarded-Host": "api.example.com", "X-Forwarded-For": client}
	for k, v := range extra {
		h[k] = v
	}
	return s.do(req{method: http.MethodGet, target: httpapi.ForwardAuthPath + query, header: h, remote: "10.0.0.1:40000"})
}

func TestForwardAuthLimitsAClientAndAnswersAsGatewaysNeed(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := gatewayServer(t, sk.open(t))
			for i := range 5 {
				w := s.forward("", "/api/items?page=2", "192.0.2.7", nil)
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				assert.Equal(t, `"api_gw";q=5;w=60`, w.Header().Get("RateLimit-Policy"))
				assert.Regexp(t, `^"api_gw";r=`+strconv.Itoa(4-i)+`;t=\d+$`, w.Header().Get("RateLimit"))
				assert.JSONEq(t, `{"allowed":true,"rule":0,"key":"peer:192.0.2.7"}`, w.Body.String())
			}
			w := s.forward("", "/api/items", "192.0.2.7", nil)
			m := assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
			assert.Equal(t, []any{"api_gw"}, m["violated-policies"])
			assert.NotEmpty(t, w.Header().Get("Retry-After"))
			assert.Regexp(t, `^"api_gw";r=0;t=\d+$`, w.Header().Get("RateLimit"))

			// nginx's auth_request takes only 401 and 403 as a refusal.
			for _, status := range []int{http.StatusForbidden, http.StatusUnauthorized} {
				w = s.forward("?refuse_status="+strconv.Itoa(status), "/api/items", "192.0.2.7", nil)
				require.Equal(t, status, w.Code, w.Body.String())
				assert.NotEmpty(t, w.Header().Get("Retry-After"))
				assert.Regexp(t, `^"api_gw";r=0;t=\d+$`, w.Header().Get("RateLimit"))
				m = decode(t, w)
				assert.Equal(t, "urn:tollgate:problem:rate-limit-exceeded", m["type"])
				assert.Equal(t, float64(status), m["status"])
			}
			// Another client has its own budget.
			assert.Equal(t, http.StatusOK, s.forward("", "/api/items", "192.0.2.8", nil).Code)
			assert.Contains(t, s.metrics(), `tollgate_decisions_total{policy="api_gw",result="limited"} 3`)
		})
	}
}

func TestForwardAuthRefuseStatusIsValidatedBeforeCounting(t *testing.T) {
	s := gatewayServer(t, openMemory(t))
	for _, q := range []string{"?refuse_status=500", "?refuse_status=", "?refuse_status=429"} {
		assertProblem(t, s.forward(q, "/api/x", "192.0.2.7", nil), http.StatusBadRequest, "bad-request")
	}
	w := s.forward("", "/api/x", "192.0.2.7", nil)
	assert.Regexp(t, `^"api_gw";r=4;t=\d+$`, w.Header().Get("RateLimit"), "the refused questions counted nothing")
}

// The forwarded address is the client only from a trusted proxy, and read
// by the service's identity code: a peer that is not the gateway is its
// own client whatever X-Forwarded-For says, and a gateway's list is read
// from the right, past the trusted addresses.
func TestForwardAuthClientKeyTrustsOnlyTheGateway(t *testing.T) {
	s := gatewayServer(t, openMemory(t))
	w := s.forward("", "/api/x", "198.51.100.1, 192.0.2.9", nil)
	assert.JSONEq(t, `{"allowed":true,"rule":0,"key":"peer:192.0.2.9"}`, w.Body.String())
	w = s.forward("", "/api/x", "192.0.2.9, 10.0.0.1", nil)
	assert.JSONEq(t, `{"allowed":true,"rule":0,"key":"peer:192.0.2.9"}`, w.Body.String())

	direct := s.do(req{method: http.MethodGet, target: httpapi.ForwardAuthPath, remote: "203.0.113.5:1234",
		header: map[string]string{"X-Forwarded-Uri": "/api/x", "X-Forwarded-For": "192.0.2.9"}})
	assert.JSONEq(t, `{"allowed":true,"rule":0,"key":"peer:203.0.113.5"}`, direct.Body.String())
}

// Rules match the original request's method, host and cleaned path; a rule
// whose key header is absent gives way to the next matching rule; no rule:
// 200, uncounted, without RateLimit fields.
func TestForwardAuthMatching(t *testing.T) {
	s := gatewayServer(t, openMemory(t))
	for _, c := range []struct {
		uri   string
		extra map[string]string
		want  string
	}{
		{"/static/app.js", nil, `{"allowed":true}`},
		{"/static/../api/x", nil, `{"allowed":true,"rule":0,"key":"peer:192.0.2.7"}`},
		{"//api//x", nil, `{"allowed":true,"rule":0,"key":"peer:192.0.2.7"}`},
		{"/%61pi/x", nil, `{"allowed":true,"rule":0,"key":"peer:192.0.2.7"}`},
		{"/api", nil, `{"allowed":true}`},
		{"/keyed/a", map[string]string{"X-Api-Key": "k1"}, `{"allowed":true,"rule":1,"key":"header:x-api-key:k1"}`},
		{"/keyed/a", nil, `{"allowed":true,"rule":2,"key":"peer:192.0.2.7"}`},
		{"/burst/a", nil, `{"allowed":true}`}, // POST only
		{"/burst/a", map[string]string{"X-Forwarded-Method": "POST"}, `{"allowed":true,"rule":3,"key":"global"}`},
		// The nginx recipe's X-Original-* come before X-Forwarded-*.
		{"/static/x", map[string]string{"X-Original-URI": "/burst/y", "X-Original-Method": "POST"}, `{"allowed":true,"rule":3,"key":"global"}`},
	} {
		w := s.forward("", c.uri, "192.0.2.7", c.extra)
		require.Equal(t, http.StatusOK, w.Code, "%s: %s", c.uri, w.Body.String())
		assert.JSONEq(t, c.want, w.Body.String(), c.uri)
		assert.Equal(t, c.want == `{"allowed":true}`, w.Header().Get("RateLimit-Policy") == "", c.uri)
	}
}

// TestForwardAuthMatchesOtherSpellings: the same request spelt otherwise
// meets the same rule: an absolute-form target (whose host wins over
// X-Forwarded-Host), a host's trailing dot, the path's case, a backslash.
func TestForwardAuthMatchesOtherSpellings(t *testing.T) {
	s := gatewayServer(t, openMemory(t))
	for i, c := range []struct {
		uri, host, want string
	}{
		{"http://api.example.com/api/x", "", `{"allowed":true,"rule":0}`},
		{"/host/x", "", `{"allowed":true}`},
		{"http://limited.test/host/x", "", `{"allowed":true,"rule":4}`},
		{"http://Limited.Test.:8443", "other.test", `{"allowed":true}`},
		{"/host/x", "Limited.Test.:8443", `{"allowed":true,"rule":4}`},
		{"/API/x", "", `{"allowed":true,"rule":0}`},
		{`/api\x`, "", `{"allowed":true,"rule":0}`},
		{"/api%5cx", "", `{"allowed":true,"rule":0}`},
	} {
		client := "192.0.2." + strconv.Itoa(10+i)
		extra := map[string]string{}
		if c.host != "" {
			extra["X-Forwarded-Host"] = c.host
		}
		w := s.forward("", c.uri, client, extra)
		require.Equal(t, http.StatusOK, w.Code, "%s: %s", c.uri, w.Body.String())
		want := c.want
		if strings.Contains(want, "rule") {
			want = strings.TrimSuffix(want, "}") + `,"key":"peer:` + client + `"}`
		}
		assert.JSONEq(t, want, w.Body.String(), c.uri)
	}
}

func TestForwardAuthBadQuestions(t *testing.T) {
	s := gatewayServer(t, openMemory(t))
	for name, h := range map[string]map[string]string{
		"no uri":       {"X-Forwarded-Method": "GET"},
		"relative uri": {"X-Forwarded-Uri": "api/x"},
		"ftp uri":      {"X-Forwarded-Uri": "ftp://h/api/x"},
		"bad escape":   {"X-Forwarded-Uri": "/api/%zz"},
		"control":      {"X-Forwarded-Uri": "/api/%0a"},
		"long api key": {"X-Forwarded-Uri": "/keyed/x", "X-Api-Key": strings.Repeat("k", limiter.MaxKeyLen)},
	} {
		w := s.do(req{method: http.MethodGet, target: httpapi.ForwardAuthPath, header: h, remote: "10.0.0.1:1"})
		assertProblem(t, w, http.StatusBadRequest, "bad-request")
		assert.NotContains(t, w.Body.String(), "panic", name)
	}
	hr := httptestRequest(http.MethodGet, httpapi.ForwardAuthPath, "")
	hr.Header.Add("X-Forwarded-Uri", "/api/x")
	hr.Header.Add("X-Forwarded-Uri", "/static/x")
	assertProblem(t, serve(s, hr), http.StatusBadRequest, "bad-request")
}

// Gateways ask with GET (nginx, Caddy) or the original method (Traefik);
// without a method header the request's own is the original's.
func TestForwardAuthAnswersEveryMethod(t *testing.T) {
	s := gatewayServer(t, openMemory(t))
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"} {
		w := s.do(req{method: m, target: httpapi.ForwardAuthPath, header: map[string]string{"X-Forwarded-Uri": "/burst/x"}, remote: "10.0.0.1:1"})
		require.Equal(t, http.StatusOK, w.Code, m)
		assert.Equal(t, m == "POST", w.Header().Get("RateLimit-Policy") != "", m)
	}
}

// The public listener does not serve the forward-auth route: with
// --internal-addr it is the internal one's.
func TestForwardAuthIsOnTheDecisionListener(t *testing.T) {
	pub := newServer(t, openMemory(t), func(o *options) { o.Listener = httpapi.PublicRoutes })
	w := httptest.NewRecorder() // the document describes the routes of all listeners together
	pub.engine.ServeHTTP(w, httptestRequest(http.MethodGet, httpapi.ForwardAuthPath, ""))
	assert.Equal(t, http.StatusNotFound, w.Code)
	in := newServer(t, openMemory(t), func(o *options) { o.Listener = httpapi.InternalRoutes })
	assert.Equal(t, http.StatusOK, in.do(req{method: http.MethodGet, target: httpapi.ForwardAuthPath, header: map[string]string{"X-Forwarded-Uri": "/"}}).Code)
}

// 200 concurrent questions on one global key over real HTTP: exactly the
// limit passes, on each store.
func TestForwardAuthConcurrentGlobalKeyIsExact(t *testing.T) {
	const n = 200
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := gatewayServer(t, sk.open(t))
			ts := httptest.NewServer(s.engine)
			t.Cleanup(ts.Close)
			client := &http.Client{Transport: openapitest.Service(t).Transport(func(err error) { t.Error(err) }, &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64})}
			t.Cleanup(client.CloseIdleConnections)
			got := burst(t, client, n, func() (*http.Request, error) {
				r, err := http.NewRequest(http.MethodPost, ts.URL+httpapi.ForwardAuthPath+"?refuse_status=403", nil)
				if err == nil {
					r.Header.Set("X-Forwarded-Uri", "/burst/x")
				}
				return r, err
			})
			assert.Equal(t, map[int]int{http.StatusOK: 50, http.StatusForbidden: n - 50}, got)
		})
	}
}
