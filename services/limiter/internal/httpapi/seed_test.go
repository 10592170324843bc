package httpapi_test

import (
	"database/sql"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// openDB opens a test's SQLite file directly, to look at the seed notes'
// tables (docs/seeds.md).
func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, db.Close()) })
	return db
}

func queryInt(t testing.TB, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(q, args...).Scan(&n))
	return n
}

// TestPingSeed replays the fixed-window seed: 3 allowed, then 429 with
// Retry-After = the seconds left in the window, counted attempts, and a
// fresh budget at the next window.
func TestPingSeed(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t))
			for i := 1; i <= 3; i++ {
				w := s.ping("alice")
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				assert.Equal(t, map[string]any{
					"key": "alice", "count": float64(i), "limit": 3.0, "remaining": float64(3 - i), "reset_after": 15.0,
				}, decode(t, w))
			}

			w := s.ping("alice")
			p := assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
			assert.Equal(t, "Too Many Requests", p["title"])
			assert.Equal(t, "15", w.Header().Get("Retry-After"), "seconds left in the window at :45")
			assert.Equal(t, []any{"ping"}, p["violated-policies"])
			assert.Equal(t, 3.0, p["limit"])
			assert.Equal(t, 0.0, p["remaining"])
			assert.Equal(t, 15.0, p["retry_after"])
			assert.Equal(t, 15.0, p["reset_after"])

			s.clock.Advance(10*time.Second + 500*time.Millisecond) // :55.5
			w = s.ping("alice")
			assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
			assert.Equal(t, "5", w.Header().Get("Retry-After"), "4.5 s left, rounded up")

			assert.Equal(t, 1.0, countOf(t, s.ping("bob")), "another key has its own counter")
			assert.Equal(t, 5.0, countOf(t, s.do(req{method: http.MethodGet, target: "/status?key=alice"})),
				"the fixed window counts every attempt, refused ones too")

			s.clock.Advance(4500 * time.Millisecond) // the next window starts
			w = s.ping("alice")
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			assert.Equal(t, 1.0, decode(t, w)["count"])
			assert.Equal(t, 60.0, decode(t, w)["reset_after"])
		})
	}
}

func TestPingWritesOneAuditRowPerAllowedCall(t *testing.T) {
	path := sqliteDB(t)
	s := newServer(t, openSQLiteAt(t, path))
	for range 5 {
		s.ping("carol")
	}
	db := openDB(t, path)
	assert.Equal(t, int64(3), queryInt(t, db, `SELECT COUNT(*) FROM api_calls WHERE key = ? AND endpoint = '/ping'`, "key:carol"), "the audit row names the key in its source's namespace")
}

func TestStatusDoesNotIncrement(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t))
			status := func() map[string]any {
				w := s.do(req{method: http.MethodGet, target: "/status?key=dave"})
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				return decode(t, w)
			}
			for range 3 {
				assert.Equal(t, 0.0, status()["count"])
			}
			require.Equal(t, http.StatusOK, s.ping("dave").Code)
			for range 3 {
				assert.Equal(t, map[string]any{
					"key": "dave", "count": 1.0, "limit": 3.0, "remaining": 2.0,
					"window_start": "2026-01-01T00:00:00Z", "reset_after": 15.0,
				}, status())
			}
			assert.Equal(t, 2.0, countOf(t, s.ping("dave")), "/status took nothing from the budget")

			for _, target := range []string{"/status", "/status?key=", "/status?key=" + strings.Repeat("k", 1025), "/status?key=%FF"} {
				assertProblem(t, s.do(req{method: http.MethodGet, target: target}), http.StatusUnprocessableEntity, "validation-failed")
			}
		})
	}
}

