package ginlimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/ginlimit"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// TestGin serves a Gin engine over a real server on the memory and SQLite
// stores: the fields on every answer, the service's 429 problem, the
// handlers after a refusal not run, the middleware's result in the context.
func TestGin(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 45, 0, time.UTC)
	opens := map[string]func(t *testing.T) limiter.Store{
		"memory": func(*testing.T) limiter.Store { return memstore.New() },
		"sqlite": func(t *testing.T) limiter.Store {
			s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "limiter.db"))
			require.NoError(t, err)
			return s
		},
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			t.Cleanup(func() { _ = store.Close() })
			p := limiter.Policy{Name: "api", Algorithm: limiter.FixedWindow, Limit: 2, Window: time.Minute}
			lim, err := httplimit.New(store, []limiter.Policy{p}, httplimit.WithClock(fixedClock(t0)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
			require.NoError(t, err)

			var after int
			e := gin.New()
			e.Use(ginlimit.New(lim), func(c *gin.Context) { after++ })
			e.GET("/hello", func(c *gin.Context) {
				res, ok := httplimit.ResultFrom(c.Request.Context())
				require.True(t, ok)
				c.String(http.StatusOK, "hello %s", res.Key)
			})
			srv := httptest.NewServer(e)
			t.Cleanup(srv.Close)

			get := func(key string) (*http.Response, string) {
				req, err := http.NewRequest(http.MethodGet, srv.URL+"/hello", nil)
				require.NoError(t, err)
				if key != "" {
					req.Header.Set("X-Api-Key", key)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp, string(body)
			}
			for i, want := range []string{`"api";r=1;t=15`, `"api";r=0;t=15`} {
				resp, body := get("k")
				require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
				assert.Equal(t, "hello k", body)
				assert.Equal(t, `"api";q=2;w=60`, resp.Header.Get("RateLimit-Policy"))
				assert.Equal(t, want, resp.Header.Get("RateLimit"))
			}
			resp, body := get("k")
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Equal(t, "15", resp.Header.Get("Retry-After"))
			assert.Equal(t, httplimit.ProblemContentType, resp.Header.Get("Content-Type"))
			assert.JSONEq(t, `{"type":"urn:tollgate:problem:rate-limit-exceeded","title":"Too Many Requests","status":429,
				"detail":"rate limit of 2 per 1m0s exceeded for policy \"api\"","violated-policies":["api"],
				"limit":2,"remaining":0,"count":3,"reset_after":15,"retry_after":15}`, body)

			resp, _ = get("")
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "no key")
			assert.Equal(t, 2, after, "the refused requests stopped at the middleware")
		})
	}
}
