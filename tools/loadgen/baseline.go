package main

import (
	"context"
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

// baselineHandler is the HTTP ceiling: a Gin engine with the service's
// routes and no limiter. POST /v1/check and POST /rate/check decode the
// request body (as the service must), GET /ping and POST /rate/check read
// the identity header, and each answers a constant allowed decision, or
// 400 when the body is not JSON or the header is missing; GET /healthz
// answers 200. It is safe for concurrent use.
func baselineHandler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	bad := func(c *gin.Context) { c.Data(http.StatusBadRequest, "application/problem+json", baselineBadBody) }
	e.POST(checkPath, func(c *gin.Context) {
		var req checkRequest
		if err := c.ShouldBindJSON(&req); err != nil {
			bad(c)
			return
		}
		c.Data(http.StatusOK, "application/json", baselineBody)
	})
	e.GET("/ping", func(c *gin.Context) {
		if c.GetHeader("X-Client-Key") == "" {
			bad(c)
			return
		}
		c.Data(http.StatusOK, "application/json", baselinePingBody)
	})
	e.POST("/rate/check", func(c *gin.Context) {
		var req struct {
			Endpoint string `json:"endpoint"`
		}
		if c.GetHeader("X-User-Id") == "" || c.ShouldBindJSON(&req) != nil {
			bad(c)
			return
		}
		c.Data(http.StatusOK, "application/json", baselineCheckBody)
	})
	e.GET("/healthz", func(c *gin.Context) {
		c.Data(http.StatusOK, "application/json", []byte(`{"status":"ok"}`))
	})
	return e
}

// runBaseline serves the baseline on addr until ctx ends, then shuts down
// gracefully. It prints the address it listens on to stdout.
func runBaseline(ctx context.Context, addr string, stdout io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("loadgen: baseline: %w", err)
	}
	srv := &http.Server{Handler: baselineHandler(), ReadHeaderTimeout: 5 * time.Second}
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
