package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// Constant answers of the baseline's routes.
var (
	baselineBody      = []byte(`{"allowed":true,"limit":1000000,"remaining":999999,"reset_after":0,"retry_after":0}`)
	baselinePingBody  = []byte(`{"key":"k","count":1,"limit":1000000,"remaining":999999,"reset_after":0}`)
	baselineCheckBody = []byte(`{"result":"ok","user_id":1,"endpoint":"/e","count":1,"limit":1000000,"remaining":999999}`)
	baselineBadBody   = []byte(`{"type":"about:blank","title":"Bad Request","status":400,"detail":"bad request"}`)
)

// baselineFields are the rate-limit header fields the service sets on an
// allowed decision, with constant values; the request id is made per
// request, as the service makes one.
var baselineFields = map[string][]string{
	"Ratelimit-Policy":      {`"bench";q=2000000000;w=1`},
	"Ratelimit":             {`"bench";r=1999999999;t=1`},
	"X-Ratelimit-Limit":     {"2000000000"},
	"X-Ratelimit-Remaining": {"1999999999"},
	"X-Ratelimit-Reset":     {"1"},
}

// baselineHandler is the HTTP ceiling: a Gin engine with the service's
// routes and no limiter. POST /v1/check and POST /rate/check decode the
// request body (as the service must), GET /ping and POST /rate/check read
// the identity header, and each answers a constant allowed decision, or
// 400 when the body is not JSON or the header is missing; GET /healthz
// answers 200. With fields, each allowed decision also carries the header
// fields the service sends with one (X-Request-Id and the rate-limit
// fields), so that their own cost can be told from the limiter's. It is
// safe for concurrent use.
func baselineHandler(fields bool) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	bad := func(c *gin.Context) { c.Data(http.StatusBadRequest, "application/problem+json", baselineBadBody) }
	allowed := func(c *gin.Context, body []byte) {
		if fields {
			h := c.Writer.Header()
			h["X-Request-Id"] = []string{rand.Text()}
			for k, v := range baselineFields {
				h[k] = v
			}
		}
		c.Data(http.StatusOK, "application/json", body)
	}
	e.POST(checkPath, func(c *gin.Context) {
		var req checkRequest
		if err := c.ShouldBindJSON(&req); err != nil {
			bad(c)
			return
		}
		allowed(c, baselineBody)
	})
	e.GET("/ping", func(c *gin.Context) {
		if c.GetHeader("X-Client-Key") == "" {
			bad(c)
			return
		}
		allowed(c, baselinePingBody)
	})
	e.POST("/rate/check", func(c *gin.Context) {
		var req struct {
			Endpoint string `json:"endpoint"`
		}
		if c.GetHeader("X-User-Id") == "" || c.ShouldBindJSON(&req) != nil {
			bad(c)
			return
		}
		allowed(c, baselineCheckBody)
	})
	e.GET("/healthz", func(c *gin.Context) {
		c.Data(http.StatusOK, "application/json", []byte(`{"status":"ok"}`))
	})
	return e
}

// runBaseline serves the baseline on addr until ctx ends, then shuts down
// gracefully. It prints the address it listens on to stdout.
func runBaseline(ctx context.Context, addr string, fields bool, stdout io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("loadgen: baseline: %w", err)
	}
	srv := &http.Server{Handler: baselineHandler(fields), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "baseline: listening on http://%s (Ctrl-C to stop)\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("loadgen: baseline: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("loadgen: baseline: shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("loadgen: baseline: %w", err)
	}
	return nil
}
