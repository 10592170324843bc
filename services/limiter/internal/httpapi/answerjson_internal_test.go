package httpapi

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

var answerStrings = []string{"", "k", "client-42", "/orders/{id}", `a"b`, `a\b`, "<script>&", "café", "a\u2028b", "\x00\x1f", "\xff", "\u00e9\U0001F600"}

var answerFloats = []float64{0, 0.001, 0.5, 1, 6.809, 20.577, 59.999, 86400, 31622400, 1e-7, 1e21, 1.5e300, -0.25, math.Copysign(0, -1)}

// sameJSON fails t unless body writes what encoding/json writes for it.
func sameJSON(t *testing.T, body jsonAppender) {
	t.Helper()
	want, err := json.Marshal(body)
	require.NoError(t, err)
	require.Equal(t, string(want), string(body.appendJSON(nil)), "%#v", body)
}

// The hand-written answers are encoding/json's, byte for byte.
func TestAnswersLikeEncodingJSON(t *testing.T) {
	for i, s := range answerStrings {
		for j, f := range answerFloats {
			n := int64(i*1000 - j*7)
			sameJSON(t, pingBody{Key: s, Count: n, Limit: math.MaxInt64, Remaining: -n, ResetAfter: f})
			sameJSON(t, checkBody{Result: "ok", UserID: n, Endpoint: s, Count: n, Limit: 10, Remaining: math.MinInt64, ResetAfter: f})
			sameJSON(t, checkBody{Result: "ok", Key: s, Endpoint: s, Count: n, Limit: 10, ResetAfter: f}) // --rate-key other than user
			sameJSON(t, v1Body{Allowed: i%2 == 0, Limit: n, Remaining: n, Count: n, ResetAfter: f, RetryAfter: answerFloats[len(answerFloats)-1-j],
				Policy: s, Key: answerStrings[len(answerStrings)-1-i], ShadowDenied: j%2 == 0})
		}
	}
}

func FuzzAnswersLikeEncodingJSON(f *testing.F) {
	for i, s := range answerStrings {
		f.Add(s, answerFloats[i%len(answerFloats)], int64(i), true)
	}
	f.Fuzz(func(t *testing.T, s string, x float64, n int64, flag bool) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return // encoding/json refuses them; httplimit.Seconds never makes them
		}
		sameJSON(t, pingBody{Key: s, Count: n, ResetAfter: x})
		sameJSON(t, checkBody{Result: s, UserID: n, Endpoint: s, ResetAfter: x})
		sameJSON(t, v1Body{Allowed: flag, Count: n, ResetAfter: x, RetryAfter: -x, Policy: s, Key: s, ShadowDenied: !flag})
	})
}

func BenchmarkV1Answer(b *testing.B) {
	body := v1Body{Allowed: true, Limit: 2000000000, Remaining: 1999999990, Count: 10, ResetAfter: 0.437,
		Policy: "bench", Key: "bench0a1b2c3d-memory-r0-12345"}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = body.appendJSON(make([]byte, 0, 256))
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
