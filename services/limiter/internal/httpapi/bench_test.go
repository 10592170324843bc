package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// roomy is a policy that never refuses, so that every iteration of a
// benchmark is a full allowed decision.
var roomy = limiter.Policy{Name: "bench", Algorithm: limiter.FixedWindow, Limit: limiter.MaxLimit, Window: time.Hour}

// BenchmarkV1Check measures POST /v1/check through the Gin engine (recorder,
// no network) per store, over 1024 distinct keys of a policy that never
// refuses.
func BenchmarkV1Check(b *testing.B) {
	for _, sk := range stores {
		b.Run(sk.name, func(b *testing.B) {
			benchV1(b, newServer(b, sk.open(b), func(o *options) {
				o.Policies = append(o.Policies, roomy)
				o.Logger = nil // discard: measure the engine, not the log writer
			}))
		})
	}
}

// BenchmarkAccessLog measures POST /v1/check on the memory store with the
// old default, a text line per request (to io.Discard: the cost of making
// the line, not of the disk), and with the new default, --access-log off.
func BenchmarkAccessLog(b *testing.B) {
	for _, mode := range []struct {
		name string
		log  httpapi.AccessLog
	}{{"all", httpapi.AccessLogAll}, {"off", httpapi.AccessLogOff}} {
		b.Run(mode.name, func(b *testing.B) {
			benchV1(b, newServer(b, openMemory(b), func(o *options) {
				o.Policies = append(o.Policies, roomy)
				o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
				o.AccessLog = mode.log
			}))
		})
	}
}

// benchV1 sends POST /v1/check for roomy over 1024 distinct keys to s.
func benchV1(b *testing.B, s *server) {
	const keys = 1024
	bodies := make([]string, keys)
	for i := range bodies {
		bodies[i] = `{"policy":"bench","key":"k` + strconv.Itoa(i) + `"}`
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(bodies[i%keys]))
		w := httptest.NewRecorder()
		s.engine.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
		i++
	}
}
