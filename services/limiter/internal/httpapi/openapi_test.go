package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
	"github.com/tollgate/tollgate/services/limiter/internal/openapitest"
)

// GET and HEAD /openapi.json serve the document the tests check against.
func TestOpenAPIIsServed(t *testing.T) {
	s := newServer(t, openMemory(t))
	w := s.do(req{method: http.MethodGet, target: "/openapi.json"})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Equal(t, httpapi.OpenAPI(), w.Body.Bytes())
	assert.Equal(t, http.StatusOK, s.do(req{method: http.MethodHead, target: "/openapi.json"}).Code)
}

// The document describes exactly the routes the engine serves: a route added
// without its description, or a description of a route that went, fails.
// POST /json is served only with Envoy rules: the app tests exercise it.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	s := newServer(t, openMemory(t))
	var served []string
	for _, r := range s.engine.Routes() {
		path := r.Path
		if i := strings.Index(path, "/:"); i >= 0 { // Gin's /:userId is OpenAPI's /{userId}
			path = path[:i+1] + "{" + path[i+2:] + "}"
		}
		served = append(served, r.Method+" "+path)
	}
	served = append(served, "POST /json")
	slices.Sort(served)
	assert.Equal(t, served, openapitest.Service(t).Operations())
}
