package httplimit_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/library.md's "Use it in your Go server" program is Example_server: it
// parses, and every line of its main is a line of the example (the
// ListenAndServe line is the example's comment), so the code shown is code
// that compiles and runs.
func TestLibraryDocShowsExampleServer(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "library.md"))
	require.NoError(t, err)
	_, section, found := strings.Cut(string(doc), "## Use it in your Go server\n")
	require.True(t, found, "docs/library.md has the section")
	_, code, found := strings.Cut(section, "```go\n")
	require.True(t, found)
	code, _, found = strings.Cut(code, "```")
	require.True(t, found)
	_, err = parser.ParseFile(token.NewFileSet(), "main.go", code, 0)
	require.NoError(t, err, "docs/library.md's program parses")

	example, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	_, body, found := strings.Cut(code, "func main() {\n")
	require.True(t, found)
	lines := 0
	for line := range strings.SplitSeq(strings.TrimSuffix(strings.TrimSpace(body), "}"), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			assert.True(t, strings.Contains(string(example), line), "docs/library.md's line %q is not in example_test.go", line)
			lines++
		}
	}
	assert.GreaterOrEqual(t, lines, 8, "main's lines were found")
}
