package httpapi

import (
	"bytes"
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// openAPIJSON is the OpenAPI 3.1 document of every route, status and body
// of this package. The service's tests check each request they make and
// each answer they get against it, so it cannot drift from the handlers.
//
//go:embed openapi.json
var openAPIJSON []byte

// OpenAPI returns a copy of the OpenAPI 3.1 document the engine serves at
// GET /openapi.json.
func OpenAPI() []byte { return bytes.Clone(openAPIJSON) }

func handleOpenAPI(c *gin.Context) { c.Data(http.StatusOK, "application/json", openAPIJSON) }
