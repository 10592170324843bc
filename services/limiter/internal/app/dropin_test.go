package app

// Issue #16: Tollgate behaves as envoyproxy/ratelimit wherever that
// service's own tests look. Every scenario here runs against the real gRPC
// server and POST /json at once (see dropIn) on configuration folders
// written by the tests.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
	// header is the HTTP header of the last /json answer.
	header http.Header
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
	d.header = resp.Header
	return viaGRPC
}

// refusal sends req to both services and returns the gRPC status code and
// the /json problem's status.
func (d *dropIn) refusal(t *testing.T, req *rlsv3.RateLimitRequest) (codes.Code, int) {
	t.Helper()
	_, err := d.grpc.ShouldRateLimit(context.Background(), req)
	body, merr := protojson.Marshal(req)
	require.NoError(t, merr)
	resp, _ := postJSON(t, d.json, string(body))
	return status.Code(err), resp.StatusCode
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

// status builds the descriptor status the peer answers for a limit.
func limited(code rlsv3.RateLimitResponse_Code, name string, perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: perUnit, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: durationpb.New(reset),
	}
}

// one is the answer of one descriptor with status st.
func one(st *rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: st.GetCode(), Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{st}}
}

// assertAnswer requires got to be exactly want, as the peer's tests compare
// whole answers.
func assertAnswer(t *testing.T, want, got *rlsv3.RateLimitResponse, msg string) {
	t.Helper()
	assert.True(t, proto.Equal(want, got), "%s:\nwant %v\ngot  %v", msg, want, got)
}

// shopRules is a domain with one limit, 2 a minute per user.
var shopRules = map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"}

// Point 1: a descriptor without entries answers OK, without limit.
func TestDropInDescriptorWithoutEntries(t *testing.T) {
	d := newDropIn(t, "--envoy-config", envoyFolder(t, shopRules))
	for _, domain := range []string{"shop", "nowhere"} {
		resp := d.ask(t, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}})
		assertAnswer(t, &rlsv3.RateLimitResponse{
			OverallCode: ok,
			Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: ok}},
		}, resp, domain)
	}
	mixed := req("shop", []string{"user", "u1"})
	mixed.Descriptors = append([]*ratelimitv3.RateLimitDescriptor{{}}, mixed.Descriptors...)
	assertAnswer(t, &rlsv3.RateLimitResponse{
		OverallCode: ok,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: ok},
			limited(ok, "", 2, rlsv3.RateLimitResponse_RateLimit_MINUTE, 1, 15*time.Second),
		},
	}, d.ask(t, mixed), "beside a descriptor with entries")

	// An entry without key matches nothing either: the peer checks
	// nothing of the request's entries.
	noKey := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Value: "v"}, {Key: "user", Value: "u1"}},
	}}}
	assertAnswer(t, &rlsv3.RateLimitResponse{
		OverallCode: ok,
		Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: ok}},
	}, d.ask(t, noKey), "an entry without key")

	// With a limit override, a descriptor without entries is limited, on
	// one counter of the domain, as the peer's.
	for i, code := range []rlsv3.RateLimitResponse_Code{ok, over} {
		r := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE},
		}}}
		assertAnswer(t, &rlsv3.RateLimitResponse{
			OverallCode: code,
			Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{limited(code, "", 1, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0, 15*time.Second)},
		}, d.ask(t, r), fmt.Sprint("override without entries ", i+1))
	}

	code, httpStatus := d.refusal(t, &rlsv3.RateLimitRequest{Domain: "shop"})
	assert.Equal(t, codes.InvalidArgument, code, "no descriptors at all")
	assert.Equal(t, http.StatusBadRequest, httpStatus)
}

// override returns a one-descriptor request of domain whose descriptor
// overrides the limit.
func override(domain string, perUnit uint32, unit typev3.RateLimitUnit, kv ...string) *rlsv3.RateLimitRequest {
	r := req(domain, kv)
	r.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: unit}
	return r
}

