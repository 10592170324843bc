// Package yamlwalk walks a YAML document node by node, the way a Tollgate
// configuration and the Envoy rules files are read: one document per file,
// mappings in file order, keys that are plain strings and given once, unknown
// keys refused with the list of known ones, and every problem naming the
// field's dotted path and its line.
//
// The walker's own problems are *Error values; a reader converts them to its
// own error type at its boundary (config.Error, envoy.ConfigError).
package yamlwalk

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a problem at one place of a document.
type Error struct {
	Path   string // dotted path: "policies.ping.limit", "descriptors[0].key"; "" for the root
	Line   int    // 1-based; 0 when the place has no line
	Reason string // without the line
}

// Errorf returns the *Error for path at node n (whose line it names, if any).
func Errorf(path string, n *yaml.Node, format string, args ...any) *Error {
	e := &Error{Path: path, Reason: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

// ReasonLine is the reason followed by " (line N)" when the line is known.
func (e *Error) ReasonLine() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d)", e.Reason, e.Line)
	}
	return e.Reason
}

// Error returns "path: reason (line N)".
func (e *Error) Error() string {
	if e.Path == "" {
		return e.ReasonLine()
	}
	return e.Path + ": " + e.ReasonLine()
}

// ErrEmpty is returned by OneDocument for a file without a document (empty,
// blanks or comments only) or whose document is null ("---" alone).
var ErrEmpty = errors.New("the file holds no YAML document")

// OneDocument returns the root node of data's one YAML document. A file of
// several documents is an *Error: only the first would be read, and a
// reader that silently ignored the rest would run on half a file. Any other
// error is the YAML decoder's (the text is not YAML).
func OneDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, next yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, ErrEmpty
	} else if err != nil {
		return nil, err
	}
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = next.Line
		}
		return nil, &Error{Reason: fmt.Sprintf("holds more than one YAML document (the second at line %d): only the first would be read; keep one", line)}
	}
	if len(doc.Content) == 0 || IsNull(doc.Content[0]) {
		return nil, ErrEmpty
	}
	return doc.Content[0], nil
}

// IsNull reports whether a value is absent: not given, or given with no
// value ("descriptors:" alone, "~", "null").
func IsNull(v *yaml.Node) bool {
	return v == nil || (v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null")
}

// Join is the dotted path of key under path ("" for the root).
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index is the path of a list's i-th item.
func Index(path string, i int) string {
	return fmt.Sprintf("%s[%d]", path, i)
}

// Mapping calls fn with every key of mapping m and its value, in file
// order; fpath is the key's dotted path. A node that is not a mapping, a
// key that is not a plain string and a key given twice are errors; so is
// any error fn returns, which stops the walk.
func Mapping(m *yaml.Node, path string, fn func(fpath string, k, v *yaml.Node) error) error {
	if m.Kind != yaml.MappingNode {
		return Errorf(path, m, "must be a mapping")
	}
	seen := make(map[string]bool, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return Errorf(path, k, "keys must be plain strings")
		}
		fpath := Join(path, k.Value)
		if seen[k.Value] {
			return Errorf(fpath, k, "key given twice")
		}
		seen[k.Value] = true
		if err := fn(fpath, k, v); err != nil {
			return err
		}
	}
	return nil
}

// Handler reads the value v of the field at path.
type Handler func(path string, v *yaml.Node) error

// Fields walks mapping m like Mapping, calling each key's handler; a key
// without one is an error listing the known keys.
func Fields(m *yaml.Node, path string, handlers map[string]Handler) error {
	return Mapping(m, path, func(fpath string, k, v *yaml.Node) error {
		h, ok := handlers[k.Value]
		if !ok {
			known := make([]string, 0, len(handlers))
			for name := range handlers {
				known = append(known, name)
			}
			sort.Strings(known)
			return Errorf(fpath, k, "unknown key (want one of %s)", strings.Join(known, ", "))
		}
		return h(fpath, v)
	})
}

// Scalar returns a scalar's text as written.
func Scalar(path string, v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode {
		return "", Errorf(path, v, "must be a single value")
	}
	return v.Value, nil
}

// Decode decodes a scalar into out (a *string, *bool, *int64, *float64...);
// want names what was expected ("an integer") in the error.
func Decode(path string, v *yaml.Node, out any, want string) error {
	if v.Kind != yaml.ScalarNode || v.Decode(out) != nil {
		return Errorf(path, v, "must be %s", want)
	}
	return nil
}
