package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// ProblemTypePrefix starts every problem type URI; the slug follows.
const ProblemTypePrefix = "urn:tollgate:problem:"

// problemSlugs maps each status the service answers with to its problem
// type's slug.
var problemSlugs = map[int]string{
	http.StatusBadRequest:            "bad-request",
	http.StatusForbidden:             "forbidden",
	http.StatusNotFound:              "not-found",
	http.StatusMethodNotAllowed:      "method-not-allowed",
	http.StatusRequestEntityTooLarge: "payload-too-large",
	http.StatusUnprocessableEntity:   "validation-failed",
	http.StatusTooManyRequests:       "rate-limit-exceeded",
	http.StatusInternalServerError:   "internal",
	http.StatusServiceUnavailable:    "unavailable",
}

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
}

// LimitedProblem is the 429 answer: a Problem with the refusing policy's
// numbers. Durations are seconds.
type LimitedProblem struct {
	Problem
	ViolatedPolicies []string `json:"violated-policies"`
	Limit            int64    `json:"limit"`
	Remaining        int64    `json:"remaining"`
	ResetAfter       float64  `json:"reset_after"`
	RetryAfter       float64  `json:"retry_after"`
}

func newProblem(c *gin.Context, status int, detail string) Problem {
	slug, ok := problemSlugs[status]
	if !ok {
		status, slug = http.StatusInternalServerError, problemSlugs[http.StatusInternalServerError]
	}
	p := Problem{
		Type:   ProblemTypePrefix + slug,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
	}
	if id := c.GetString(ctxRequestID); id != "" {
		p.Instance = "urn:tollgate:request:" + id
	}
	return p
}

// abortProblem answers status with a problem and stops the handler chain.
func abortProblem(c *gin.Context, status int, detail string) {
	writeProblem(c, status, newProblem(c, status, detail))
}

func writeProblem(c *gin.Context, status int, body any) {
	data, err := json.Marshal(body)
	if err != nil { // cannot happen for our types; answer without a body
		c.AbortWithStatus(http.StatusInternalServerError)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(status, ProblemContentType, data)
	c.Abort()
}

// abortLimited answers 429 for policy p's refusal d, with Retry-After.
func abortLimited(c *gin.Context, p limiter.Policy, d limiter.Decision) {
	c.Header("Retry-After", strconv.FormatInt(limiter.RetryAfterSeconds(d.RetryAfter), 10))
	body := LimitedProblem{
		Problem: newProblem(c, http.StatusTooManyRequests,
			"rate limit of "+strconv.FormatInt(p.Limit, 10)+" per "+p.Window.String()+" exceeded for policy "+strconv.Quote(p.Name)),
		ViolatedPolicies: []string{p.Name},
		Limit:            d.Limit,
		Remaining:        d.Remaining,
		ResetAfter:       limiter.Seconds(d.ResetAfter),
		RetryAfter:       limiter.Seconds(d.RetryAfter),
	}
	writeProblem(c, http.StatusTooManyRequests, body)
}
