// Package yamlwalk names the library's YAML walker
// (github.com/tollgate/tollgate/pkg/limiter/yamlwalk) for the service's
// readers that still import it by this path (internal/envoy); the
// configuration reads through the library's package directly.
package yamlwalk

import "github.com/tollgate/tollgate/pkg/limiter/yamlwalk"

// Error is yamlwalk.Error.
type Error = yamlwalk.Error

// Handler is yamlwalk.Handler.
type Handler = yamlwalk.Handler

// ErrEmpty is yamlwalk.ErrEmpty.
var ErrEmpty = yamlwalk.ErrEmpty

// The walker's functions.
var (
	OneDocument = yamlwalk.OneDocument
	IsNull      = yamlwalk.IsNull
	Index       = yamlwalk.Index
	Mapping     = yamlwalk.Mapping
	Fields      = yamlwalk.Fields
	Decode      = yamlwalk.Decode
)
