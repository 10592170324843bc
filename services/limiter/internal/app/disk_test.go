package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
)

// TestFullDiskAnswers503ThenRecoversAfterPrune fills a real 16 MiB file
// system through GET /ping with distinct long client keys (a window row
// and an audit row each) until the store refuses: the request answers the
// unavailable problem, /readyz answers 503 and says the disk is full. Once
// the windows and the audit rows have expired, one run of the pruning job
// frees the room: /readyz is 200 again and /ping admits new clients,
// without a restart.
func TestFullDiskAnswers503ThenRecoversAfterPrune(t *testing.T) {
	dir := limitertest.TmpFS(t, "16m")
	clock := limitertest.NewClock(t0)
	a := newApp(t, load(t, "--sqlite-path", filepath.Join(dir, "full.db"),
		"--sqlite-disk-reserve", fmt.Sprint(6<<20), "--audit-retention", "1m"), clock)
	h := a.Handler()
	assert.Equal(t, 0.0, scrape(t, h)["tollgate_sqlite_disk_full"], "the reserve is in place")
	key := func(i int) string { return fmt.Sprintf("%06d-%s", i, strings.Repeat("k", 240)) }

	admitted := 0
	var code int
	var body map[string]any
	for ; admitted < 100_000; admitted++ {
		if code, body = ping(t, h, key(admitted)); code != http.StatusOK {
			break
		}
	}
	require.Equal(t, http.StatusServiceUnavailable, code, "the disk filled up: %v", body)
	assert.Equal(t, "urn:tollgate:problem:unavailable", body["type"])
	require.Greater(t, admitted, 1_000, "the disk held some clients first")
	status, detail := readyz(t, h)
	assert.Equal(t, http.StatusServiceUnavailable, status, "not ready while the disk is full")
	assert.Contains(t, detail, "disk full")
	assert.Equal(t, 1.0, scrape(t, h)["tollgate_sqlite_disk_full"], "the reserve is used up")

	clock.Advance(3 * time.Minute)
	pruned, err := a.Prune(context.Background())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, pruned, int64(admitted), "every window row expired")
	status, detail = readyz(t, h)
	assert.Equal(t, http.StatusOK, status, "ready again after the prune: %s", detail)
	assert.Equal(t, 0.0, scrape(t, h)["tollgate_sqlite_disk_full"], "the prune wrote the reserve again")
	for i := range 100 {
		code, body = ping(t, h, key(admitted+1+i))
		require.Equal(t, http.StatusOK, code, "a new client after the prune: %v", body)
	}
	t.Logf("admitted %d clients until the disk was full", admitted)
}

// readyz returns GET /readyz's status and its problem detail, if any.
func readyz(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var detail struct{ Detail string }
	if w.Code != http.StatusOK {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &detail), w.Body.String())
	}
	return w.Code, detail.Detail
}
