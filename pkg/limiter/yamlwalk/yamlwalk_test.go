package yamlwalk

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func root(t *testing.T, text string) *yaml.Node {
	t.Helper()
	n, err := OneDocument([]byte(text))
	require.NoError(t, err)
	return n
}

func TestOneDocument(t *testing.T) {
	for _, empty := range []string{"", "\n  \n", "# only a comment\n", "---\n", "~\n"} {
		_, err := OneDocument([]byte(empty))
		assert.ErrorIs(t, err, ErrEmpty, "%q", empty)
	}
	_, err := OneDocument([]byte("a: 1\n---\nb: 2\n"))
	var we *Error
	assert.True(t, errors.As(err, &we), "several documents: a walker error, not a syntax error")
	assert.EqualError(t, err, "holds more than one YAML document (the second at line 2): only the first would be read; keep one")
	_, err = OneDocument([]byte("a: ["))
	assert.EqualError(t, err, "yaml: line 1: did not find expected node content")
	n := root(t, "a: 1\n")
	assert.Equal(t, yaml.MappingNode, n.Kind)
}

// Mapping visits keys in file order with their dotted paths, and refuses
// what is not a mapping, keys that are not strings and repeated keys, each
// with the line.
func TestMapping(t *testing.T) {
	var seen []string
	err := Mapping(root(t, "b: 1\na: 2\nc: 3\n"), "top", func(path string, k, v *yaml.Node) error {
		seen = append(seen, path+"="+v.Value)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"top.b=1", "top.a=2", "top.c=3"}, seen)

	noop := func(string, *yaml.Node, *yaml.Node) error { return nil }
	tests := []struct{ name, text, want string }{
		{"not a mapping", "- a\n", "x: must be a mapping (line 1)"},
		{"key given twice", "a: 1\nb: 2\na: 3\n", "x.a: key given twice (line 3)"},
		{"key not a string", "a: 1\n[1]: 2\n", "x: keys must be plain strings (line 2)"},
	}
	for _, tt := range tests {
		err := Mapping(root(t, tt.text), "x", noop)
		var we *Error
		require.True(t, errors.As(err, &we), tt.name)
		assert.EqualError(t, err, tt.want, tt.name)
	}

	stop := errors.New("stop")
	calls := 0
	err = Mapping(root(t, "a: 1\nb: 2\n"), "", func(string, *yaml.Node, *yaml.Node) error { calls++; return stop })
	assert.ErrorIs(t, err, stop, "a handler's error ends the walk unchanged")
	assert.Equal(t, 1, calls)
}

func TestFields(t *testing.T) {
	var a, b string
	handlers := map[string]Handler{
		"b": func(p string, v *yaml.Node) error { return Decode(p, v, &b, "a string") },
		"a": func(p string, v *yaml.Node) error { return Decode(p, v, &a, "a string") },
	}
	require.NoError(t, Fields(root(t, "a: x\nb: y\n"), "", handlers))
	assert.Equal(t, "x", a)
	assert.Equal(t, "y", b)
	err := Fields(root(t, "a: x\nzz: 1\n"), "r", handlers)
	assert.EqualError(t, err, "r.zz: unknown key (want one of a, b) (line 2)")
	err = Fields(root(t, "a: [1]\n"), "", handlers)
	assert.EqualError(t, err, "a: must be a string (line 1)")
}

func TestScalarsAndPaths(t *testing.T) {
	n := root(t, "a: 12\nb: [1]\n")
	s, err := Scalar("a", n.Content[1])
	require.NoError(t, err)
	assert.Equal(t, "12", s)
	_, err = Scalar("b", n.Content[3])
	assert.EqualError(t, err, "b: must be a single value (line 2)")
	var i int64
	require.NoError(t, Decode("a", n.Content[1], &i, "an integer"))
	assert.Equal(t, int64(12), i)
	assert.EqualError(t, Decode("b", n.Content[3], &i, "an integer"), "b: must be an integer (line 2)")

	assert.Equal(t, "k", Join("", "k"))
	assert.Equal(t, "p.k", Join("p", "k"))
	assert.Equal(t, "p[3]", Index("p", 3))
	assert.True(t, IsNull(nil))
	assert.True(t, IsNull(root(t, "a: ~\n").Content[1]))
	assert.False(t, IsNull(n.Content[1]))
	assert.Equal(t, "no line", (&Error{Reason: "no line"}).Error())
}