// Point 3: request-side limit overrides, with the peer's counters.
func TestDropInLimitOverride(t *testing.T) {
	d := newDropIn(t, "--envoy-config", envoyFolder(t, shopRules))
	const minute, hour = rlsv3.RateLimitResponse_RateLimit_MINUTE, rlsv3.RateLimitResponse_RateLimit_HOUR

	// In place of the configured 2 a minute, reported as current_limit.
	for i := range uint32(5) {
		resp := d.ask(t, override("shop", 5, typev3.RateLimitUnit_MINUTE, "user", "alice"))
		assertAnswer(t, one(limited(ok, "", 5, minute, 4-i, 15*time.Second)), resp, "override request")
	}
	assertAnswer(t, one(limited(over, "", 5, minute, 0, 15*time.Second)),
		d.ask(t, override("shop", 5, typev3.RateLimitUnit_MINUTE, "user", "alice")), "the 6th")
	// The counter is named by the domain, the entries and the window, not
	// by the limit: the configured limit of the same unit sees the same
	// count, and a higher override the same count against its own limit.
	assertAnswer(t, one(limited(over, "", 2, minute, 0, 15*time.Second)),
		d.ask(t, req("shop", []string{"user", "alice"})), "the configured limit, same counter")
	assertAnswer(t, one(limited(ok, "", 10, minute, 2, 15*time.Second)),
		d.ask(t, override("shop", 10, typev3.RateLimitUnit_MINUTE, "user", "alice")), "8 counted of 10")
	// Another unit counts in that unit's window.
	assertAnswer(t, one(limited(ok, "", 3, hour, 2, 59*time.Minute+15*time.Second)),
		d.ask(t, override("shop", 3, typev3.RateLimitUnit_HOUR, "user", "alice")), "an hour window of its own")

	// A descriptor that matches no rule gets the override too...
	for i, code := range []rlsv3.RateLimitResponse_Code{ok, over} {
		assertAnswer(t, one(limited(code, "", 1, rlsv3.RateLimitResponse_RateLimit_SECOND, 0, time.Second)),
			d.ask(t, override("shop", 1, typev3.RateLimitUnit_SECOND, "path", "/cart")), fmt.Sprint("unmatched ", i+1))
	}
	// ...but not in a domain that is not loaded, as the peer.
	assertAnswer(t, one(&rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}),
		d.ask(t, override("nowhere", 1, typev3.RateLimitUnit_SECOND, "path", "/cart")), "unknown domain")

	// Bounds as for configured limits: 0 refuses everything...
	assert.Equal(t, over, d.ask(t, override("shop", 0, typev3.RateLimitUnit_MINUTE, "user", "zed")).GetOverallCode())
	// ...and a unit or a limit out of range is a bad request.
	for _, bad := range []*rlsv3.RateLimitRequest{
		override("shop", 1, typev3.RateLimitUnit_UNKNOWN, "user", "zed"),
		override("shop", 1<<31+1, typev3.RateLimitUnit_MINUTE, "user", "zed"),
	} {
		code, httpStatus := d.refusal(t, bad)
		assert.Equal(t, codes.InvalidArgument, code)
		assert.Equal(t, http.StatusBadRequest, httpStatus)
	}

	d.clock.Advance(15 * time.Second)
	assertAnswer(t, one(limited(ok, "", 5, minute, 4, time.Minute)),
		d.ask(t, override("shop", 5, typev3.RateLimitUnit_MINUTE, "user", "alice")), "a new minute")
}

// Point 5: header fields only when --envoy-response-headers is on.
func TestDropInResponseHeaders(t *testing.T) {
	dir := envoyFolder(t, shopRules)
	plain := newDropIn(t, "--envoy-config", dir)
	for i := range 3 {
		resp := plain.ask(t, req("shop", []string{"user", "u1"}))
		assert.Empty(t, resp.GetResponseHeadersToAdd(), "request %d", i+1)
		for _, name := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			assert.Empty(t, plain.header.Values(name), "/json request %d: %s", i+1, name)
		}
	}

	d := newDropIn(t, "--envoy-config", dir, "--envoy-response-headers")
	d.ask(t, req("shop", []string{"user", "u1"}))
	d.ask(t, req("shop", []string{"user", "u1"}))
	resp := d.ask(t, req("shop", []string{"user", "u1"}))
	fields := map[string]string{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		fields[hv.GetKey()] = hv.GetValue()
	}
	assert.Equal(t, map[string]string{
		"RateLimit-Policy": `"shop.user";q=2;w=60`,
		"RateLimit":        `"shop.user";r=0;t=15`,
		"Retry-After":      "15",
	}, fields)
	assert.Equal(t, "15", d.header.Get("Retry-After"), "/json sets them on its answer too")
	assert.Equal(t, `"shop.user";q=2;w=60`, d.header.Get("RateLimit-Policy"))
}

