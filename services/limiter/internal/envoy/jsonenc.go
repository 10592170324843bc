package envoy

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// appendResponse appends resp in protobuf's JSON mapping as
// protojson.Marshal writes it (field order, names, enum names, durations,
// default values left out), without the random spaces protojson adds. It
// covers what Decide answers: the codes, the statuses' limits,
// remaining counts and durations, and the headers to add. For anything else
// (quota, metadata, raw body, request headers, unit multipliers, raw header
// values, a string with a control or non-ASCII byte, an unnamed enum number) ok is
// false and AppendJSON uses protojson. It saves protojson's reflection on
// every POST /json answer.
func appendResponse(b []byte, resp *rlsv3.RateLimitResponse) (_ []byte, ok bool) {
	if len(resp.GetRequestHeadersToAdd()) > 0 || len(resp.GetRawBody()) > 0 || resp.GetDynamicMetadata() != nil ||
		resp.GetQuota() != nil || len(resp.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	o := jsonObject{b: b}
	if c := resp.GetOverallCode(); c != 0 {
		o.member("overallCode")
		if o.b, ok = appendEnum(o.b, c); !ok {
			return b, false
		}
	}
	if !array(&o, "statuses", resp.GetStatuses(), appendDescriptorStatus) ||
		!array(&o, "responseHeadersToAdd", resp.GetResponseHeadersToAdd(), appendHeaderValue) {
		return b, false
	}
	return o.end(), true
}

func appendDescriptorStatus(b []byte, s *rlsv3.RateLimitResponse_DescriptorStatus) (_ []byte, ok bool) {
	if s.GetQuota() != nil || len(s.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	o := jsonObject{b: b}
	if c := s.GetCode(); c != 0 {
		o.member("code")
		if o.b, ok = appendEnum(o.b, c); !ok {
			return b, false
		}
	}
	if l := s.GetCurrentLimit(); l != nil {
		if l.GetUnitMultiplier() != nil || len(l.ProtoReflect().GetUnknown()) > 0 {
			return b, false
		}
		o.member("currentLimit")
		lo := jsonObject{b: o.b}
		if n := l.GetName(); n != "" {
			lo.member("name")
			if lo.b, ok = appendPlainString(lo.b, n); !ok {
				return b, false
			}
		}
		if n := l.GetRequestsPerUnit(); n != 0 {
			lo.member("requestsPerUnit")
			lo.b = strconv.AppendUint(lo.b, uint64(n), 10)
		}
		if u := l.GetUnit(); u != 0 {
			lo.member("unit")
			if lo.b, ok = appendEnum(lo.b, u); !ok {
				return b, false
			}
		}
		o.b = lo.end()
	}
	if n := s.GetLimitRemaining(); n != 0 {
		o.member("limitRemaining")
		o.b = strconv.AppendUint(o.b, uint64(n), 10)
	}
	if d := s.GetDurationUntilReset(); d != nil {
		o.member("durationUntilReset")
		if o.b, ok = appendDuration(o.b, d); !ok {
			return b, false
		}
	}
	return o.end(), true
}

func appendHeaderValue(b []byte, h *corev3.HeaderValue) (_ []byte, ok bool) {
	if len(h.GetRawValue()) > 0 || len(h.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	o := jsonObject{b: b}
	if k := h.GetKey(); k != "" {
		o.member("key")
		if o.b, ok = appendPlainString(o.b, k); !ok {
			return b, false
		}
	}
	if v := h.GetValue(); v != "" {
		o.member("value")
		if o.b, ok = appendPlainString(o.b, v); !ok {
			return b, false
		}
	}
	return o.end(), true
}

// jsonObject writes one JSON object's members, opening it at the first.
type jsonObject struct {
	b    []byte
	open bool
}

// member writes the separator and name of the next member.
func (o *jsonObject) member(name string) {
	if o.open {
		o.b = append(o.b, ',')
	} else {
		o.b = append(o.b, '{')
		o.open = true
	}
	o.b = append(o.b, '"')
	o.b = append(o.b, name...)
	o.b = append(o.b, '"', ':')
}

// array writes member name as a JSON array of items, each appended by
// appendItem; nothing when items is empty (protojson leaves empty lists
// out). It reports appendItem's ok.
func array[T any](o *jsonObject, name string, items []T, appendItem func([]byte, T) ([]byte, bool)) bool {
	if len(items) == 0 {
		return true
	}
	o.member(name)
	o.b = append(o.b, '[')
	for i, item := range items {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		var ok bool
		if o.b, ok = appendItem(o.b, item); !ok {
			return false
		}
	}
	o.b = append(o.b, ']')
	return true
}

// end closes the object ({} when it has no member) and returns the bytes.
func (o *jsonObject) end() []byte {
	if !o.open {
		return append(o.b, '{', '}')
	}
	return append(o.b, '}')
}

// appendPlainString appends s as a JSON string when it is printable ASCII,
// escaping quotes and backslashes as protojson does; ok is false for any
// other byte (left to protojson).
func appendPlainString(b []byte, s string) (_ []byte, ok bool) {
	start := len(b)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f:
			return b[:start], false
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		default:
			b = append(b, c)
		}
	}
	return append(b, '"'), true
}

// appendEnum appends an enum value's name, as protojson does for a known
// number; ok is false for a number the enum does not name.
func appendEnum[E interface {
	protoreflect.Enum
	~int32
}](b []byte, e E) ([]byte, bool) {
	v := e.Descriptor().Values().ByNumber(protoreflect.EnumNumber(e))
	if v == nil {
		return b, false
	}
	return appendPlainString(b, string(v.Name()))
}

// appendDuration appends d as protojson does: seconds with 0, 3, 6 or 9
// fractional digits and an "s"; ok is false for a duration protojson
// refuses (out of range, or seconds and nanos of different signs).
func appendDuration(b []byte, d *durationpb.Duration) ([]byte, bool) {
	if len(d.ProtoReflect().GetUnknown()) > 0 || d.CheckValid() != nil {
		return b, false
	}
	secs, nanos := d.GetSeconds(), d.GetNanos()
	b = append(b, '"')
	if secs < 0 || nanos < 0 {
		b = append(b, '-')
		secs, nanos = -secs, -nanos
	}
	b = strconv.AppendInt(b, secs, 10)
	if nanos != 0 {
		var buf [10]byte
		frac := strconv.AppendInt(buf[:0], 1_000_000_000+int64(nanos), 10)[1:] // nine digits
		for range 2 {
			if len(frac) >= 3 && string(frac[len(frac)-3:]) == "000" {
				frac = frac[:len(frac)-3]
			}
		}
		b = append(b, '.')
		b = append(b, frac...)
	}
	return append(b, 's', '"'), true
}
