package ginlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/ginlimit"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// One request per minute per client address on a Gin router.
func ExampleNew() {
	api := limiter.Policy{Name: "api", Algorithm: limiter.SlidingLog, Limit: 1, Window: time.Minute}
	lim, err := httplimit.New(memstore.New(), []limiter.Policy{api})
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(ginlimit.New(lim))
	router.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	for range 2 {
		w := httptest.NewRecorder()
		router.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("Content-Type"))
	}
	// Output:
	// 200 "api";q=1;w=60 text/plain; charset=utf-8
	// 429 "api";q=1;w=60 application/problem+json
}
