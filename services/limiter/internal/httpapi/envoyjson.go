package httpapi

import (
	"context"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gin-gonic/gin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// EnvoyService answers Envoy's rate-limit requests (the envoy package's
// Service). It must be safe for concurrent use and return gRPC statuses as
// errors.
type EnvoyService interface {
	ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

// envoyJSON answers POST /json as envoyproxy/ratelimit does: the body is a
// RateLimitRequest in protobuf's JSON mapping, the answer the
// RateLimitResponse in the same mapping, 200 when OK and 429 when
// OVER_LIMIT. The response's headers to add are set on the answer too
// (RateLimit-Policy, RateLimit, Retry-After). Errors are problems: 400 for
// a body that is not a valid request, 413 over MaxBodyBytes, 503 when the
// store cannot decide.
func (h *handler) envoyJSON(svc EnvoyService) gin.HandlerFunc {
	return func(c *gin.Context) {
		body, ok := readBody(c)
		if !ok {
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			abortProblem(c, http.StatusBadRequest, "the body is not a RateLimitRequest in JSON: "+err.Error())
			return
		}
		c.Set(ctxClient, req.GetDomain())
		resp, err := svc.ShouldRateLimit(c.Request.Context(), &req)
		if err != nil {
			st := status.Convert(err)
			switch st.Code() {
			case codes.InvalidArgument:
				abortProblem(c, http.StatusBadRequest, st.Message())
			case codes.Unavailable:
				c.Header("Retry-After", "1")
				abortProblem(c, http.StatusServiceUnavailable, "the rate-limit store could not decide; retry later")
			default:
				abortProblem(c, http.StatusInternalServerError, "internal error; the request id identifies it in the logs")
			}
			return
		}
		data, err := protojson.Marshal(resp)
		if err != nil {
			abortProblem(c, http.StatusInternalServerError, "internal error; the request id identifies it in the logs")
			return
		}
		for _, hv := range resp.GetResponseHeadersToAdd() {
			c.Header(hv.GetKey(), hv.GetValue())
		}
		code := http.StatusOK
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			code = http.StatusTooManyRequests
		}
		c.Data(code, "application/json", data)
	}
}
