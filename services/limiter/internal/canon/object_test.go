package canon_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/canon"
)

// referenceObject is Object as encoding/json's Decoder reads it, token by
// token: the definition Object's single pass must agree with.
func referenceObject(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, canon.ErrNotObject
	}
	obj := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, canon.ErrNotObject
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, canon.ErrNotObject
		}
		if _, dup := obj[name]; dup {
			return nil, fmt.Errorf("%w %q", canon.ErrDuplicate, name)
		}
		obj[name] = v
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, canon.ErrNotObject
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, canon.ErrNotObject
	}
	return obj, nil
}

// object is AppendObject's result as a map, for comparisons.
func object(b []byte) (map[string]json.RawMessage, error) {
	ms, err := canon.AppendObject(nil, b)
	if err != nil {
		return nil, err
	}
	obj := make(map[string]json.RawMessage, len(ms))
	for _, m := range ms {
		obj[m.Name()] = m.Value
		if v, ok := ms.Get(m.Name()); !ok || !bytes.Equal(v, m.Value) {
			return nil, fmt.Errorf("Get(%q) = %q, %v: not the member's value %q", m.Name(), v, ok, m.Value)
		}
	}
	if len(obj) != len(ms) {
		return nil, fmt.Errorf("%d members but %d names: a duplicate went through", len(ms), len(obj))
	}
	return obj, nil
}

// sameAsReference fails t when AppendObject and referenceObject disagree on
// b.
func sameAsReference(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := referenceObject(b)
	got, err := object(b)
	if wantErr != nil {
		require.Error(t, err, "%q: the reference refuses it: %v", b, wantErr)
		assert.Equal(t, wantErr.Error(), err.Error(), "%q", b)
		return
	}
	require.NoError(t, err, "%q", b)
	assert.Equal(t, want, got, "%q", b)
}

