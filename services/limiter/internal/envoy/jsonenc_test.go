package envoy

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type (
	rlResp   = rlsv3.RateLimitResponse
	rlStatus = rlsv3.RateLimitResponse_DescriptorStatus
	rlLimit  = rlsv3.RateLimitResponse_RateLimit
)

// The hand-written answer is protojson's, byte for byte once protojson's
// random spaces are compacted away, for every shape Decide answers.
func TestEnvoyResponseLikeProtojson(t *testing.T) {
	over := rlsv3.RateLimitResponse_OVER_LIMIT
	ok := rlsv3.RateLimitResponse_OK
	for name, resp := range map[string]*rlResp{
		"empty":    {},
		"ok":       {OverallCode: ok},
		"no limit": {OverallCode: ok, Statuses: []*rlStatus{{Code: ok}, {}}},
		"one": {OverallCode: ok, Statuses: []*rlStatus{{Code: ok, LimitRemaining: 999_999_999,
			CurrentLimit:       &rlLimit{RequestsPerUnit: 1_000_000_000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			DurationUntilReset: durationpb.New(437 * time.Millisecond)}}},
		"over with headers": {OverallCode: over, Statuses: []*rlStatus{
			{Code: ok, CurrentLimit: &rlLimit{Name: "vip", RequestsPerUnit: 5, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
				LimitRemaining: 4, DurationUntilReset: durationpb.New(59*time.Second + 1500*time.Microsecond)},
			{Code: over, CurrentLimit: &rlLimit{}, DurationUntilReset: durationpb.New(0)},
			{Code: over, CurrentLimit: &rlLimit{Unit: rlsv3.RateLimitResponse_RateLimit_WEEK},
				DurationUntilReset: durationpb.New(3*time.Hour + 7)},
		}, ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: `"p";q=5;w=60`}, {Key: "Retry-After", Value: "1"}, {Key: `a\b`}, {}}},
		"negative duration": {Statuses: []*rlStatus{{DurationUntilReset: &durationpb.Duration{Seconds: -1, Nanos: -5e8}},
			{DurationUntilReset: &durationpb.Duration{Nanos: -120}}}},
	} {
		want, err := protojson.Marshal(resp)
		require.NoError(t, err, name)
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, want), name)
		got, done := appendResponse([]byte("prefix:"), resp)
		require.True(t, done, name)
		assert.Equal(t, "prefix:"+compact.String(), string(got), name)

		back, viaProtojson := &rlResp{}, &rlResp{}
		require.NoError(t, protojson.Unmarshal(got[len("prefix:"):], back), name)
		require.NoError(t, protojson.Unmarshal(want, viaProtojson), name)
		assert.True(t, proto.Equal(viaProtojson, back), "%s: reads back as protojson's answer does", name)
	}
}

// What the hand-written answer does not cover goes to protojson, and the
// bytes appended so far are left as they were.
func TestEnvoyResponseFallsBack(t *testing.T) {
	for name, resp := range map[string]*rlResp{
		"request headers": {RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "a", Value: "b"}}},
		"raw body":        {RawBody: []byte("x")},
		"metadata":        {DynamicMetadata: &structpb.Struct{}},
		"quota":           {Quota: &rlsv3.RateLimitResponse_Quota{}},
		"status quota":    {Statuses: []*rlStatus{{Quota: &rlsv3.RateLimitResponse_Quota{}}}},
		"multiplier":      {Statuses: []*rlStatus{{CurrentLimit: &rlLimit{UnitMultiplier: wrapperspb.UInt32(2)}}}},
		"raw value":       {ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "a", RawValue: []byte("b")}}},
		"control byte":    {ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "a", Value: "x\ty"}}},
		"non-ASCII name":  {Statuses: []*rlStatus{{CurrentLimit: &rlLimit{Name: "café"}}}},
		"unnamed enum":    {OverallCode: 42},
		"invalid":         {Statuses: []*rlStatus{{DurationUntilReset: &durationpb.Duration{Seconds: 1, Nanos: -1}}}},
	} {
		got, done := appendResponse([]byte("prefix:"), resp)
		assert.False(t, done, name)
		assert.Equal(t, "prefix:", string(got), name)
	}
}

// BenchmarkEnvoyResponse: the answer to one descriptor, by hand and by
// protojson.
func BenchmarkEnvoyResponse(b *testing.B) {
	resp := &rlResp{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlStatus{{Code: rlsv3.RateLimitResponse_OK,
		CurrentLimit:   &rlLimit{RequestsPerUnit: 1_000_000_000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
		LimitRemaining: 999_999_999, DurationUntilReset: durationpb.New(437 * time.Millisecond)}}}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := appendResponse(nil, resp); !ok {
				b.Fatal("not covered")
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := protojson.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
