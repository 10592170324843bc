package httpapi

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// ForwardAuthPath is the route gateways call before proxying a request.
const ForwardAuthPath = "/v1/forward-auth"

// forwardAuthMethods are the methods /v1/forward-auth answers: every one
// but CONNECT (gateways ask with GET, or with the original method).
var forwardAuthMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodTrace,
}

// forwardAuthBody is the 200 answer: the rule that matched (absent when
// none did) and the key its policies counted.
type forwardAuthBody struct {
	Allowed bool   `json:"allowed"`
	Rule    *int   `json:"rule,omitempty"`
	Key     string `json:"key,omitempty"`
}

// originalRequest is what a gateway tells of the request it asks about.
type originalRequest struct {
	method, host, path string
}

// readOriginal reads the original request from the headers gateways send:
// X-Original-Method and X-Original-URI (the nginx recipe) before
// X-Forwarded-Method and X-Forwarded-Uri (Traefik, Caddy), and the host of
// an absolute-form URI (which a server takes over the Host header), else
// X-Forwarded-Host, else Host. Without a method header the request's own method is the
// original's; without a URI header nothing can be matched: 400.
func readOriginal(c *gin.Context) (originalRequest, *problem) {
	var o originalRequest
	first := func(names ...string) (string, *problem) {
		for _, n := range names {
			v, err := singleHeader(c, n)
			if err != nil {
				return "", fail(http.StatusBadRequest, detail(err))
			}
			if v != "" {
				return v, nil
			}
		}
		return "", nil
	}
	var p *problem
	if o.method, p = first("X-Original-Method", "X-Forwarded-Method"); p != nil {
		return o, p
	}
	if o.method == "" {
		o.method = c.Request.Method
	}
	uri, p := first("X-Original-URI", "X-Forwarded-Uri")
	if p != nil {
		return o, p
	}
	if uri == "" {
		return o, fail(http.StatusBadRequest, "the original request's URI is missing: the gateway must send X-Forwarded-Uri or X-Original-URI (see docs/gateways.md)")
	}
	host, path, err := gateway.ParseTarget(uri)
	if err != nil {
		return o, fail(http.StatusBadRequest, "X-Forwarded-Uri or X-Original-URI "+strings.TrimPrefix(err.Error(), "gateway: "))
	}
	o.path = path
	if o.host = host; o.host != "" { // an absolute-form target's host wins
		return o, nil
	}
	if o.host, p = first("X-Forwarded-Host"); p != nil {
		return o, p
	}
	if o.host == "" {
		o.host = c.Request.Host
	}
	return o, nil
}

// refuseStatus reads ?refuse_status: the status of a refusal, 429 unless
// 401 or 403 is asked for (nginx's auth_request takes only those).
func refuseStatus(c *gin.Context) (int, *problem) {
	v, given := c.GetQuery("refuse_status")
	if !given {
		return http.StatusTooManyRequests, nil
	}
	switch v {
	case "401":
		return http.StatusUnauthorized, nil
	case "403":
		return http.StatusForbidden, nil
	}
	return 0, fail(http.StatusBadRequest, "query parameter refuse_status must be 401 or 403 (absent: 429)")
}

// gatewayKey is the store key of rule r for c's request; ok is false when
// the rule cannot form one (its header is absent), and the next matching
// rule is tried.
func gatewayKey(c *gin.Context, s *snapshot.Snapshot, r gateway.Rule) (key string, ok bool, p *problem) {
	switch r.Key.Kind {
	case gateway.KeyGlobal:
		return "global", true, nil
	case gateway.KeyClient:
		id, err := s.Identity.Resolve(c.Request, []identity.Source{identity.Peer})
		if p := identityProblem(id, err); p != nil {
			return "", false, p
		}
		return id.Subject, true, nil
	}
	v, err := singleHeader(c, r.Key.Header)
	if err != nil {
		return "", false, fail(http.StatusBadRequest, detail(err))
	}
	if v == "" {
		return "", false, nil
	}
	key = "header:" + strings.ToLower(r.Key.Header) + ":" + v
	if err := ValidateText(r.Key.Header, key, limiter.MaxKeyLen, 0); err != nil {
		return "", false, fail(http.StatusBadRequest, detail(err))
	}
	return key, true, nil
}

// handleForwardAuth answers a gateway's question about one request: the
// first gateway rule that matches it, and can form its key, charges its
// policies through the decision layer. 200 with the RateLimit fields when
// allowed (or when no rule matches); a refusal is 429, or the status of
// ?refuse_status, with Retry-After, the fields and the problem.
func (h *handler) handleForwardAuth(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	refused, p := refuseStatus(c)
	if p != nil {
		return answer{}, p
	}
	o, p := readOriginal(c)
	if p != nil {
		return answer{}, p
	}
	for i := s.Gateway.Match(o.method, o.host, o.path, 0); i >= 0; i = s.Gateway.Match(o.method, o.host, o.path, i+1) {
		key, found, p := gatewayKey(c, s, s.Gateway.Rule(i))
		if p != nil {
			return answer{}, p
		}
		if !found {
			continue
		}
		h.setClient(c, key)
		plan := s.GatewayPlan(i)
		v, err := s.Decider.Route(c.Request.Context(), plan, limiter.Key{Subject: key}, 1, "")
		if err != nil {
			return answer{}, unavailable(err)
		}
		if p := decided(c, plan, v); p != nil {
			p.status = refused
			return answer{}, p
		}
		return ok(forwardAuthBody{Allowed: true, Rule: &i, Key: key}), nil
	}
	return ok(forwardAuthBody{Allowed: true}), nil
}
