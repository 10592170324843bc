package httpapi

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var answerStrings = []string{"", "k", "client-42", "/orders/{id}", `a"b`, `a\b`, "<script>&", "café", "a\u2028b", "\x00\x1f", "\xff", "\u00e9\U0001F600"}

var answerFloats = []float64{0, 0.001, 0.5, 1, 6.809, 20.577, 59.999, 86400, 31622400, 1e-7, 1e21, 1.5e300, -0.25, math.Copysign(0, -1)}

// jsonAppender is an answer body that writes its own JSON.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

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

// readCost reads a cost as json.Unmarshal into an int64 does.
func TestReadCostLikeEncodingJSON(t *testing.T) {
	for _, raw := range []string{`1`, `3`, `0`, `-1`, `-0`, `null`, `true`, `"2"`, `1.0`, `1.5`, `1e3`, `1E0`, `9223372036854775807`,
		`9223372036854775808`, `-9223372036854775809`, `1e309`, `[]`, `{}`, `{"a":1}`, `[1]`} {
		sameCost(t, raw)
	}
}

func FuzzReadCost(f *testing.F) {
	for _, raw := range []string{`1`, `null`, `1.0`, `"1"`, `1e3`} {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) || strings.TrimSpace(raw) != raw {
			return // the member values readCost sees are valid and trimmed
		}
		sameCost(t, raw)
	})
}

func sameCost(t *testing.T, raw string) {
	t.Helper()
	for _, def := range []int64{1, 0} {
		want := def
		err := json.Unmarshal([]byte(raw), &want)
		got, ok := readCost([]byte(raw), def)
		require.Equal(t, err == nil && want >= 1, ok, "%s (default %d)", raw, def)
		if ok {
			require.Equal(t, want, got, raw)
		}
	}
}
