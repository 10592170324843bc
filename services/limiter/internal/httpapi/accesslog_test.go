package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// The log was one INFO line per request by default, allowed or not: about
// 94 MiB a minute from 4 connections. 20,000 allowed /v1/check requests now
// add no line with the defaults, and one each with --access-log all.
func TestAccessLogIsOffByDefault(t *testing.T) {
	const n = 20_000
	for _, tt := range []struct {
		name  string
		mode  httpapi.AccessLog
		lines int
	}{{"default", httpapi.AccessLog(0), 0}, {"refusals", httpapi.AccessLogRefusals, 0}, {"all", httpapi.AccessLogAll, n}} {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, openMemory(t), func(o *options) {
				o.Policies = append(o.Policies, roomy)
				o.AccessLog = tt.mode
			})
			for i := range n {
				r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"policy":"bench","key":"k`+strconv.Itoa(i%512)+`"}`))
				w := httptest.NewRecorder()
				s.engine.ServeHTTP(w, r)
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			}
			assert.Equal(t, tt.lines, strings.Count(s.logs.String(), "msg=request"), "access-log lines")
			assert.Equal(t, strings.Count(s.logs.String(), "\n"), tt.lines, "no other line")
		})
	}
}

// With --access-log refusals, each key's refusals are logged at most once a
// second; the next line says how many were folded since the previous one.
func TestRefusalsAreSampledPerKey(t *testing.T) {
	s := newServer(t, openMemory(t), func(o *options) { o.AccessLog = httpapi.AccessLogRefusals })
	requests := func() []string {
		var out []string
		for l := range strings.SplitSeq(s.logs.String(), "\n") {
			if strings.Contains(l, "msg=request") {
				out = append(out, l)
			}
		}
		return out
	}
	for i := range 53 {
		want := http.StatusOK
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		require.Equal(t, want, s.ping("a").Code)
	}
	for range 4 {
		s.ping("b")
	}
	lines := requests()
	require.Len(t, lines, 2, "one line per refused key in this second")
	assert.Contains(t, lines[0], "client="+s.refusals.Hash("key:a"))
	assert.Contains(t, lines[1], "client="+s.refusals.Hash("key:b"))
	for _, l := range lines {
		assert.Contains(t, l, "status=429")
		assert.Contains(t, l, "folded=0")
	}

	s.clock.Advance(time.Second)
	require.Equal(t, http.StatusTooManyRequests, s.ping("a").Code)
	lines = requests()
	require.Len(t, lines, 3)
	assert.Contains(t, lines[2], "client="+s.refusals.Hash("key:a"))
	assert.Contains(t, lines[2], "folded=49", "the refusals of a not logged in the previous second")
}
