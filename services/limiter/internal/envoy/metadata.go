package envoy

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
)

// dynamicMetadata is the answer's dynamic_metadata when
// Options.DynamicMetadata is on, shaped as envoyproxy/ratelimit's: the
// domain; each descriptor's entries ("key=value"), limit override and
// hits_addend when set; the request's hits_addend when not 0; and under
// "metadata" the metadata of every matched descriptor that was not refused
// (shadow refusals pass), merged in request order: the first value of a key
// wins, except that two mappings merge.
func dynamicMetadata(req *rlsv3.RateLimitRequest, limits []*envoyrules.Limit, index []int, v decide.Verdict) *structpb.Struct {
	descriptors := make([]*structpb.Value, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			fields["limit"] = structpb.NewStringValue(fmt.Sprintf("requests_per_unit:%d unit:%s", l.GetRequestsPerUnit(), l.GetUnit()))
		}
		if h := d.GetHitsAddend(); h != nil {
			fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descriptors[i] = structpb.NewStructValue(&structpb.Struct{Fields: fields})
	}
	out := &structpb.Struct{Fields: map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descriptors}),
	}}
	if h := req.GetHitsAddend(); h != 0 {
		out.Fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	refused := make([]bool, len(limits))
	for j, r := range v.Results {
		refused[index[j]] = r.Over && !limits[index[j]].Policy.Shadow
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, l := range limits {
		if l != nil && !l.Unlimited && !refused[i] {
			mergeStruct(merged, l.Metadata)
		}
	}
	if len(merged.GetFields()) > 0 {
		out.Fields["metadata"] = structpb.NewStructValue(merged)
	}
	return out
}

// mergeStruct adds src's fields to dst: a key dst lacks is copied (dst never
// shares a value with the loaded rules), a key both hold as mappings is
// merged, any other key keeps dst's value.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(have.GetStructValue(), v.GetStructValue())
		}
	}
}
