package httpapi_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
)

// A POST /json whose client went away before the store answered is 503,
// "the request was cancelled", and no store error in the log: Decide's
// error keeps the cancellation in its chain. (The app tests exercise POST
// /json; this one needs the logs.)
func TestEnvoyJSONClientGone(t *testing.T) {
	rules, err := envoyrules.LoadDir(filepath.Join("..", "envoyrules", "testdata", "rules"), envoyrules.Options{})
	require.NoError(t, err)
	// SQLite's calls honour the context; the memory store decides without
	// looking at it.
	s := newServer(t, openSQLite(t), func(o *options) { o.Envoy = rules })
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"customer","value":"gone"}]}]}`
	r := httptestRequest(http.MethodPost, "/json", body)
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	w := serve(s, r.WithContext(ctx))
	assertProblem(t, w, http.StatusServiceUnavailable, "unavailable")
	assert.Contains(t, w.Body.String(), "the request was cancelled")
	assert.NotContains(t, s.logs.String(), "store error")

	w = s.do(req{method: http.MethodPost, target: "/json", body: body})
	assert.Equal(t, http.StatusOK, w.Code, "the engine answers the next request: %s", w.Body.String())
}
