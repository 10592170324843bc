package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

// TestClientChosenValuesCreateNoSeries sends, over TLS on every listener,
// values a client chooses freely: unknown paths and methods, forward-auth
// questions about any path, host and key, unknown /v1/check policies,
// Envoy domains, descriptors and limit overrides over gRPC and POST /json,
// and failed handshakes naming any server. A second round of 200 new
// values of each creates no series the first round of 20 did not: no
// label takes a client's value.
func TestClientChosenValuesCreateNoSeries(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	files := tlstest.Files(t, ca.Server(t, "server"), nil)
	cfg := filepath.Join(t.TempDir(), "tollgate.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`policies:
  api_gw: { algorithm: sliding_log, limit: 5, window: 60s }
gateway:
  - match: { path_prefix: /api/ }
    policies: [api_gw]
    key: header:X-Api-Key
`), 0o600))
	l := serveListeners(t, "--tls-cert", files.Cert, "--tls-key", files.Key, "--config", cfg)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(ca, nil)}}
	rls := rlsv3.NewRateLimitServiceClient(grpcConn(t, l.grpc, ca, nil))
	send := func(method, url, body string, header ...string) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		require.NoError(t, err, "%s %s", method, url)
		require.NoError(t, resp.Body.Close())
	}
	round := func(r, n int) map[string]float64 {
		for i := range n {
			v := fmt.Sprintf("v%d-%d", r, i)
			send(http.MethodGet, "https://"+l.public+"/"+v, "")
			send("M"+strings.ReplaceAll(v, "-", ""), "https://"+l.public+"/ping", "")
			send(http.MethodGet, "https://"+l.internal+"/v1/forward-auth", "",
				"X-Forwarded-Uri", "/api/"+v, "X-Forwarded-Host", v+".test", "X-Api-Key", v)
			send(http.MethodGet, "https://"+l.internal+"/v1/forward-auth", "", "X-Forwarded-Uri", "/"+v, "X-Forwarded-Method", "M"+strings.ReplaceAll(v, "-", ""))
			send(http.MethodPost, "https://"+l.internal+"/v1/check", fmt.Sprintf(`{"policy":%q,"key":%q}`, v, v), "Content-Type", "application/json")
			send(http.MethodPost, "https://"+l.internal+"/json", fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, v, v, v))
			for _, domain := range []string{v, "edge"} {
				_, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "customer", Value: v}, {Key: v, Value: v}},
					Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE},
				}}})
				require.NoError(t, err)
			}
			// A handshake naming any server, refused by the client (it
			// does not trust the server's CA).
			_, err := tls.Dial("tcp", l.public, &tls.Config{ServerName: v + ".test"})
			require.Error(t, err)
		}
		return scrape(t, l.app.InternalHandler())
	}
	scrape(t, l.app.InternalHandler()) // so that /metrics' own series exists in both
	first := round(1, 20)
	second := round(2, 200)
	assert.Equal(t, slices.Sorted(maps.Keys(first)), slices.Sorted(maps.Keys(second)), "series after 20 and after 220 client-chosen values")
	assert.Positive(t, second[`tollgate_tls_handshake_errors_total{listener="addr"}`], "the handshakes were counted")
}
