package canon_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/canon"
)

// Each spelling of /orders that the issue listed is one endpoint under the
// foldings that cover it; NFC is always applied.
func TestEndpointVariantsFold(t *testing.T) {
	tests := []struct {
		in   string
		fold canon.Fold
		want string
	}{
		{"/orders/", canon.FoldTrailingSlash, "/orders"},
		{"/Orders", canon.FoldCase, "/orders"},
		{"//orders", canon.FoldSlashes, "/orders"},
		{"/a//b///c", canon.FoldSlashes, "/a/b/c"},
		{"/%6Frders", canon.FoldPercent, "/orders"},
		{"/%6frders%2f%7e", canon.FoldPercent, "/orders%2F~"},
		{"/100%", canon.FoldPercent, "/100%"},
		{"/x%4", canon.FoldPercent, "/x%4"},
		{" /orders ", canon.FoldSpace, "/orders"},
		{"/orders?page=2", canon.FoldQuery, "/orders"},
		{"/orders#top", canon.FoldQuery, "/orders"},
		{"/", canon.FoldTrailingSlash, "/"},
		{"//", canon.FoldAll, "/"},
		{" //Orders/%6Fne/?x ", canon.FoldAll, "/orders/one"},
		{"/orders ?x", canon.FoldAll, "/orders"},
		{"/a/./b", canon.FoldDots, "/a/b"},
		{"/a/b/../c", canon.FoldDots, "/a/c"},
		{"/../../a", canon.FoldDots, "/a"},
		{"/a/b/..", canon.FoldDots, "/a/"},
		{"/a/%2E%2E/b", canon.FoldPercent | canon.FoldDots, "/b"},
		{"a/../b", canon.FoldDots, "a/../b"},
		{"/a/.b/..c", canon.FoldDots, "/a/.b/..c"},
		{"caf\u0065\u0301", 0, "caf\u00e9"}, // NFD -> NFC, always
		{"caf\u00e9", 0, "caf\u00e9"},
		{"/Orders/", 0, "/Orders/"}, // no folding asked: only NFC
	}
	for _, tt := range tests {
		got, err := canon.Endpoint(tt.in, tt.fold)
		require.NoError(t, err, "%q", tt.in)
		assert.Equal(t, tt.want, got, "%q folded %s", tt.in, tt.fold)
	}
}

func TestEndpointRefusesControlCharacters(t *testing.T) {
	for _, in := range []string{"a\x00b", "\x00", "/orders\n", "\t/x", "a\x7fb", "a\u0085b", "a\u009bb"} {
		_, err := canon.Endpoint(in, canon.FoldAll)
		assert.ErrorIs(t, err, canon.ErrControl, "%q", in)
	}
	_, err := canon.Endpoint("a\xffb", 0)
	assert.ErrorIs(t, err, canon.ErrInvalidUTF8)
}

func TestParseFold(t *testing.T) {
	f, err := canon.ParseFold([]string{"case", "slashes"})
	require.NoError(t, err)
	assert.Equal(t, canon.FoldCase|canon.FoldSlashes, f)
	assert.Equal(t, "slashes,case", f.String())
	f, err = canon.ParseFold([]string{"all"})
	require.NoError(t, err)
	assert.Equal(t, canon.FoldAll, f)
	_, err = canon.ParseFold([]string{"cases"})
	assert.ErrorContains(t, err, `unknown folding "cases"`)
}

func TestObjectRefusesDuplicateMembers(t *testing.T) {
	for _, in := range []string{
		`{"endpoint":"a","endpoint":"b"}`,
		`{"endpoint":"a","endp\u006fint":"b"}`,
		`{"policy":"p","key":"k","cost":1,"cost":3}`,
	} {
		_, err := canon.AppendObject(nil, []byte(in))
		assert.ErrorIs(t, err, canon.ErrDuplicate, in)
	}
	obj, err := canon.AppendObject(nil, []byte(` {"endpoint":"a","nested":{"x":1,"x":2},"n":[1,{"y":2}]} `))
	require.NoError(t, err, "duplicates below the top level are not read, so not refused")
	endpoint, found := obj.Get("endpoint")
	assert.True(t, found)
	assert.Equal(t, json.RawMessage(`"a"`), endpoint)
	assert.Len(t, obj, 3)
	for _, in := range []string{``, `[]`, `"x"`, `{"a":1} x`, `{"a":1}{"b":2}`, `{"a":}`, `{"a":1`, `null`, `{1:2}`} {
		_, err := canon.AppendObject(nil, []byte(in))
		assert.ErrorIs(t, err, canon.ErrNotObject, in)
	}
}

func FuzzEndpoint(f *testing.F) {
	for _, s := range []string{"/orders", " //Orders/%6F?x", "caf\u0065\u0301", "a\x00", "/orders ?x", "/a/./b", "/a/../b", "/a/.%2E/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := canon.Endpoint(s, canon.FoldAll)
		if err != nil {
			return
		}
		again, err := canon.Endpoint(got, canon.FoldAll)
		require.NoError(t, err)
		assert.Equal(t, got, again, "folding is idempotent")
	})
}

// Names equal under Unicode case folding are duplicates: encoding/json (and
// so many gateways written in Go) matches a member to a field
// case-insensitively and keeps the last match, so {"endpoint":"a",
// "ENDPOINT":"b"} would be "b" to it and "a" to an exact reader.
func TestObjectRefusesNamesEqualUnderCaseFolding(t *testing.T) {
	many := `"m1":1,"m2":2,"m3":3,"m4":4,"m5":5,"m6":6,"m7":7,"m8":8,"m9":9,`
	for _, in := range []string{
		`{"endpoint":"a","ENDPOINT":"b"}`,
		`{"Endpoint":"a","endpoint":"b"}`,
		`{"policy":"p","key":"k","\u212Aey":"k2"}`, // KELVIN SIGN folds to k
		`{"ſum":1,"SUM":2}`,                        // LONG S folds to s
		`{` + many + `"key":"a","KEY":"b"}`,        // past smallObject: the set
		`{` + many + `"kEy":"a","\u212AEY":"b"}`,
	} {
		_, err := canon.AppendObject(nil, []byte(in))
		assert.ErrorIs(t, err, canon.ErrDuplicate, in)
	}
	obj, err := canon.AppendObject(nil, []byte(`{`+many+`"key":"a","keys":"b","kex":1}`))
	require.NoError(t, err, "different names are not duplicates")
	assert.Len(t, obj, 12)
}
