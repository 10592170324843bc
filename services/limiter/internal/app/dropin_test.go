package app

// Issue #16: Tollgate behaves as envoyproxy/ratelimit wherever that
// service's own tests look. Every scenario here runs against the real gRPC
// server and POST /json at once (see dropIn) on configuration folders
// written by the tests.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// dropIn is two services built from the same arguments on one fake clock,
// each with its own memory store: one is asked over gRPC, the other on
// POST /json. Every request goes to both, so each counts it once, and the
// two answers must be equal.
type dropIn struct {
	grpc  rlsv3.RateLimitServiceClient
	json  *httptest.Server
	clock *limitertest.Clock
}

func newDropIn(t *testing.T, args ...string) *dropIn {
	t.Helper()
	clock := limitertest.NewClock(t0)
	args = append([]string{"--store=memory", "--grpc-addr=127.0.0.1:0"}, args...)
	viaGRPC := newApp(t, load(t, args...), clock)
	viaJSON := newApp(t, load(t, args...), clock)
	srv := httptest.NewServer(viaJSON.Handler())
	t.Cleanup(srv.Close)
	return &dropIn{grpc: rlsv3.NewRateLimitServiceClient(grpcClient(t, viaGRPC)), json: srv, clock: clock}
}

// ask sends req to both services, requires the same answer from each (and
// 200 or 429 on /json as the overall code says) and returns it.
func (d *dropIn) ask(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	viaGRPC, err := d.grpc.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	body, err := protojson.Marshal(req)
	require.NoError(t, err)
	resp, data := postJSON(t, d.json, string(body))
	var viaJSON rlsv3.RateLimitResponse
	require.NoError(t, protojson.Unmarshal(data, &viaJSON), string(data))
	require.True(t, proto.Equal(viaGRPC, &viaJSON), "gRPC and /json differ:\ngrpc %v\njson %v", viaGRPC, &viaJSON)
	want := http.StatusOK
	if viaGRPC.GetOverallCode() == over {
		want = http.StatusTooManyRequests
	}
	assert.Equal(t, want, resp.StatusCode)
	return viaGRPC
}

// codes returns the overall code followed by each descriptor's.
func codesOf(resp *rlsv3.RateLimitResponse) []rlsv3.RateLimitResponse_Code {
	out := []rlsv3.RateLimitResponse_Code{resp.GetOverallCode()}
	for _, s := range resp.GetStatuses() {
		out = append(out, s.GetCode())
	}
	return out
}

// envoyFolder writes files (name -> YAML) into a new folder and returns it.
func envoyFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	return dir
}

// req builds a request of one descriptor per list of key, value pairs.
func req(domain string, descriptors ...[]string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: domain}
	for _, kv := range descriptors {
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r
}

// limitOf is the requests_per_unit a descriptor's status reports, 0 when none.
func limitOf(resp *rlsv3.RateLimitResponse, i int) uint32 {
	return resp.GetStatuses()[i].GetCurrentLimit().GetRequestsPerUnit()
}

// Point 2: MERGE_DOMAIN_CONFIG.
func TestDropInMergeDomainConfig(t *testing.T) {
	dir := envoyFolder(t, map[string]string{
		"shop-users.yaml": "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: path\n    value: /cart*\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"shop-paths.yaml": "domain: shop\ndescriptors:\n  - key: path\n    value: /c*\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: path\n    value: /checkout\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
	})

	_, err := New(context.Background(), load(t, "--store=memory", "--envoy-config", dir))
	require.ErrorIs(t, err, config.ErrInvalid, "off by default: a domain in two files is refused")
	assert.Contains(t, err.Error(), `domain: "shop" is already defined in `+filepath.Join(dir, "shop-paths.yaml"))

	d := newDropIn(t, "--envoy-config", dir, "--envoy-merge-domain-config")
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		assert.Equal(t, want, d.ask(t, req("shop", []string{"user", "u1"})).GetOverallCode(), "user request %d", i+1)
	}
	assert.Equal(t, uint32(3), limitOf(d.ask(t, req("shop", []string{"path", "/checkout"})), 0), "from the other file")
	// shop-paths.yaml is read first (name order), so its /c* comes before
	// shop-users.yaml's /cart* among the wildcards.
	assert.Equal(t, uint32(5), limitOf(d.ask(t, req("shop", []string{"path", "/cart/9"})), 0))

	dup := envoyFolder(t, map[string]string{
		"a.yaml": "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
		"b.yaml": "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 9}\n",
	})
	_, err = New(context.Background(), load(t, "--store=memory", "--envoy-config", dup, "--envoy-merge-domain-config"))
	require.ErrorIs(t, err, config.ErrInvalid, "a descriptor in two files stays an error")
	assert.Equal(t, "envoy: "+filepath.Join(dup, "b.yaml")+`: descriptors[0]: key "user" without value is already defined at `+
		filepath.Join(dup, "a.yaml")+": descriptors[0] (line 3)", err.Error())
}

