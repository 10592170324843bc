package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrDuplicate is returned by Object for a member named twice. Parsers
// disagree on such documents (encoding/json keeps the last, others the
// first), so a gateway and Tollgate could read two different requests from
// one body.
var ErrDuplicate = errors.New("canon: duplicate member")

// ErrNotObject is returned by Object for a body that is not exactly one
// JSON object.
var ErrNotObject = errors.New("canon: not a JSON object")

// Object parses b as one JSON object and returns its members, unparsed.
// Member names are compared after unescaping ("a" and "\u0061" are the same
// name). Nested values are checked for syntax only. Trailing data after the
// object is ErrNotObject.
func Object(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, ErrNotObject
	}
	obj := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, ErrNotObject
		}
		name, _ := t.(string) // inside an object, Token returns names as strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, ErrNotObject
		}
		if _, dup := obj[name]; dup {
			return nil, fmt.Errorf("%w %q", ErrDuplicate, name)
		}
		obj[name] = v
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, ErrNotObject
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, ErrNotObject
	}
	return obj, nil
}
