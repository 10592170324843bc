package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/openapitest"
)

// TestConcurrentChecksAreCountedExactly sends 500 concurrent /rate/check for
// one user over real HTTP to the SQLite store: exactly the limit passes.
func TestConcurrentChecksAreCountedExactly(t *testing.T) {
	const n = 500
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t))
			ts := httptest.NewServer(s.engine)
			t.Cleanup(ts.Close)
			client := &http.Client{Transport: openapitest.Service(t).Transport(func(err error) { t.Error(err) }, &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64})}
			t.Cleanup(client.CloseIdleConnections)

			got := burst(t, client, n, func() (*http.Request, error) {
				r, err := http.NewRequest(http.MethodPost, ts.URL+"/rate/check", strings.NewReader(`{"endpoint":"/api/hot"}`))
				if err == nil {
					r.Header.Set("X-User-Id", "1001")
				}
				return r, err
			})
			assert.Equal(t, map[int]int{http.StatusOK: 10, http.StatusTooManyRequests: n - 10}, got)
			require.Equal(t, 10.0, countOf(t, s.rateStatus("1001", "/api/hot")))
		})
	}
}
