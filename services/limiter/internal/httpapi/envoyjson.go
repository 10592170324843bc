package httpapi

import (
	"context"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gin-gonic/gin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/envoy"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// envoyJSON answers POST /json as envoyproxy/ratelimit does: the body is a
// RateLimitRequest in protobuf's JSON mapping, the answer the
// RateLimitResponse in the same mapping, 200 when OK and 429 when
// OVER_LIMIT. The response's headers to add are set on the answer too
// (RateLimit-Policy, RateLimit, Retry-After). Errors are problems: 400 for
// a body that is not a valid request, 413 over MaxBodyBytes, 503 when the
// store cannot decide.
func (h *handler) handleEnvoyJSON(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	var req rlsv3.RateLimitRequest
	if p := withBody(c, func(buf *bodyBuf) *problem {
		// Envoy's usual shape without protojson's reflection; protojson
		// reads the rest and words the errors. Both copy every string they
		// read: req keeps nothing of buf.
		if parseEnvoyRequest(buf.body, &req) {
			return nil
		}
		if err := protojson.Unmarshal(buf.body, &req); err != nil {
			return fail(http.StatusBadRequest, "the body is not a RateLimitRequest in JSON: "+err.Error())
		}
		return nil
	}); p != nil {
		return answer{}, p
	}
	h.setClient(c, req.GetDomain())
	resp, err := envoy.Decide(c.Request.Context(), s.Decider, s.Envoy, &req)
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.InvalidArgument:
			return answer{}, fail(http.StatusBadRequest, st.Message())
		case codes.Unavailable:
			return answer{}, unavailable(err)
		case codes.Canceled: // the client went away: the cause's chain is lost in the status
			return answer{}, unavailable(context.Canceled)
		case codes.ResourceExhausted: // shed: as above
			return answer{}, unavailable(limiter.ErrOverloaded)
		}
		return answer{}, internalError()
	}
	data, ok := appendEnvoyResponse(make([]byte, 0, 512), resp)
	if !ok {
		if data, err = protojson.Marshal(resp); err != nil {
			return answer{}, internalError()
		}
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