// TestSlidingSeedStatusTable is seed 001's table of status codes (docs/seeds.md),
// one row per line of the table.
func TestSlidingSeedStatusTable(t *testing.T) {
	body := `{"endpoint":"/api/orders"}`
	user := map[string]string{"X-User-Id": "42"}
	admin := map[string]string{"X-Admin-Key": adminKey}
	tests := []struct {
		name   string
		before int // checks made by user 42 on /api/orders first
		r      req
		want   int
		slug   string
	}{
		{"request allowed", 0, req{method: "POST", target: "/rate/check", body: body, header: user}, 200, ""},
		{"status read", 1, req{method: "GET", target: "/rate/status?endpoint=/api/orders", header: user}, 200, ""},
		{"counter reset", 1, req{method: "DELETE", target: "/rate/reset/42", header: admin}, 200, ""},
		{"no X-User-Id", 0, req{method: "POST", target: "/rate/check", body: body}, 400, "bad-request"},
		{"no body", 0, req{method: "POST", target: "/rate/check", header: user}, 400, "bad-request"},
		{"empty endpoint", 0, req{method: "POST", target: "/rate/check", body: `{"endpoint":""}`, header: user}, 422, "validation-failed"},
		{"missing endpoint", 0, req{method: "POST", target: "/rate/check", body: `{}`, header: user}, 422, "validation-failed"},
		{"endpoint too long", 0, req{method: "POST", target: "/rate/check", body: `{"endpoint":"` + strings.Repeat("e", 129) + `"}`, header: user}, 422, "validation-failed"},
		{"no admin key", 0, req{method: "DELETE", target: "/rate/reset/42"}, 403, "forbidden"},
		{"wrong admin key", 0, req{method: "DELETE", target: "/rate/reset/42", header: map[string]string{"X-Admin-Key": "nope"}}, 403, "forbidden"},
		{"invalid userId in path", 0, req{method: "DELETE", target: "/rate/reset/x1", header: admin}, 404, "not-found"},
		{"over the limit", 10, req{method: "POST", target: "/rate/check", body: body, header: user}, 429, "rate-limit-exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, openSQLite(t))
			for range tt.before {
				require.Equal(t, http.StatusOK, s.check("42", "/api/orders").Code)
			}
			w := s.do(tt.r)
			if tt.slug == "" {
				require.Equal(t, tt.want, w.Code, w.Body.String())
				assert.Equal(t, "application/json; charset=utf-8", w.Header().Get("Content-Type"))
				return
			}
			assertProblem(t, w, tt.want, tt.slug)
		})
	}
}

