package envoy

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// DecodeJSON sets req to body, a RateLimitRequest in protobuf's JSON
// mapping, as envoyproxy/ratelimit's POST /json reads it: Envoy's usual
// shape by hand (see parseRequest), anything else by protojson, which
// words the errors. An error wraps ErrInvalid. req keeps nothing of body,
// which the caller may reuse.
func DecodeJSON(body []byte, req *rlsv3.RateLimitRequest) error {
	if parseRequest(body, req) {
		return nil
	}
	if err := protojson.Unmarshal(body, req); err != nil {
		return fmt.Errorf("%w: the body is not a RateLimitRequest in JSON: %v", ErrInvalid, err)
	}
	return nil
}

// AppendJSON appends resp to b in protobuf's JSON mapping, as POST /json
// answers: what Decide answers by hand (see appendResponse), anything else
// by protojson. An error is protojson's: resp holds what the mapping
// cannot write.
func AppendJSON(b []byte, resp *rlsv3.RateLimitResponse) ([]byte, error) {
	if data, ok := appendResponse(b, resp); ok {
		return data, nil
	}
	return protojson.MarshalOptions{}.MarshalAppend(b, resp)
}
