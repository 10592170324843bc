package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

			codes := make(chan int, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					<-start
					r, err := http.NewRequest(http.MethodPost, ts.URL+"/rate/check", strings.NewReader(`{"endpoint":"/api/hot"}`))
					if !assert.NoError(t, err) {
						return
					}
					r.Header.Set("X-User-Id", "1001")
					resp, err := client.Do(r)
					if !assert.NoError(t, err) {
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					codes <- resp.StatusCode
				})
			}
			close(start)
			wg.Wait()
			close(codes)

			got := map[int]int{}
			for c := range codes {
				got[c]++
			}
			assert.Equal(t, map[int]int{http.StatusOK: 10, http.StatusTooManyRequests: n - 10}, got)
			require.Equal(t, 10.0, countOf(t, s.rateStatus("1001", "/api/hot")))
		})
	}
}
