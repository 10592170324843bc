package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReloadNeverMixesTwoSnapshotsInOneAnswer reloads between two
// configurations (every limit 1,000,000, then every limit 2,000,000: the
// YAML's policies and the Envoy folder's rule) while 500 goroutines each
// ask /ping, /v1/check and POST /json. Every answer must come from one
// configuration: the limit its body reports is the one its RateLimit-Policy
// and X-RateLimit-Limit fields announce.
func TestReloadNeverMixesTwoSnapshotsInOneAnswer(t *testing.T) {
	const requests = 500
	limits := [2]int{1_000_000, 2_000_000}
	dir := t.TempDir()
	write := func(gen int) {
		n := limits[gen%2]
		rules := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", n)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(rules), 0o600))
	}
	yaml := func(gen int) string {
		n := limits[gen%2]
		return fmt.Sprintf("policies:\n  ping: {limit: %d}\n  api: {algorithm: sliding_window, limit: %d, window: 1m}\n", n, n)
	}
	write(0)
	f := newReloadFixture(t, yaml(0), "--envoy-config", dir, "--envoy-response-headers")
	h := f.app.Handler()

	// The reloader alternates the two configurations until every request
	// has answered; the requests start once the first reload is done.
	var done atomic.Bool
	firstReload := make(chan struct{})
	var reloads int
	var reloader sync.WaitGroup
	reloader.Go(func() {
		for gen := 1; gen == 1 || !done.Load(); gen++ {
			write(gen)
			f.write(t, yaml(gen))
			if err := f.app.Reload(context.Background()); err != nil {
				t.Errorf("reload %d: %v", gen, err)
				return
			}
			reloads++
			if gen == 1 {
				close(firstReload)
			}
		}
	})

	var seen [2]atomic.Int64 // answers per configuration
	check := func(what string, w *httptest.ResponseRecorder, bodyLimit int) {
		if w.Code != http.StatusOK {
			t.Errorf("%s: status %d: %s", what, w.Code, w.Body.String())
			return
		}
		mixed := limitInPolicyField(w.Header().Get("RateLimit-Policy")) != bodyLimit
		if what != "/json" { // Envoy's answer has no X-RateLimit-* fields
			mixed = mixed || w.Header().Get("X-RateLimit-Limit") != strconv.Itoa(bodyLimit)
		}
		if mixed {
			t.Errorf("%s: the body says limit %d, RateLimit-Policy %q, X-RateLimit-Limit %q: two configurations in one answer",
				what, bodyLimit, w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Limit"))
			return
		}
		switch bodyLimit {
		case limits[0]:
			seen[0].Add(1)
		case limits[1]:
			seen[1].Add(1)
		default:
			t.Errorf("%s: limit %d is neither configuration's", what, bodyLimit)
		}
	}
	<-firstReload
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			key := "race-" + strconv.Itoa(i)

			w := serveOne(h, http.MethodGet, "/ping", "", "X-Client-Key", key)
			check("/ping", w, int(decodeNumber(t, w, "limit")))

			w = serveOne(h, http.MethodPost, "/v1/check", `{"policy":"api","key":"`+key+`"}`)
			check("/v1/check", w, int(decodeNumber(t, w, "limit")))

			w = serveOne(h, http.MethodPost, "/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"`+key+`"}]}]}`)
			var resp struct {
				Statuses []struct {
					CurrentLimit struct {
						RequestsPerUnit int `json:"requestsPerUnit"`
					} `json:"currentLimit"`
				} `json:"statuses"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || len(resp.Statuses) != 1 {
				t.Errorf("/json: %v: %s", err, w.Body.String())
				return
			}
			check("/json", w, resp.Statuses[0].CurrentLimit.RequestsPerUnit)
		})
	}
	wg.Wait()
	done.Store(true)
	reloader.Wait()
	assert.Equal(t, int64(3*requests), seen[0].Load()+seen[1].Load(), "every answer is one configuration's")
	t.Logf("%d reloads; answers per configuration: %d and %d", reloads, seen[0].Load(), seen[1].Load())
}

// serveOne sends one request through h; header holds name, value pairs.
func serveOne(h http.Handler, method, target, body string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// decodeNumber reads the number member name of a JSON answer; 0 when absent.
func decodeNumber(t *testing.T, w *httptest.ResponseRecorder, name string) float64 {
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Errorf("not JSON: %v: %s", err, w.Body.String())
		return 0
	}
	n, _ := body[name].(float64)
	return n
}

// limitInPolicyField returns q of the only item of a RateLimit-Policy value
// ("name";q=5;w=60); -1 when there is not exactly one item.
func limitInPolicyField(v string) int {
	if v == "" || strings.Contains(v, ", ") {
		return -1
	}
	for param := range strings.SplitSeq(v, ";") {
		if q, ok := strings.CutPrefix(param, "q="); ok {
			n, err := strconv.Atoi(q)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
