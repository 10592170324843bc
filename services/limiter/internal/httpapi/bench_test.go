package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// BenchmarkV1Check measures POST /v1/check through the Gin engine (recorder,
// no network) per store, over 1024 distinct keys of a policy that never
// refuses, so every iteration is a full allowed decision.
func BenchmarkV1Check(b *testing.B) {
	roomy := limiter.Policy{Name: "bench", Algorithm: limiter.FixedWindow, Limit: limiter.MaxLimit, Window: time.Hour}
	const keys = 1024
	bodies := make([]string, keys)
	for i := range bodies {
		bodies[i] = `{"policy":"bench","key":"k` + strconv.Itoa(i) + `"}`
	}
	for _, sk := range stores {
		b.Run(sk.name, func(b *testing.B) {
			s := newServer(b, sk.open(b), func(o *options) {
				o.Policies = append(o.Policies, roomy)
				o.Logger = nil // discard: measure the engine, not the log writer
			})
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
		})
	}
}
