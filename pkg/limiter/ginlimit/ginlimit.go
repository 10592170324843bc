// Package ginlimit adapts httplimit's middleware to Gin. It is a module of
// its own so that only Gin users depend on Gin.
//
//	lim, err := httplimit.New(store, policies, httplimit.WithKey(...))
//	...
//	router.Use(ginlimit.New(lim))
//
// Requests refused by the middleware are aborted (the handlers after it do not
// run); the others go on with the middleware's [httplimit.Result] in
// c.Request's context.
//
// Keys come from the http.Request: httplimit.ClientAddr with your trusted
// proxies rather than c.ClientIP (whose trust is the engine's setting, by
// default every proxy), and for a user id, a value your authentication
// middleware put in c.Request's context (httplimit.FromContext), not one set
// with c.Set.
package ginlimit

import (
	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

// New returns a gin.HandlerFunc that runs m before the rest of the chain.
func New(m *httplimit.Middleware) gin.HandlerFunc {
	return func(c *gin.Context) {
		r, ok := m.Limit(c.Writer, c.Request)
		if !ok {
			c.Abort()
			return
		}
		c.Request = r
		c.Next()
	}
}
