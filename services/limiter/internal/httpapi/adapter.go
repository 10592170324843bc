package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// The adapter between handlers and Gin: a handler is a route returning its
// answer or its problem (see problem.go); serve runs it on the snapshot in
// force and writes what it returns.

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
