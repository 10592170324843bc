package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

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
	// refusal, when set, makes the answer the library's 429 problem, as
	// its middleware answers (detail and retryAfter are its own), in
	// status (429 unless a forward-auth caller asked for another).
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
		detail:     httplimit.UnavailableDetail,
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
	return &problem{status: http.StatusTooManyRequests, refusal: &refusal{policy: p, decision: d}}
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
				slog.String("request_id", requestIDOf(c)), slog.String("error", p.cause.Error()))
		}
	}
	var instance string
	if id := requestIDOf(c); id != "" {
		instance = "urn:tollgate:request:" + id
	}
	if r := p.refusal; r != nil {
		httplimit.WriteRefused(c.Writer, p.status, r.policy, r.decision, instance)
		c.Abort()
		return
	}
	if p.retryAfter != "" {
		c.Writer.Header()["Retry-After"] = []string{p.retryAfter}
	}
	pb := httplimit.NewProblem(p.status, p.detail)
	pb.Instance = instance
	if p.slug != "" {
		pb.Type = httplimit.ProblemTypePrefix + p.slug
	}
	httplimit.WriteProblem(c.Writer, p.status, pb)
	c.Abort()
}

// answer is a handler's success: a JSON body, or raw JSON bytes.
type answer struct {
	status int    // 0 means 200
	body   any    // encoded as JSON unless raw is set
	raw    []byte // already JSON
	// pooled, when set, is raw's buffer from answerBufs (see jsonOK).
	pooled *[]byte
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
		switch {
		case a.pooled != nil:
			writeJSON(c, status, a.raw)
			*a.pooled = a.raw[:0]
			answerBufs.Put(a.pooled)
		case a.raw != nil:
			c.Data(status, "application/json", a.raw)
		default:
			c.JSON(status, a.body)
		}
	}
}