var objectCases = []string{
	``, ` `, `{}`, ` { } `, `{`, `}`, `[]`, `"x"`, `null`, `1`, `{} `, "{}\n\t\r", `{}x`, `{}{}`, "\ufeff{}",
	`{"a":1}`, `{"a" : 1 , "b" : "x" }`, `{"a":1,}`, `{,"a":1}`, `{"a":1 "b":2}`, `{"a"}`, `{"a":}`, `{a:1}`, `{1:2}`, `{'a':1}`,
	`{"policy":"p","key":"k","cost":1}`, `{"endpoint":"/orders"}`, `{"endpoint":"a","endpoint":"b"}`,
	`{"endpoint":"a","endp\u006fint":"b"}`, `{"a":1,"a":}`, `{"\ud800":1,"\udbff":2}`, "{\"\xff\":1,\"\xfe\":2}",
	`{"é":1,"\u00e9":2}`, `{"a\"b":1}`, `{"a\/b":1,"a/b":2}`, `{"a\x":1}`, `{"a\u12":1}`, `{"a\u12g4":1}`, "{\"a\x01\":1}", "{\"a\x7f\":1}",
	`{"n":0}`, `{"n":-0}`, `{"n":01}`, `{"n":-}`, `{"n":1.}`, `{"n":.5}`, `{"n":1.5e}`, `{"n":1e+}`, `{"n":1E-7}`, `{"n":-12.5e+3}`, `{"n":+1}`,
	`{"n":1x}`, `{"n":0x10}`, `{"n":Infinity}`, `{"n":NaN}`,
	`{"t":true,"f":false,"z":null}`, `{"t":tru}`, `{"t":truex}`, `{"t":nul}`, `{"t":True}`,
	`{"v":[1,{"y":2},[],{}]}`, `{"v":[1,]}`, `{"v":[,1]}`, `{"v":{"x":1,"x":2}}`, `{"v":{"x"}}`, `{"v":{1:2}}`, `{"v":[1 2]}`, `{"v":"\t"}`,
	"{\"v\":\"a\tb\"}", "{\"v\":\"\xff\"}", `{"v":"\u0000"}`, `{"v":[`, `{"v":{`, `{"v":"`, `{"v":"\`,
}

func TestObjectAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range objectCases {
		sameAsReference(t, []byte(in))
	}
	// Many members: past smallObject, duplicates are found through a set.
	for _, n := range []int{7, 8, 9, 40} {
		var sb strings.Builder
		sb.WriteString("{")
		for i := range n {
			fmt.Fprintf(&sb, `"m%d":%d,`, i, i)
		}
		for _, last := range []string{`"m0":0}`, `"m7":0}`, `"m8":0}`, fmt.Sprintf(`"m%d":0}`, n-1), `"other":0}`} {
			sameAsReference(t, []byte(sb.String()+last))
		}
	}
	// Nesting: encoding/json allows a value 10,000 arrays or objects deep.
	for _, depth := range []int{9999, 10000, 10001} {
		for _, open := range []string{"[", `{"x":`} {
			closeWith := "]"
			if open != "[" {
				closeWith = "}"
			}
			in := `{"a":` + strings.Repeat(open, depth) + "1" + strings.Repeat(closeWith, depth) + "}"
			sameAsReference(t, []byte(in))
		}
	}
}

func FuzzObject(f *testing.F) {
	for _, in := range objectCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsReference(t, b) })
}

// BenchmarkObject reads a /v1/check body.
func BenchmarkObject(b *testing.B) {
	body := []byte(`{"policy":"bench","key":"bench0a1b2c3d-memory-r0-12345","cost":1}`)
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		var members [4]canon.Member
		for b.Loop() {
			if _, err := canon.AppendObject(members[:0], body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := referenceObject(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// referenceArray is AppendArray as encoding/json's Decoder reads it,
// element by element.
func referenceArray(b []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, canon.ErrNotArray
	}
	elems := []json.RawMessage{}
	for dec.More() {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, canon.ErrNotArray
		}
		elems = append(elems, v)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim(']') {
		return nil, canon.ErrNotArray
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, canon.ErrNotArray
	}
	return elems, nil
}

// sameArrayAsReference fails t when AppendArray and referenceArray disagree
// on b.
func sameArrayAsReference(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := referenceArray(b)
	var elems [2]json.RawMessage
	got, err := canon.AppendArray(elems[:0], b)
	if wantErr != nil {
		require.ErrorIs(t, err, canon.ErrNotArray, "%q: the reference refuses it", b)
		return
	}
	require.NoError(t, err, "%q", b)
	assert.Equal(t, want, append([]json.RawMessage{}, got...), "%q", b)
}

var arrayCases = []string{
	``, ` `, `[]`, ` [ ] `, `[`, `]`, `{}`, `"x"`, `null`, `1`, `[] `, "[]\n\t\r", `[]x`, `[][]`, "\ufeff[]",
	`[1]`, `[ 1 , "a" , null ]`, `[1,]`, `[,1]`, `[1 2]`, `[1,,2]`, `[[]]`, `[{}]`, `[[1,[2]],{"a":[3]}]`,
	`[{"entries":[{"key":"client","value":"k-1"}]}]`, `[{"a":1,"a":2}]`, `[{"a"}]`, `[{"a":}]`, `["\ud800"]`, "[\"\xff\"]",
	`[01]`, `[-]`, `[1.]`, `[1e]`, `[-12.5e+3]`, `[tru]`, `[nul]`, `["a\x"]`, "[\"a\tb\"]", `[[`, `["`, `[1`, `[1,`,
}

func TestArrayAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range arrayCases {
		sameArrayAsReference(t, []byte(in))
	}
	// Past the caller's array, the elements go to a new one.
	sameArrayAsReference(t, []byte(`[1,2,3,4,5]`))
	// Nesting: encoding/json allows an element 10,000 arrays deep.
	for _, depth := range []int{9999, 10000, 10001} {
		sameArrayAsReference(t, []byte("["+strings.Repeat("[", depth)+strings.Repeat("]", depth)+"]"))
	}
}

func FuzzArray(f *testing.F) {
	for _, in := range arrayCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameArrayAsReference(t, b) })
}

// referenceString is what the handlers did before canon.String.
func referenceString(raw []byte) (string, bool) {
	var s string
	if !utf8.Valid(raw) || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

var stringCases = []string{`"abc"`, `""`, `"a\"b"`, `"caf\u00e9"`, `"café"`, "\"\xff\"", `"\ud800"`, "\"a\tb\"", `"a"b"`, `1`, `null`,
	`"abc" `, ` "abc"`, `"`, `"a\`, `"\\"`, `"</script>"`, `["a"]`}

func TestStringAgreesWithUnmarshal(t *testing.T) {
	for _, in := range stringCases {
		want, wantOK := referenceString([]byte(in))
		got, ok := canon.String([]byte(in))
		assert.Equal(t, wantOK, ok, "%q", in)
		assert.Equal(t, want, got, "%q", in)
	}
}

func FuzzString(f *testing.F) {
	for _, in := range stringCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantOK := referenceString(b)
		got, ok := canon.String(b)
		require.Equal(t, wantOK, ok, "%q", b)
		require.Equal(t, want, got, "%q", b)
	})
}

func BenchmarkString(b *testing.B) {
	raw := []byte(`"bench0a1b2c3d-memory-r0-12345"`)
	for _, impl := range []struct {
		name string
		f    func([]byte) (string, bool)
	}{{"canon", func(r []byte) (string, bool) { return canon.String(r) }}, {"unmarshal", referenceString}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := impl.f(raw); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}
