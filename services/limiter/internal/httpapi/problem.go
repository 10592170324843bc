package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// ProblemTypePrefix starts every problem type URI; the slug follows.
const ProblemTypePrefix = "urn:tollgate:problem:"

// problemSlugs maps each status the service answers with to its problem
// type's slug.
var problemSlugs = map[int]string{
	http.StatusBadRequest:            "bad-request",
	http.StatusUnauthorized:          "unauthorized",
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

// problem is a handler's error answer; writeProblem writes it. Handlers
// return one instead of writing it themselves.
type problem struct {
	status int
	// slug, when set, names the problem type instead of the status's slug.
	slug   string
	detail string
	// retryAfter, when not empty, is the Retry-After field of the answer.
	retryAfter string
	// cause, when set, is logged (a store error).
	cause error
	// refusal, when set, makes the answer a LimitedProblem (429).
	refusal *refusal
}

// refusal is the policy that refused and its decision.
type refusal struct {
	policy   limiter.Policy
	decision limiter.Decision
}

// fail returns a problem of status with detail.
func fail(status int, detail string) *problem { return &problem{status: status, detail: detail} }

// unavailable is the answer when the store could not decide (err); the
// decision layer has counted it. A request shed by this instance (the
// decision could not even be sent in time) is overloaded instead; a client
// that went away gets an answer nobody reads, and no log line.
func unavailable(err error) *problem {
	switch {
	case errors.Is(err, context.Canceled):
		return fail(http.StatusServiceUnavailable, "the request was cancelled")
	case errors.Is(err, limiter.ErrOverloaded):
		return &problem{
			status:     http.StatusServiceUnavailable,
			slug:       "overloaded",
			detail:     "this instance is overloaded: the decision could not be made in time; retry later",
			retryAfter: "1",
		}
	}
	return &problem{
		status:     http.StatusServiceUnavailable,
		detail:     "the rate-limit store could not decide; retry later",
		retryAfter: "1",
		cause:      err,
	}
}

// internalError is the answer to a failure the client cannot fix.
func internalError() *problem {
	return fail(http.StatusInternalServerError, "internal error; the request id identifies it in the logs")
}

// limited is the 429 answer for policy p's refusal d.
func limited(p limiter.Policy, d limiter.Decision) *problem {
	return &problem{
		status:     http.StatusTooManyRequests,
		detail:     "rate limit of " + strconv.FormatInt(p.Limit, 10) + " per " + p.Window.String() + " exceeded for policy " + strconv.Quote(p.Name),
		retryAfter: strconv.FormatInt(limiter.RetryAfterSeconds(d.RetryAfter), 10),
		refusal:    &refusal{policy: p, decision: d},
	}
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

// writeProblem answers p and stops the handler chain: the one place that
// writes error answers.
func (h *handler) writeProblem(c *gin.Context, p *problem) {
	if p.cause != nil {
		if ok, dropped := h.storeErrors.take(); ok {
			if dropped > 0 {
				h.log.LogAttrs(c.Request.Context(), slog.LevelWarn, "store errors not logged (sampled)", slog.Int("count", dropped))
			}
			h.log.LogAttrs(c.Request.Context(), slog.LevelWarn, "store error",
				slog.String("request_id", c.GetString(ctxRequestID)), slog.String("error", p.cause.Error()))
		}
	}
	if p.retryAfter != "" {
		c.Header("Retry-After", p.retryAfter)
	}
	pb := newProblem(c, p.status, p.detail)
	if p.slug != "" {
		pb.Type = ProblemTypePrefix + p.slug
	}
	var body any = pb
	if r := p.refusal; r != nil {
		body = LimitedProblem{
			Problem:          pb,
			ViolatedPolicies: []string{r.policy.Name},
			Limit:            r.decision.Limit,
			Remaining:        r.decision.Remaining,
			ResetAfter:       limiter.Seconds(r.decision.ResetAfter),
			RetryAfter:       limiter.Seconds(r.decision.RetryAfter),
		}
	}
	data, err := json.Marshal(body)
	if err != nil { // cannot happen for our types; answer without a body
		c.AbortWithStatus(http.StatusInternalServerError)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(p.status, ProblemContentType, data)
	c.Abort()
}

// answer is a handler's success: a JSON body, or raw JSON bytes.
type answer struct {
	status int    // 0 means 200
	body   any    // encoded as JSON unless raw is set
	raw    []byte // already JSON
}

// ok answers 200 with body.
func ok(body any) answer { return answer{body: body} }

// route is a handler: it reads the request, with the snapshot loaded once
// for it, and returns its answer or a problem.
type route func(c *gin.Context, s *snapshot.Snapshot) (answer, *problem)

// serve adapts r to Gin: it loads the snapshot, runs r and writes what it
// returns.
func (h *handler) serve(r route) gin.HandlerFunc {
	return func(c *gin.Context) {
		a, p := r(c, h.current())
		if p != nil {
			h.writeProblem(c, p)
			return
		}
		status := a.status
		if status == 0 {
			status = http.StatusOK
		}
		if a.raw != nil {
			c.Data(status, "application/json", a.raw)
			return
		}
		if j, ok := a.body.(jsonAppender); ok {
			writeAppender(c, status, j)
			return
		}
		c.JSON(status, a.body)
	}
}