// Point 9: a request-level hits_addend of 0 counts one hit; only a
// descriptor-level 0 checks without counting, over only past the limit.
func TestDropInHitsAddend(t *testing.T) {
	d := newDropIn(t, "--envoy-config", envoyFolder(t, shopRules))
	remaining := func(r *rlsv3.RateLimitRequest) (rlsv3.RateLimitResponse_Code, uint32) {
		resp := d.ask(t, r)
		return resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining()
	}
	check := func(user string) *rlsv3.RateLimitRequest {
		r := req("shop", []string{"user", user})
		r.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
		return r
	}

	code, left := remaining(check("a"))
	assert.Equal(t, []any{ok, uint32(2)}, []any{code, left}, "a check counts nothing")
	zero := req("shop", []string{"user", "a"}) // hits_addend 0 on the request
	code, left = remaining(zero)
	assert.Equal(t, []any{ok, uint32(1)}, []any{code, left}, "a request-level 0 counts one")
	code, left = remaining(zero)
	assert.Equal(t, []any{ok, uint32(0)}, []any{code, left})
	code, left = remaining(check("a"))
	assert.Equal(t, []any{ok, uint32(0)}, []any{code, left}, "a check at the limit is not over")
	code, _ = remaining(zero)
	assert.Equal(t, over, code, "the third hit")
	code, _ = remaining(check("a"))
	assert.Equal(t, over, code, "a check past the limit is over")

	two := req("shop", []string{"user", "b"})
	two.HitsAddend = 2
	code, left = remaining(two)
	assert.Equal(t, []any{ok, uint32(0)}, []any{code, left}, "a request-level 2 counts 2")
}

// twoRules has two limits: 4 a minute, 2 an hour.
var twoRules = map[string]string{"two.yaml": `domain: two
descriptors:
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: narrow
    rate_limit: {unit: hour, requests_per_unit: 2}
`}

// Point 10: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
func TestDropInStopCacheKeyIncrementWhenOverLimit(t *testing.T) {
	dir := envoyFolder(t, twoRules)
	both := req("two", []string{"wide", "k"}, []string{"narrow", "k"})
	remainders := func(d *dropIn) []any {
		resp := d.ask(t, both)
		return []any{resp.GetOverallCode(), resp.GetStatuses()[0].GetCode(), resp.GetStatuses()[0].GetLimitRemaining(),
			resp.GetStatuses()[1].GetCode(), resp.GetStatuses()[1].GetLimitRemaining()}
	}

	t.Run("off: every descriptor is counted", func(t *testing.T) {
		d := newDropIn(t, "--envoy-config", dir)
		assert.Equal(t, []any{ok, ok, uint32(3), ok, uint32(1)}, remainders(d))
		assert.Equal(t, []any{ok, ok, uint32(2), ok, uint32(0)}, remainders(d))
		assert.Equal(t, []any{over, ok, uint32(1), over, uint32(0)}, remainders(d))
		assert.Equal(t, []any{over, ok, uint32(0), over, uint32(0)}, remainders(d))
	})
	t.Run("on: only the descriptor over its limit is counted", func(t *testing.T) {
		d := newDropIn(t, "--envoy-config", dir, "--envoy-stop-cache-key-increment-when-overlimit")
		assert.Equal(t, []any{ok, ok, uint32(3), ok, uint32(1)}, remainders(d))
		assert.Equal(t, []any{ok, ok, uint32(2), ok, uint32(0)}, remainders(d))
		assert.Equal(t, []any{over, ok, uint32(2), over, uint32(0)}, remainders(d), "wide is checked, not counted")
		assert.Equal(t, []any{over, ok, uint32(2), over, uint32(0)}, remainders(d))
		alone := d.ask(t, req("two", []string{"wide", "k"}))
		assert.Equal(t, uint32(1), alone.GetStatuses()[0].GetLimitRemaining(), "alone, wide is counted again")
	})
}

