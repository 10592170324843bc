package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeGoModSection is the README section that tells another module how to
// depend on the library and the client.
const readmeGoModSection = "Use the library and the client from another module"

// readmeClone is where the README's go.mod lines expect the clone of this
// repository, relative to the new module.
const readmeClone = "../tollgate/"

// TestREADMEGoModLines creates a module outside the workspace holding the
// README's go.mod, exactly as shown but for the clone's path, and the
// README's program, and builds it with GOWORK=off: the lines a newcomer
// copies are the lines that work. The build runs offline (GOPROXY=off) on the
// module cache, so it is skipped, saying which module, when the cache lacks
// one; GOSUMDB=off because checksums cannot be looked up offline (the cache's
// modules were verified when they were downloaded), and -mod=mod lets the
// build add the requirements of Tollgate's modules as go mod tidy would.
func TestREADMEGoModLines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	goMod := readmeBlock(t, readmeGoModSection, "go.mod")
	program := readmeBlock(t, readmeGoModSection, "go")
	for _, imp := range []string{"/pkg/limiter/httplimit\"", "/services/limiter/client\""} {
		require.Contains(t, program, imp, "the README's program imports the middleware and the client")
	}
	replaces := regexp.MustCompile(`(?m)^\s*github\.com/tollgate/\S+ => `+regexp.QuoteMeta(readmeClone)).FindAllString(goMod, -1)
	assert.Len(t, replaces, 2, "one replace per Tollgate module the program imports, no more")

	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"),
		[]byte(strings.ReplaceAll(goMod, " => "+readmeClone, " => "+repo+"/")), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o600))

	build := exec.Command("go", "build", "-o", filepath.Join(dir, "yourservice"), ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOTOOLCHAIN=local")
	out, err := build.CombinedOutput()
	if err != nil && onlyCacheMisses(string(out)) {
		t.Skipf("the module cache lacks a module the README's program needs; run go mod download in services/limiter/client and pkg/limiter:\n%s", out)
	}
	require.NoError(t, err, "the README's go.mod and program do not build:\n%s", out)
	assert.FileExists(t, filepath.Join(dir, "yourservice"))
}

// onlyCacheMisses tells whether a failed offline build failed only because a
// third-party module is not in the module cache. A lookup of a Tollgate
// module, or one reported at the program's own imports, is a missing
// replace line: a failure of the README's lines, never a reason to skip.
func onlyCacheMisses(out string) bool {
	misses := 0
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.Contains(line, "lookup disabled by GOPROXY=off") {
			continue
		}
		if strings.Contains(line, "github.com/tollgate/") || strings.HasPrefix(line, "main.go:") {
			return false
		}
		misses++
	}
	return misses > 0
}
