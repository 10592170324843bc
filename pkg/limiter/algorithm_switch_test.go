package limiter_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// TestNoDefaultInAlgorithmSwitches reads every Go file of the repository
// (pkg, services, tools) and fails on a switch that has a case naming an
// algorithm and a default that does not answer ErrUnknownAlgorithm: such a
// default would treat an algorithm it does not know as some other one. A
// switch over algorithms lists every algorithm it handles, and the rest is
// limiter.ErrUnknownAlgorithm (after the switch, or in its default).
func TestNoDefaultInAlgorithmSwitches(t *testing.T) {
	names := map[string]bool{}
	for _, a := range limiter.Algorithms {
		names[constName(a)] = true
	}
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	switches := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "bin" || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok || !namesAlgorithm(sw, names) {
				return true
			}
			switches++
			for _, s := range sw.Body.List {
				if cc := s.(*ast.CaseClause); cc.List == nil && !mentions(cc, "ErrUnknownAlgorithm") {
					t.Errorf("%s: a switch over algorithms has a default: name every algorithm it handles and make the rest limiter.ErrUnknownAlgorithm", fset.Position(cc.Pos()))
				}
			}
			return true
		})
		return nil
	})
	assert.NoError(t, err)
	// The stores' decisions alone are four such switches: the walk must
	// have seen them, or it checked nothing.
	assert.GreaterOrEqual(t, switches, 4, "switches over algorithms found")
}

// constName returns the name of a's constant (FixedWindow for fixed_window).
func constName(a limiter.Algorithm) string {
	var b strings.Builder
	for part := range strings.SplitSeq(string(a), "_") {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// mentions reports whether name appears as an identifier in n.
func mentions(n ast.Node, name string) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == name {
			found = true
		}
		return !found
	})
	return found
}

// namesAlgorithm reports whether one of sw's cases names an algorithm
// constant (limiter.FixedWindow, or FixedWindow inside package limiter).
func namesAlgorithm(sw *ast.SwitchStmt, names map[string]bool) bool {
	for _, s := range sw.Body.List {
		for _, e := range s.(*ast.CaseClause).List {
			switch e := e.(type) {
			case *ast.Ident:
				if names[e.Name] {
					return true
				}
			case *ast.SelectorExpr:
				if names[e.Sel.Name] {
					return true
				}
			}
		}
	}
	return false
}
