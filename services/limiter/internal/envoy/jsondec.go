package envoy

import (
	"encoding/json"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/services/limiter/internal/canon"
)

// parseRequest sets req to body read as protojson.Unmarshal reads it,
// when body has the shape Envoy sends: an object of domain (a string),
// descriptors (an array of objects whose only member is entries, an array
// of objects of key and value strings) and hitsAddend or hits_addend (an
// integer that fits a uint32, without fraction or exponent). For anything
// else (another member, a name given twice, null, a value of another type,
// a string holding U+FFFD, bad syntax) ok is false, req is untouched and
// DecodeJSON uses protojson, which stays the judge of what is an error. It
// saves protojson's reflection on every POST /json request. req keeps
// nothing of body: canon.String copies.
func parseRequest(body []byte, req *rlsv3.RateLimitRequest) (ok bool) {
	var members [3]canon.Member
	obj, err := canon.AppendObject(members[:0], body)
	if err != nil {
		return false
	}
	var (
		domain      string
		descriptors []*ratelimitv3.RateLimitDescriptor
		hitsAddend  uint64
		hits        bool
	)
	for _, m := range obj {
		switch m.Name() {
		case "domain":
			domain, ok = jsonString(m.Value)
		case "descriptors":
			descriptors, ok = jsonList(m.Value, jsonDescriptor)
		case "hitsAddend", "hits_addend": // protojson reads either name, and refuses both at once
			var err error
			hitsAddend, err = strconv.ParseUint(string(m.Value), 10, 32)
			ok = err == nil && !hits
			hits = true
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	*req = rlsv3.RateLimitRequest{Domain: domain, Descriptors: descriptors, HitsAddend: uint32(hitsAddend)}
	return true
}

// jsonDescriptor reads a descriptor of entries only; a limit override or
// a descriptor's own hits_addend (a wrapper, a number or a string) is left
// to protojson.
func jsonDescriptor(raw json.RawMessage) (*ratelimitv3.RateLimitDescriptor, bool) {
	var members [1]canon.Member
	obj, err := canon.AppendObject(members[:0], raw)
	if err != nil {
		return nil, false
	}
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, m := range obj {
		var ok bool
		if m.Name() == "entries" {
			d.Entries, ok = jsonList(m.Value, jsonEntry)
		}
		if !ok {
			return nil, false
		}
	}
	return d, true
}

// jsonEntry reads a descriptor's entry: a key and a value.
func jsonEntry(raw json.RawMessage) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
	var members [2]canon.Member
	obj, err := canon.AppendObject(members[:0], raw)
	if err != nil {
		return nil, false
	}
	e := &ratelimitv3.RateLimitDescriptor_Entry{}
	for _, m := range obj {
		var ok bool
		switch m.Name() {
		case "key":
			e.Key, ok = jsonString(m.Value)
		case "value":
			e.Value, ok = jsonString(m.Value)
		}
		if !ok {
			return nil, false
		}
	}
	return e, true
}

// jsonList reads raw as an array of items, each read by item; nil when it
// is empty, as protojson leaves an empty list.
func jsonList[T any](raw json.RawMessage, item func(json.RawMessage) (*T, bool)) ([]*T, bool) {
	var elems [4]json.RawMessage
	arr, err := canon.AppendArray(elems[:0], raw)
	if err != nil {
		return nil, false
	}
	if len(arr) == 0 {
		return nil, true
	}
	items := make([]*T, len(arr))
	for i, raw := range arr {
		var ok bool
		if items[i], ok = item(raw); !ok {
			return nil, false
		}
	}
	return items, true
}

// jsonString reads a JSON string as canon.String does, refusing null
// (which canon.String reads as "") and a string holding U+FFFD: that is
// what encoding/json, behind canon.String, makes of a lone surrogate
// escape ("\ud800"), which protojson refuses.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	s, ok := canon.String(raw)
	return s, ok && !strings.Contains(s, "\uFFFD")
}