// TestAttackCases replays ATK-01..ATK-12 of the sliding seed. A victim (user
// 42 on /api/orders) has made 3 checks before each attack; no attack may
// change the victim's counter, and each gets the status of seed 001's
// table (docs/seeds.md).
func TestAttackCases(t *testing.T) {
	user := map[string]string{"X-User-Id": "42"}
	admin := map[string]string{"X-Admin-Key": adminKey}
	const injection = `'; DROP TABLE rate_events; --`
	tests := []struct {
		id   string
		r    req
		want int
		slug string
	}{
		{"ATK-01", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/api/orders"}`}, 400, "bad-request"},
		{"ATK-02", req{method: "POST", target: "/rate/check", body: `{"endpoint":""}`, header: user}, 422, "validation-failed"},
		{"ATK-03", req{method: "POST", target: "/rate/check", body: `{"endpoint":"` + strings.Repeat("a", 129) + `"}`, header: user}, 422, "validation-failed"},
		{"ATK-04", req{method: "POST", target: "/rate/check", body: `{"endpoint":"` + injection + `"}`, header: user}, 200, ""},
		{"ATK-05", req{method: "DELETE", target: "/rate/reset/42"}, 403, "forbidden"},
		{"ATK-06", req{method: "DELETE", target: "/rate/reset/42", header: map[string]string{"X-Admin-Key": adminKey + "x"}}, 403, "forbidden"},
		{"ATK-07", req{method: "DELETE", target: "/rate/reset/-1", header: admin}, 404, "not-found"},
		{"ATK-08", req{method: "DELETE", target: "/rate/reset/0", header: admin}, 404, "not-found"},
		{"ATK-09", req{method: "DELETE", target: "/rate/reset/abc", header: admin}, 404, "not-found"},
		{"ATK-10", req{method: "GET", target: "/rate/status", header: user}, 422, "validation-failed"},
		{"ATK-11", req{method: "POST", target: "/rate/check", header: user}, 400, "bad-request"},
		{"ATK-12", req{method: "POST", target: "/rate/check", body: `{"path":"/api/orders"}`, header: user}, 422, "validation-failed"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			path := sqliteDB(t)
			s := newServer(t, openSQLiteAt(t, path))
			for range 3 {
				require.Equal(t, http.StatusOK, s.check("42", "/api/orders").Code)
			}

			w := s.do(tt.r)
			if tt.slug != "" {
				assertProblem(t, w, tt.want, tt.slug)
			} else {
				require.Equal(t, tt.want, w.Code, w.Body.String())
			}

			assert.Equal(t, 3.0, countOf(t, s.rateStatus("42", "/api/orders")), "the victim's counter is untouched")
			if tt.id != "ATK-04" {
				return
			}
			// The injection is stored as data, and every table is intact.
			assert.Equal(t, injection, decode(t, w)["endpoint"])
			assert.Equal(t, 1.0, countOf(t, s.rateStatus("42", injection)))
			db := openDB(t, path)
			for _, table := range []string{"rate_events", "rate_limit_windows", "api_calls"} {
				assert.Equal(t, int64(1), queryInt(t, db, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table), table)
			}
			assert.Equal(t, int64(1), queryInt(t, db, `SELECT COUNT(*) FROM rate_events WHERE endpoint = ?`, injection))
			assert.Equal(t, int64(4), queryInt(t, db, `SELECT COUNT(*) FROM rate_events`))
		})
	}
}

func TestSlidingSeedLimitAndWindow(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t))
			for i := 1; i <= 10; i++ {
				w := s.check("7", "/api/search")
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				assert.Equal(t, map[string]any{
					"result": "ok", "user_id": 7.0, "endpoint": "/api/search",
					"count": float64(i), "limit": 10.0, "remaining": float64(10 - i), "reset_after": 60.0,
				}, decode(t, w))
				s.clock.Advance(time.Second)
			}
			// t0+10s: the first event (t0) leaves the window at t0+60s.
			w := s.check("7", "/api/search")
			p := assertProblem(t, w, http.StatusTooManyRequests, "rate-limit-exceeded")
			assert.Equal(t, "50", w.Header().Get("Retry-After"))
			assert.Equal(t, []any{"check"}, p["violated-policies"])
			assert.Equal(t, 10.0, countOf(t, s.rateStatus("7", "/api/search")), "a refused check is not recorded")
			assert.Equal(t, 1.0, countOf(t, s.check("7", "/api/other")), "each endpoint has its own window")
			assert.Equal(t, 1.0, countOf(t, s.check("8", "/api/search")), "each user has its own window")

			s.clock.Advance(50 * time.Second) // t0+60s: the first event has left
			assert.Equal(t, 10.0, countOf(t, s.check("007", "/api/search")), "007 is user 7")

			st := s.rateStatus("7", "/api/search")
			require.Equal(t, http.StatusOK, st.Code)
			assert.Equal(t, map[string]any{
				"user_id": 7.0, "endpoint": "/api/search", "count": 10.0, "limit": 10.0,
				"remaining": 0.0, "window_seconds": 60.0, "reset_after": 60.0,
			}, decode(t, st))
		})
	}
}

