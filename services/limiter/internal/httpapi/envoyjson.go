package httpapi

import (
	"errors"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/services/limiter/internal/envoy"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// envoyJSON answers POST /json as envoyproxy/ratelimit does: the body is a
// RateLimitRequest in protobuf's JSON mapping, the answer the
// RateLimitResponse in the same mapping, 200 when OK and 429 when
// OVER_LIMIT. The response's headers to add are set on the answer too
// (RateLimit-Policy, RateLimit, Retry-After). Errors are problems (see
// envoyProblem; 413 over MaxBodyBytes).
func (h *handler) handleEnvoyJSON(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	var req rlsv3.RateLimitRequest
	if p := withBody(c, func(buf *bodyBuf) *problem {
		// req keeps nothing of buf, which the next request reuses.
		if err := envoy.DecodeJSON(buf.body, &req); err != nil {
			return envoyProblem(err)
		}
		return nil
	}); p != nil {
		return answer{}, p
	}
	h.setClient(c, req.GetDomain())
	resp, err := envoy.Decide(c.Request.Context(), s.Decider, s.Envoy, &req)
	if err != nil {
		return answer{}, envoyProblem(err)
	}
	data, err := envoy.AppendJSON(make([]byte, 0, 512), resp)
	if err != nil {
		return answer{}, internalError()
	}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		c.Header(hv.GetKey(), hv.GetValue())
	}
	a := answer{status: http.StatusOK, raw: data}
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		a.status = http.StatusTooManyRequests
	}
	return a, nil
}

// envoyProblem is the answer to an error of the envoy package, the one
// place POST /json turns them into HTTP: 400 for a request no configuration
// could answer (envoy.ErrInvalid: a body that is not a RateLimitRequest, an
// empty domain, ...), else the store could not decide (see unavailable).
func envoyProblem(err error) *problem {
	if errors.Is(err, envoy.ErrInvalid) {
		return fail(http.StatusBadRequest, err.Error())
	}
	return unavailable(err)
}
