package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// discard is a ResponseWriter that keeps the header fields and drops the
// rest; the benchmark clears its fields before each request.
type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// BenchmarkLimit measures Middleware.Limit on the memory store with two
// enforcing policies and a shadow that never refuse, over 1024 client
// addresses: the middleware's own work per request (key, evaluation of the
// policies in order, fields).
func BenchmarkLimit(b *testing.B) {
	store := memstore.New()
	b.Cleanup(func() { _ = store.Close() })
	m, err := httplimit.New(store, []limiter.Policy{
		{Name: "minute", Algorithm: limiter.FixedWindow, Limit: limiter.MaxLimit, Window: time.Minute},
		{Name: "hour", Algorithm: limiter.SlidingWindow, Limit: limiter.MaxLimit, Window: time.Hour},
		{Name: "trial", Algorithm: limiter.TokenBucket, Limit: limiter.MaxLimit, Window: time.Hour, Shadow: true},
	}, httplimit.WithClock(fixedClock(t0)))
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1234"
	}
	w := discard{h: http.Header{}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		clear(w.h)
		if _, ok := m.Limit(w, reqs[i%len(reqs)]); !ok {
			b.Fatal("refused")
		}
		i++
	}
}