func TestRateInputValidation(t *testing.T) {
	longRunes := strings.Repeat("é", 128) // 128 characters, 256 bytes
	tests := []struct {
		name string
		r    req
		want int
	}{
		{"user id with leading zeros", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "0042"}}, 200},
		{"largest int64 user id", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "9223372036854775807"}}, 200},
		{"user id overflow", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "9223372036854775808"}}, 400},
		{"user id zero", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "000"}}, 400},
		{"user id negative", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "-5"}}, 400},
		{"user id plus sign", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "+5"}}, 400},
		{"user id with space", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "5 "}}, 400},
		{"user id unicode digit", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": "٥"}}, 400},
		{"user id empty", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"}`, header: map[string]string{"X-User-Id": ""}}, 400},
		{"user id before body", req{method: "POST", target: "/rate/check", header: map[string]string{"X-User-Id": "x"}}, 400},
		{"body unparsable", req{method: "POST", target: "/rate/check", body: `{"endpoint":`, header: map[string]string{"X-User-Id": "1"}}, 400},
		{"body with trailing garbage", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a"} {}`, header: map[string]string{"X-User-Id": "1"}}, 400},
		{"body whitespace only", req{method: "POST", target: "/rate/check", body: " \n\t", header: map[string]string{"X-User-Id": "1"}}, 400},
		{"body an array", req{method: "POST", target: "/rate/check", body: `["/a"]`, header: map[string]string{"X-User-Id": "1"}}, 400},
		{"body null", req{method: "POST", target: "/rate/check", body: `null`, header: map[string]string{"X-User-Id": "1"}}, 400},
		{"body over 64 KiB", req{method: "POST", target: "/rate/check", body: `{"endpoint":"/a","pad":"` + strings.Repeat("p", httpapi.MaxBodyBytes) + `"}`, header: map[string]string{"X-User-Id": "1"}}, 413},
		{"endpoint a number", req{method: "POST", target: "/rate/check", body: `{"endpoint":42}`, header: map[string]string{"X-User-Id": "1"}}, 422},
		{"endpoint null", req{method: "POST", target: "/rate/check", body: `{"endpoint":null}`, header: map[string]string{"X-User-Id": "1"}}, 422},
		{"endpoint 128 characters", req{method: "POST", target: "/rate/check", body: `{"endpoint":"` + longRunes + `"}`, header: map[string]string{"X-User-Id": "1"}}, 200},
		{"endpoint 129 characters", req{method: "POST", target: "/rate/check", body: `{"endpoint":"` + longRunes + `e"}`, header: map[string]string{"X-User-Id": "1"}}, 422},
		{"endpoint invalid UTF-8", req{method: "POST", target: "/rate/check", body: "{\"endpoint\":\"a\xffb\"}", header: map[string]string{"X-User-Id": "1"}}, 422},
		{"endpoint lone surrogate", req{method: "POST", target: "/rate/check", body: `{"endpoint":"a\udc00"}`, header: map[string]string{"X-User-Id": "1"}}, 422},
		{"status empty endpoint", req{method: "GET", target: "/rate/status?endpoint=", header: map[string]string{"X-User-Id": "1"}}, 422},
		{"status endpoint too long", req{method: "GET", target: "/rate/status?endpoint=" + strings.Repeat("x", 129), header: map[string]string{"X-User-Id": "1"}}, 422},
		{"status no user", req{method: "GET", target: "/rate/status?endpoint=/a"}, 400},
		{"reset empty endpoint", req{method: "DELETE", target: "/rate/reset/1?endpoint=", header: map[string]string{"X-Admin-Key": adminKey}}, 422},
		{"reset admin before path", req{method: "DELETE", target: "/rate/reset/abc"}, 403},
		{"reset overflowing id", req{method: "DELETE", target: "/rate/reset/99999999999999999999", header: map[string]string{"X-Admin-Key": adminKey}}, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, openMemory(t))
			w := s.do(tt.r)
			require.Equal(t, tt.want, w.Code, w.Body.String())
			if tt.want != http.StatusOK {
				assert.Equal(t, httplimit.ProblemContentType, w.Header().Get("Content-Type"))
			}
		})
	}
}