// A hits_addend above the limit is over, and counted, as the peer's INCRBY:
// the whole addend is in the count that later requests see, an override
// with a higher limit on the same counter included.
func TestDropInHitsAddendAboveTheLimit(t *testing.T) {
	d := newDropIn(t, "--envoy-config", envoyFolder(t, shopRules))
	const minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	big := req("shop", []string{"user", "carol"})
	big.HitsAddend = 5
	assertAnswer(t, one(limited(over, "", 2, minute, 0, 15*time.Second)), d.ask(t, big), "5 hits on a limit of 2")
	check := req("shop", []string{"user", "carol"})
	check.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	assertAnswer(t, one(limited(over, "", 2, minute, 0, 15*time.Second)), d.ask(t, check), "5 counted: a check is over")
	assertAnswer(t, one(limited(ok, "", 10, minute, 4, 15*time.Second)),
		d.ask(t, override("shop", 10, typev3.RateLimitUnit_MINUTE, "user", "carol")), "6 counted of 10")

	perDescriptor := req("shop", []string{"user", "dave"})
	perDescriptor.Descriptors[0].HitsAddend = wrapperspb.UInt64(3)
	assertAnswer(t, one(limited(over, "", 2, minute, 0, 15*time.Second)), d.ask(t, perDescriptor), "a descriptor-level 3")
	assertAnswer(t, one(limited(ok, "", 4, minute, 0, 15*time.Second)),
		d.ask(t, override("shop", 4, typev3.RateLimitUnit_MINUTE, "user", "dave")), "3 counted, and this one: 4 of 4")

	huge := req("shop", []string{"user", "erin"})
	huge.Descriptors[0].HitsAddend = wrapperspb.UInt64(1 << 40)
	assertAnswer(t, one(limited(over, "", 2, minute, 0, 15*time.Second)), d.ask(t, huge), "far above every limit")
	assertAnswer(t, one(limited(over, "", 1<<31, minute, 0, 15*time.Second)),
		d.ask(t, override("shop", 1<<31, typev3.RateLimitUnit_MINUTE, "user", "erin")), "past even the largest limit")

	d.clock.Advance(15 * time.Second)
	assertAnswer(t, one(limited(ok, "", 2, minute, 1, time.Minute)), d.ask(t, req("shop", []string{"user", "carol"})), "a new minute")
}

// quotaRules has two limits in quota mode, one that is not, one in
// shadow mode, each 1 a minute, and a descriptor with both modes and no
// rate_limit (the peer loads it; they mean nothing there).
var quotaRules = map[string]string{"q.yaml": `domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: s
    shadow_mode: true
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: n
    quota_mode: true
    shadow_mode: true
`}

// quota_mode: an over descriptor in quota mode reports OVER_LIMIT, and
// makes the answer OVER_LIMIT only when every quota descriptor of the
// request is over, as the peer's quota mode.
func TestDropInQuotaMode(t *testing.T) {
	d := newDropIn(t, "--envoy-config", envoyFolder(t, quotaRules), "--envoy-response-headers")
	ask := func(descriptors ...[]string) []rlsv3.RateLimitResponse_Code {
		return codesOf(d.ask(t, req("q", descriptors...)))
	}
	a, b, c := []string{"a", "1"}, []string{"b", "1"}, []string{"c", "1"}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok, ok}, ask(a, b))
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{over, over, over}, ask(a, b), "every quota descriptor over")
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, over, ok}, ask(a, []string{"b", "2"}), "one quota descriptor passes")
	assert.Empty(t, d.header.Get("Retry-After"), "an answer that passes has no Retry-After")
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{over, over, ok}, ask(a, c), "the only quota descriptor is over")
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{over, ok, over}, ask([]string{"b", "3"}, c), "a limit not in quota mode is over")
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{over, over, ok}, ask(a, []string{"x", "1"}), "an unmatched descriptor is not in quota mode")
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok}, ask([]string{"s", "1"}))
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok, over}, ask([]string{"s", "1"}, a), "a shadow limit passes")
	assert.Empty(t, d.header.Get("Retry-After"))
	assert.Nil(t, d.ask(t, req("q", []string{"n", "1"})).GetStatuses()[0].GetCurrentLimit(), "modes without rate_limit")

	// QUOTA_MODE: every descriptor in quota mode, unmatched ones too.
	g := newDropIn(t, "--envoy-config", envoyFolder(t, quotaRules), "--envoy-quota-mode")
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok}, codesOf(g.ask(t, req("q", c))))
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{over, over}, codesOf(g.ask(t, req("q", c))), "alone, over")
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, over, ok}, codesOf(g.ask(t, req("q", c, []string{"x", "1"}))),
		"an unmatched descriptor passes, so not every quota descriptor is over")
}

