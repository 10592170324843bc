package envoy

import (
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// loadgenBody is the body tools/loadgen sends to POST /json.
const loadgenBody = `{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"run1-12345"}]}]}`

// Bodies the fast path reads: what Envoy and loadgen send, and the
// variations of its shape that protojson reads the same way.
var envoyRequestsFast = []string{
	loadgenBody,
	`{"domain":"edge","descriptors":[{"entries":[{"key":"customer","value":"vip"}]}]}`,
	`{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"},{"key":"b","value":"2"}]},{"entries":[{"key":"remote_address","value":"203.0.113.7"}]}],"hitsAddend":3}`,
	`{"hits_addend":0,"descriptors":[],"domain":""}`,
	`{"domain":"d","hitsAddend":4294967295}`,
	`{}`, `{"descriptors":[{}]}`, `{"descriptors":[{"entries":[]}]}`, `{"descriptors":[{"entries":[{}]}]}`,
	`{"descriptors":[{"entries":[{"value":"v"}]}]}`,
	" \n\t{ \"domain\" : \"d\" ,\r\n \"descriptors\" : [ { \"entries\" : [ { \"key\" : \"k\" , \"value\" : \"v\" } ] } ] } \n",
	`{"domain":"caf\u00e9 \"q\" \\ \/ \n \t \u0000 \ud83d\ude00"}`, `{"domain":"café ☕ 😀"}`,
	`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"a\u0022b"}]}]}`,
	`{"dom\u0061in":"d"}`, `{"descriptors":[{"entries":[{"k\u0065y":"k","value":"v"}]}]}`,
}

// Bodies left to protojson: errors, and shapes the fast path does not read.
var envoyRequestsFallBack = []string{
	``, `null`, `[]`, `"x"`, `{`, `{"domain":"d"} x`, `{"domain":"d"}{}`, `{"domain":"d",}`,
	`{"domain":null}`, `{"descriptors":null}`, `{"hitsAddend":null}`, `{"descriptors":[null]}`,
	`{"descriptors":[{"entries":null}]}`, `{"descriptors":[{"entries":[null]}]}`, `{"descriptors":[{"entries":[{"key":null}]}]}`,
	`{"domain":"a","domain":"b"}`, `{"domain":"a","dom\u0061in":"b"}`, `{"hitsAddend":1,"hits_addend":1}`,
	`{"descriptors":[{"entries":[{"key":"a","key":"b"}]}]}`,
	`{"hitsAddend":1.0}`, `{"hitsAddend":1e2}`, `{"hitsAddend":1E2}`, `{"hitsAddend":-1}`, `{"hitsAddend":-0}`,
	`{"hitsAddend":4294967296}`, `{"hitsAddend":18446744073709551616}`, `{"hitsAddend":"3"}`, `{"hitsAddend":01}`, `{"hitsAddend":true}`,
	`{"domain":1}`, `{"domain":["d"]}`, `{"domain":{}}`, `{"descriptors":{}}`, `{"descriptors":["x"]}`,
	`{"Domain":"d"}`, `{"other":1}`, `{"descriptors":[{"limit":{"requests_per_unit":5,"unit":"SECOND"}}]}`,
	`{"descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"2"}]}`, `{"descriptors":[{"hits_addend":2}]}`,
	`{"descriptors":[{"entries":[{"key":"k","value":"v","other":1}]}]}`, `{"descriptors":[{"entries":[{"key":"k","value":"v"}],"entries":[]}]}`,
	`{"domain":"\ud800"}`, `{"domain":"\udc00\ud800"}`, `{"domain":"\ud800\u0041"}`, `{"domain":"\ufffd"}`, `{"domain":"�"}`,
	"{\"domain\":\"\xff\"}", "{\"domain\":\"a\tb\"}", `{"domain":"a\x"}`, "\ufeff{}",
}

// sameAsProtojson fails t when parseRequest reads body and protojson
// does not read it, or reads another message; it reports whether the fast
// path read it.
func sameAsProtojson(t *testing.T, body []byte) bool {
	t.Helper()
	var fast rlsv3.RateLimitRequest
	if !parseRequest(body, &fast) {
		assert.True(t, proto.Equal(&fast, &rlsv3.RateLimitRequest{}), "%q: refused, req untouched", body)
		return false
	}
	var want rlsv3.RateLimitRequest
	require.NoError(t, protojson.Unmarshal(body, &want), "%q: the fast path read it", body)
	require.True(t, proto.Equal(&want, &fast), "%q:\nprotojson %v\nfast      %v", body, &want, &fast)
	return true
}

func TestEnvoyRequestLikeProtojson(t *testing.T) {
	for _, body := range envoyRequestsFast {
		assert.True(t, sameAsProtojson(t, []byte(body)), "%q: the fast path reads it", body)
	}
	for _, body := range envoyRequestsFallBack {
		assert.False(t, sameAsProtojson(t, []byte(body)), "%q: left to protojson", body)
	}
	// Many descriptors and entries: past the arrays on the stack.
	many := `{"domain":"d","descriptors":[` + strings.Repeat(`{"entries":[`+strings.Repeat(`{"key":"k","value":"v"},`, 6)+`{"key":"k","value":"v"}]},`, 6) + `{}]}`
	assert.True(t, sameAsProtojson(t, []byte(many)))
}

// The request keeps nothing of the body, which the next request reuses.
func TestEnvoyRequestCopies(t *testing.T) {
	body := []byte(`{"domain":"dom","descriptors":[{"entries":[{"key":"key","value":"val"}]}]}`)
	var req rlsv3.RateLimitRequest
	require.True(t, parseRequest(body, &req))
	for i := range body {
		body[i] = 'x'
	}
	want := &rlsv3.RateLimitRequest{}
	require.NoError(t, protojson.Unmarshal([]byte(`{"domain":"dom","descriptors":[{"entries":[{"key":"key","value":"val"}]}]}`), want))
	assert.True(t, proto.Equal(want, &req), "%v", &req)
}

func FuzzParseEnvoyRequest(f *testing.F) {
	for _, body := range append(envoyRequestsFast, envoyRequestsFallBack...) {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { sameAsProtojson(t, body) })
}

// BenchmarkEnvoyRequest: loadgen's body, by the fast path and by protojson.
func BenchmarkEnvoyRequest(b *testing.B) {
	body := []byte(loadgenBody)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if !parseRequest(body, &req) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if err := protojson.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
