package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// ErrDuplicate is returned by Object for a member named twice, names
// compared under Unicode case folding ("endpoint" and "ENDPOINT" are one
// name). Parsers disagree on such documents (encoding/json keeps the last,
// others the first, and encoding/json matches names case-insensitively), so
// a gateway and Tollgate could read two different requests from one body.
var ErrDuplicate = errors.New("canon: duplicate member")

// ErrNotObject is returned by Object for a body that is not exactly one
// JSON object.
var ErrNotObject = errors.New("canon: not a JSON object")

// maxDepth is how deeply a member's value may nest arrays and objects, as
// encoding/json allows.
const maxDepth = 10000

// Members are a JSON object's members in document order, unparsed.
type Members []Member

// Member is one member of an object: its name, unescaped, and its value's
// bytes without the whitespace around them. Both alias the parsed bytes when
// they can.
type Member struct {
	name  []byte
	Value json.RawMessage
}

// Name returns the member's name.
func (m Member) Name() string { return string(m.name) }

// Get returns the value of the member named name.
func (ms Members) Get(name string) (json.RawMessage, bool) {
	for _, m := range ms {
		if string(m.name) == name {
			return m.Value, true
		}
	}
	return nil, false
}

// smallObject is how many members AppendObject checks for duplicates by
// comparing names pairwise; past it, a set (so that a body of many members
// costs linear time, not quadratic).
const smallObject = 8

// ErrNotArray is returned by AppendArray for bytes that are not exactly one
// JSON array.
var ErrNotArray = errors.New("canon: not a JSON array")