func TestRepeatedIdentityHeadersAreRefused(t *testing.T) {
	s := newServer(t, openMemory(t))
	r := httptestRequest(http.MethodPost, "/rate/check", `{"endpoint":"/a"}`)
	r.Header.Add("X-User-Id", "1")
	r.Header.Add("X-User-Id", "2")
	assertProblem(t, serve(s, r), http.StatusBadRequest, "bad-request")

	r = httptestRequest(http.MethodGet, "/ping", "")
	r.Header.Add("X-Client-Key", "a")
	r.Header.Add("X-Client-Key", "b")
	assertProblem(t, serve(s, r), http.StatusBadRequest, "bad-request")

	r = httptestRequest(http.MethodDelete, "/rate/reset/1", "")
	r.Header.Add("X-Admin-Key", adminKey)
	r.Header.Add("X-Admin-Key", "other")
	assertProblem(t, serve(s, r), http.StatusForbidden, "forbidden")
}

func TestReset(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t))
			for _, c := range []struct {
				user, endpoint string
				n              int
			}{{"7", "/a", 2}, {"7", "/b", 3}, {"8", "/a", 1}} {
				for range c.n {
					require.Equal(t, http.StatusOK, s.check(c.user, c.endpoint).Code)
				}
			}
			reset := func(target string) map[string]any {
				w := s.do(req{method: http.MethodDelete, target: target, header: map[string]string{"X-Admin-Key": adminKey}})
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				return decode(t, w)
			}

			assert.Equal(t, map[string]any{"user_id": 7.0, "endpoint": "/a", "deleted": 2.0}, reset("/rate/reset/7?endpoint="+url.QueryEscape("/a")))
			assert.Equal(t, 0.0, countOf(t, s.rateStatus("7", "/a")))
			assert.Equal(t, 3.0, countOf(t, s.rateStatus("7", "/b")), "another endpoint is kept")

			assert.Equal(t, map[string]any{"user_id": 7.0, "endpoint": nil, "deleted": 3.0}, reset("/rate/reset/007"))
			assert.Equal(t, 0.0, countOf(t, s.rateStatus("7", "/b")))
			assert.Equal(t, 1.0, countOf(t, s.rateStatus("8", "/a")), "another user is kept")
			assert.Equal(t, map[string]any{"user_id": 7.0, "endpoint": nil, "deleted": 0.0}, reset("/rate/reset/7"))
		})
	}
}

// deleted counts units, not stored records: 7 checks under a fixed_window
// policy are one window row of count 7.
func TestResetCountsUnits(t *testing.T) {
	windows := limiter.Policy{Name: "windows", Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Minute}
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := newServer(t, sk.open(t), func(o *options) {
				o.Policies = append(o.Policies, windows)
				o.CheckRoute = []string{"windows"}
			})
			for range 7 {
				require.Equal(t, http.StatusOK, s.check("7", "/a").Code)
			}
			w := s.do(req{method: http.MethodDelete, target: "/rate/reset/7", header: map[string]string{"X-Admin-Key": adminKey}})
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			assert.Equal(t, map[string]any{"user_id": 7.0, "endpoint": nil, "deleted": 7.0}, decode(t, w))
			assert.Equal(t, 0.0, countOf(t, s.rateStatus("7", "/a")))
		})
	}
}

func TestResetWithoutConfiguredAdminKeyIsAlwaysForbidden(t *testing.T) {
	s := newServer(t, openMemory(t), func(o *options) { o.AdminKey = "" })
	require.Equal(t, http.StatusOK, s.check("9", "/a").Code)
	for _, key := range []string{"", adminKey, " "} {
		w := s.do(req{method: http.MethodDelete, target: "/rate/reset/9", header: map[string]string{"X-Admin-Key": key}})
		assertProblem(t, w, http.StatusForbidden, "forbidden")
	}
	assert.Equal(t, 1.0, countOf(t, s.rateStatus("9", "/a")))
}
