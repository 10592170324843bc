package httpapi

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// ctxClient is the Gin context key of the client's key, logged only hashed;
// set only while the access log is on (see setClient).
const ctxClient = "tollgate.client"

// requestIDField is the header field that carries the request id, in the
// answer as in the request.
const requestIDField = "X-Request-Id"

// maxRequestIDLen bounds an X-Request-Id taken from the client.
const maxRequestIDLen = 64

// validRequestID accepts a client's X-Request-Id when it is short and made
// of [A-Za-z0-9._-] only, so it is safe to echo and to log.
func validRequestID(s string) bool {
	if s == "" || len(s) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '.', b == '_', b == '-':
		default:
			return false
		}
	}
	return true
}

// requestID reuses a valid X-Request-Id or makes one, and echoes it. The
// answer's header holds it for the rest of the chain (see requestIDOf): a
// Gin context value would cost every request a map.
func (h *handler) requestID(c *gin.Context) {
	id := c.GetHeader(requestIDField)
	if !validRequestID(id) {
		id = rand.Text()
	}
	c.Writer.Header()[requestIDField] = []string{id}
	c.Next()
}

// requestIDOf returns the request id that requestID set on c's answer.
func requestIDOf(c *gin.Context) string {
	if v := c.Writer.Header()[requestIDField]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// setClient records the client's key for the access log line; nothing when
// that line is not written.
func (h *handler) setClient(c *gin.Context, key string) {
	if h.access != AccessLogOff && h.log.Enabled(c.Request.Context(), slog.LevelInfo) {
		c.Set(ctxClient, key)
	}
}

// observe counts the request and writes its access-log line when the
// access log asks for one, after the rest of the chain has run. It logs
// the route template, never the raw path (which may hold a user id), nor
// any header.
func (h *handler) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	status := c.Writer.Status()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	h.requests.WithLabelValues(route, codeClass(status)).Inc()
	if h.access == AccessLogOff || h.access == AccessLogRefusals && status != http.StatusTooManyRequests ||
		!h.log.Enabled(c.Request.Context(), slog.LevelInfo) {
		return // no line for this request: skip building it
	}
	client := c.GetString(ctxClient)
	folded := -1
	if h.access == AccessLogRefusals {
		var ok bool
		if ok, folded = h.refusals.take(route+" "+client, h.current().Decider.Now()); !ok {
			return
		}
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs,
		slog.String("method", c.Request.Method),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Duration("latency", time.Since(start)),
		slog.String("request_id", requestIDOf(c)),
	)
	if client != "" {
		attrs = append(attrs, slog.String("client", clientHash(h.current(), client)))
	}
	if folded >= 0 {
		attrs = append(attrs, slog.Int("folded", folded))
	}
	h.log.LogAttrs(c.Request.Context(), slog.LevelInfo, "request", attrs...)
}

// clientHash names a client key in the logs: the offenders report's keyed hash,
// so that the two agree.
func clientHash(s *snapshot.Snapshot, key string) string {
	return s.Decider.Offenders().Hash(key)
}

// recover turns a panic in a handler into a 500 problem that says nothing of
// the panic; the value and the stack go to the log.
func (h *handler) recover(c *gin.Context) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == http.ErrAbortHandler {
			panic(r)
		}
		h.log.LogAttrs(c.Request.Context(), slog.LevelError, "panic in handler",
			slog.String("request_id", requestIDOf(c)),
			slog.String("panic", fmt.Sprint(r)),
			slog.String("stack", string(debug.Stack())))
		if c.Writer.Written() {
			c.Abort()
			return
		}
		h.writeProblem(c, internalError())
	}()
	c.Next()
}

// codeClasses are the code_class label values, by status/100.
var codeClasses = [...]string{"0xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// codeClass returns the code_class label of status ("2xx"), without
// formatting it for the statuses HTTP defines.
func codeClass(status int) string {
	if i := status / 100; i >= 0 && i < len(codeClasses) {
		return codeClasses[i]
	}
	return strconv.Itoa(status/100) + "xx"
}