// AppendObject parses b as one JSON object and appends its members to
// dst[:0] (a caller's array spares the allocation). Member names are
// compared after unescaping ("a" and "\u0061" are the same name; invalid
// UTF-8 and lone surrogates read as U+FFFD, as encoding/json reads them)
// and under Unicode case folding: a name given twice is ErrDuplicate.
// Nested values are checked for syntax only, as encoding/json checks them.
// Trailing data after the object is ErrNotObject.
//
// It is a single pass over b, on every request that has a JSON body: an
// escaped name is the only allocation of an object of up to smallObject
// members, besides dst's growth.
func AppendObject(dst Members, b []byte) (Members, error) {
	p := scanner{b: b}
	obj := dst[:0]
	var seen map[string]struct{}
	err := p.document('{', ErrNotObject, func() error {
		name, ok := p.name()
		if !ok {
			return ErrNotObject
		}
		p.space()
		if !p.eat(':') {
			return ErrNotObject
		}
		p.space()
		start := p.i
		if !p.value(0) {
			return ErrNotObject
		}
		if duplicate(obj, &seen, name) {
			return fmt.Errorf("%w %q", ErrDuplicate, name)
		}
		obj = append(obj, Member{name: name, Value: json.RawMessage(b[start:p.i:p.i])})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// AppendArray parses b as one JSON array and appends its elements' bytes,
// without the whitespace around them, to dst[:0] (a caller's array spares
// the allocation); they alias b. Elements are checked for syntax only, as
// encoding/json checks them (an object's names may repeat). Trailing data
// after the array is ErrNotArray.
func AppendArray(dst []json.RawMessage, b []byte) ([]json.RawMessage, error) {
	p := scanner{b: b}
	elems := dst[:0]
	err := p.document('[', ErrNotArray, func() error {
		start := p.i
		if !p.value(0) {
			return ErrNotArray
		}
		elems = append(elems, json.RawMessage(b[start:p.i:p.i]))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return elems, nil
}

// document reads all of p.b as one object or array, opening with open,
// with only whitespace around it: item reads each member or element from
// its first byte on and returns its error. Bad syntax around the items is
// notIt. (item reaches p through its closure: a scanner passed to it would
// escape to the heap.)
func (p *scanner) document(open byte, notIt error, item func() error) error {
	end := byte(']')
	if open == '{' {
		end = '}'
	}
	p.space()
	if !p.eat(open) {
		return notIt
	}
	p.space()
	if !p.eat(end) {
		for {
			p.space()
			if err := item(); err != nil {
				return err
			}
			p.space()
			if p.eat(',') {
				continue
			}
			if p.eat(end) {
				break
			}
			return notIt
		}
	}
	p.space()
	if p.i != len(p.b) {
		return notIt
	}
	return nil
}

// duplicate reports whether a name equal to name under Unicode case
// folding (bytes.EqualFold, which is how encoding/json matches names to
// fields) is among obj's names and, past smallObject members, records it in
// *seen, built on first use.
func duplicate(obj Members, seen *map[string]struct{}, name []byte) bool {
	if len(obj) < smallObject {
		for _, m := range obj {
			if bytes.EqualFold(m.name, name) {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*len(obj))
		for _, m := range obj {
			(*seen)[foldKey(m.name)] = struct{}{}
		}
	}
	k := foldKey(name)
	if _, found := (*seen)[k]; found {
		return true
	}
	(*seen)[k] = struct{}{}
	return false
}

// foldKey maps name to one spelling of its case-folding class: each rune
// the smallest of its simple folding orbit, so that foldKey(a) ==
// foldKey(b) exactly when bytes.EqualFold(a, b).
func foldKey(name []byte) string {
	b := make([]byte, 0, len(name))
	for _, r := range string(name) {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b = utf8.AppendRune(b, least)
	}
	return string(b)
}

// scanner reads JSON (RFC 8259, as encoding/json accepts it) from b at i.
type scanner struct {
	b []byte
	i int
}

// space skips JSON whitespace.
func (p *scanner) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// eat consumes c when it is next.
func (p *scanner) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// name reads a member name and returns it unescaped as encoding/json
// unescapes it: its bytes in b when it has no escape and is ASCII.
func (p *scanner) name() ([]byte, bool) {
	start := p.i
	plain, ok := p.str()
	if !ok {
		return nil, false
	}
	raw := p.b[start:p.i]
	if plain {
		return raw[1 : len(raw)-1 : len(raw)-1], true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil { // cannot fail on a string str accepted
		return nil, false
	}
	return []byte(s), true
}

// str reads a string; plain says it has no escape and only ASCII bytes, so
// that its bytes are its value.
func (p *scanner) str() (plain, ok bool) {
	if !p.eat('"') {
		return false, false
	}
	plain = true
	for p.i < len(p.b) {
		c := p.b[p.i]
		p.i++
		switch {
		case c == '"':
			return plain, true
		case c < 0x20:
			return false, false
		case c >= 0x80:
			plain = false
		case c == '\\':
			plain = false
			if p.i >= len(p.b) {
				return false, false
			}
			e := p.b[p.i]
			p.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if p.i+4 > len(p.b) {
					return false, false
				}
				for _, h := range p.b[p.i : p.i+4] {
					if !isHex(h) {
						return false, false
					}
				}
				p.i += 4
			default:
				return false, false
			}
		}
	}
	return false, false
}

// value reads any JSON value; depth is how many arrays and objects enclose
// it within the member's value.
func (p *scanner) value(depth int) bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return false
		}
		return p.container(depth + 1)
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return false
}

// container reads an array or an object, whose opening bracket is next.
func (p *scanner) container(depth int) bool {
	object := p.b[p.i] == '{'
	end := byte(']')
	if object {
		end = '}'
	}
	p.i++
	p.space()
	if p.eat(end) {
		return true
	}
	for {
		p.space()
		if object {
			if _, ok := p.str(); !ok {
				return false
			}
			p.space()
			if !p.eat(':') {
				return false
			}
			p.space()
		}
		if !p.value(depth) {
			return false
		}
		p.space()
		if p.eat(',') {
			continue
		}
		return p.eat(end)
	}
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *scanner) number() bool {
	p.eat('-')
	switch {
	case p.eat('0'):
	case p.digits() == 0:
		return false
	}
	if p.eat('.') && p.digits() == 0 {
		return false
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if p.digits() == 0 {
			return false
		}
	}
	return true
}

// digits skips decimal digits and returns how many.
func (p *scanner) digits() int {
	start := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// literal reads word.
func (p *scanner) literal(word string) bool {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return false
	}
	p.i += len(word)
	return true
}

// String reads a member's value as a string the way json.Unmarshal reads it
// into a string, except that a value holding invalid UTF-8 (which
// json.Unmarshal would silently turn into U+FFFD) is refused, as is a value
// that is not a JSON string. A string without escapes is its bytes, read
// without encoding/json.
func String(raw json.RawMessage) (string, bool) {
	if !utf8.Valid(raw) {
		return "", false
	}
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && bytes.IndexByte(raw[1:n-1], '\\') < 0 &&
		bytes.IndexByte(raw[1:n-1], '"') < 0 && !hasControl(raw[1:n-1]) {
		return string(raw[1 : n-1]), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// hasControl says whether b holds a byte below 0x20, which a JSON string
// may not hold unescaped.
func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}