// SHADOW_MODE: every answer is OK overall, the statuses as they are.
func TestDropInGlobalShadowMode(t *testing.T) {
	d := newDropIn(t, "--envoy-config", envoyFolder(t, shopRules), "--envoy-shadow-mode")
	const minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	d.ask(t, req("shop", []string{"user", "u"}))
	d.ask(t, req("shop", []string{"user", "u"}))
	assertAnswer(t, &rlsv3.RateLimitResponse{
		OverallCode: ok,
		Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{limited(over, "", 2, minute, 0, 15*time.Second)},
	}, d.ask(t, req("shop", []string{"user", "u"})), "over, counted, reported, not enforced")
}

// What the peer's loader takes, Tollgate loads alike: an empty or null
// value is no value; an unlimited rate_limit with requests_per_unit, or
// with a word that is no unit, is unlimited; a rate_limit without
// requests_per_unit refuses everything.
func TestDropInLenientFields(t *testing.T) {
	d := newDropIn(t, "--envoy-config", envoyFolder(t, map[string]string{"l.yaml": `domain: l
descriptors:
  - key: empty
    value: ""
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: nil
    value: ~
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true, requests_per_unit: 5}
  - key: free2
    rate_limit: {unlimited: true, unit: fortnight}
  - key: none
    rate_limit: {unit: hour}
`}))
	for _, key := range []string{"empty", "nil"} {
		assert.Equal(t, uint32(1), limitOf(d.ask(t, req("l", []string{key, "any"})), 0), "%s: matches any value", key)
	}
	for _, key := range []string{"free", "free2"} {
		st := d.ask(t, req("l", []string{key, "v"})).GetStatuses()[0]
		assert.Equal(t, []any{ok, uint32(math.MaxUint32)}, []any{st.GetCode(), st.GetLimitRemaining()}, "%s: unlimited", key)
	}
	assertAnswer(t, &rlsv3.RateLimitResponse{
		OverallCode: over,
		Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{limited(over, "", 0, rlsv3.RateLimitResponse_RateLimit_HOUR, 0, 59*time.Minute+15*time.Second)},
	}, d.ask(t, req("l", []string{"none", "v"})), "no requests_per_unit: 0")
}

// LIMIT_RESPONSE_HEADERS_ENABLED: the peer's own header fields, under the
// names its LIMIT_*_HEADER settings give, of the descriptor closest to its
// limit, or of the last one over it.
func TestDropInLimitHeaders(t *testing.T) {
	dir := envoyFolder(t, twoRules)
	d := newDropIn(t, "--envoy-config", dir, "--envoy-limit-headers", "--envoy-limit-remaining-header=X-Left")
	fields := func(resp *rlsv3.RateLimitResponse) []string {
		var out []string
		for _, hv := range resp.GetResponseHeadersToAdd() {
			out = append(out, hv.GetKey()+": "+hv.GetValue())
		}
		return out
	}
	both := req("two", []string{"narrow", "k"}, []string{"wide", "k"})
	assert.Equal(t, []string{"RateLimit-Limit: 2", "X-Left: 1", "RateLimit-Reset: 3555"}, fields(d.ask(t, both)), "the least remaining")
	assert.Equal(t, "1", d.header.Get("X-Left"), "/json sets them on its answer too")
	assert.Equal(t, []string{"RateLimit-Limit: 2", "X-Left: 0", "RateLimit-Reset: 3555"}, fields(d.ask(t, both)), "the first of equals")
	assert.Equal(t, []string{"RateLimit-Limit: 2", "X-Left: 0", "RateLimit-Reset: 3555"}, fields(d.ask(t, both)), "over")
	assert.Equal(t, []string{"RateLimit-Limit: 2", "X-Left: 0", "RateLimit-Reset: 3555"}, fields(d.ask(t, both)), "wide at 0 remaining")
	assert.Equal(t, []string{"RateLimit-Limit: 4", "X-Left: 0", "RateLimit-Reset: 15"}, fields(d.ask(t, both)), "the last one over")
	assert.Empty(t, fields(d.ask(t, req("two", []string{"other", "k"}))), "no limit, no fields")
	assert.Empty(t, d.header.Get("RateLimit-Limit"))

	d.clock.Advance(500 * time.Millisecond)
	assert.Equal(t, []string{"RateLimit-Limit: 4", "X-Left: 3", "RateLimit-Reset: 15"},
		fields(d.ask(t, req("two", []string{"wide", "j"}))), "whole seconds, rounded up")
}