// Point 4: metadata is accepted, and returned only when asked.
func TestDropInDescriptorMetadata(t *testing.T) {
	dir := envoyFolder(t, map[string]string{"meta.yaml": `domain: meta
descriptors:
  - key: tier
    value: gold
    metadata:
      owner: payments
      labels: {team: pay, cost: 3}
      on: true
      ratio: 0.5
      tags: [a, b]
      nothing: null
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tier
    value: silver
    metadata:
      owner: growth
      labels: {region: eu, team: grow}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: region
    metadata: {ignored: "no rate_limit here"}
    descriptors:
      - key: zone
        rate_limit: {unit: minute, requests_per_unit: 5}
`})
	both := req("meta", []string{"tier", "gold"}, []string{"tier", "silver"}, []string{"region", "eu", "zone", "a"})

	plain := newDropIn(t, "--envoy-config", dir)
	resp := plain.ask(t, both)
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok}, codesOf(resp))
	assert.Nil(t, resp.GetDynamicMetadata(), "off by default")

	d := newDropIn(t, "--envoy-config", dir, "--envoy-response-dynamic-metadata")
	both.HitsAddend = 1
	resp = d.ask(t, both)
	got, err := protojson.Marshal(resp.GetDynamicMetadata())
	require.NoError(t, err)
	assert.JSONEq(t, `{
		"domain": "meta",
		"hitsAddend": 1,
		"descriptors": [
			{"entries": ["tier=gold"]},
			{"entries": ["tier=silver"]},
			{"entries": ["region=eu", "zone=a"]}
		],
		"metadata": {
			"owner": "payments",
			"labels": {"team": "pay", "cost": 3, "region": "eu"},
			"on": true, "ratio": 0.5, "tags": ["a", "b"], "nothing": null
		}
	}`, string(got), "the first descriptor's values win, mappings merge")

	resp = d.ask(t, both)
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{over, over, ok, ok}, codesOf(resp))
	got, err = protojson.Marshal(resp.GetDynamicMetadata().GetFields()["metadata"])
	require.NoError(t, err)
	assert.JSONEq(t, `{"owner": "growth", "labels": {"region": "eu", "team": "grow"}}`, string(got),
		"a refused descriptor's metadata is left out")

	d.clock.Advance(time.Minute)
	resp = d.ask(t, req("meta", []string{"tier", "gold"}))
	got, err = protojson.Marshal(resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["labels"])
	require.NoError(t, err)
	assert.JSONEq(t, `{"team": "pay", "cost": 3}`, string(got), "merging never changed the loaded metadata")
}

// Point 7: between two matching wildcards, the first in file order wins.
func TestDropInFirstWildcardInFileOrder(t *testing.T) {
	dir := envoyFolder(t, map[string]string{"api.yaml": `domain: api
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: path
    value: /api/admin/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/admin/users
    rate_limit: {unit: minute, requests_per_unit: 7}
`})
	d := newDropIn(t, "--envoy-config", dir)
	assert.Equal(t, uint32(100), limitOf(d.ask(t, req("api", []string{"path", "/api/admin/keys"})), 0), "/api/* is written first")
	assert.Equal(t, uint32(7), limitOf(d.ask(t, req("api", []string{"path", "/api/admin/users"})), 0), "an exact value still wins")
}

// Point 8: a domain whose descriptors key has no list loads.
func TestDropInDescriptorsWithoutList(t *testing.T) {
	dir := envoyFolder(t, map[string]string{
		"empty.yaml":  "domain: empty\ndescriptors:\n",
		"nested.yaml": "domain: nested\ndescriptors:\n  - key: k\n    descriptors:\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
	})
	d := newDropIn(t, "--envoy-config", dir)
	resp := d.ask(t, req("empty", []string{"k", "v"}))
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok}, codesOf(resp))
	assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit())
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok}, codesOf(d.ask(t, req("nested", []string{"k", "v"}))))
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{over, over}, codesOf(d.ask(t, req("nested", []string{"k", "v"}))))
}