// docs/envoy.md's deliberate differences that an answer shows, as documented.
func TestDropInDeliberateDifferences(t *testing.T) {
	dir := envoyFolder(t, map[string]string{"d.yaml": `domain: d
descriptors:
  - key: a
    value: b_c
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: block
    rate_limit: {unit: minute, requests_per_unit: 0}
`})
	d := newDropIn(t, "--envoy-config", dir)
	assert.Nil(t, d.ask(t, req("d", []string{"a_b", "c"})).GetStatuses()[0].GetCurrentLimit(),
		"matching is by key, then value: {a_b, c} is not a=b_c")
	assert.Equal(t, uint32(1), limitOf(d.ask(t, req("d", []string{"a", "b_c"})), 0))

	check := req("d", []string{"block", "x"})
	check.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	assert.Equal(t, over, d.ask(t, check).GetOverallCode(), "a check on a limit of 0 is over, nothing counted or not")

	negative := req("d", []string{"a", "b_c"})
	negative.Descriptors[0].IsNegativeHits = true
	code, httpStatus := d.refusal(t, negative)
	assert.Equal(t, []any{codes.InvalidArgument, http.StatusBadRequest}, []any{code, httpStatus}, "negative hits")

	misplaced := envoyFolder(t, map[string]string{"m.yaml": "domain: m\ndescriptors:\n  - key: a\n    unit: second\n"})
	_, err := New(context.Background(), load(t, "--store=memory", "--envoy-config", misplaced))
	require.ErrorIs(t, err, config.ErrInvalid, "a key in the wrong place")
	assert.Contains(t, err.Error(), "descriptors[0].unit: unknown key")
}

// Limits whose statistics names are the same (keys or domains holding '.',
// a key named like the override counter) load, as in the peer, and count
// apart.
func TestDropInSameStatisticsNames(t *testing.T) {
	d := newDropIn(t, "--envoy-config", envoyFolder(t, map[string]string{
		"a.yaml": `domain: a
descriptors:
  - key: b.c
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b
    descriptors:
      - key: c
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: limit_override_minute
    rate_limit: {unit: minute, requests_per_unit: 4}
`,
		"ab.yaml": "domain: a.b\ndescriptors:\n  - key: c\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
	}))
	for i := range 2 {
		for _, tc := range []struct {
			domain string
			kv     []string
			limit  uint32
		}{
			{"a", []string{"b.c", "x"}, 2},
			{"a", []string{"b", "x", "c", "y"}, 3},
			{"a", []string{"limit_override_minute", "x"}, 4},
			{"a.b", []string{"c", "x"}, 5},
		} {
			st := d.ask(t, req(tc.domain, tc.kv)).GetStatuses()[0]
			assert.Equal(t, []any{tc.limit, tc.limit - uint32(i) - 1}, []any{limitOf(one(st), 0), st.GetLimitRemaining()},
				"%s %v, request %d: its own counter", tc.domain, tc.kv, i+1)
		}
	}
	st := d.ask(t, override("a", 5, typev3.RateLimitUnit_MINUTE, "z", "1")).GetStatuses()[0]
	assert.Equal(t, uint32(4), st.GetLimitRemaining(), "the overrides' counter is apart too")
}
