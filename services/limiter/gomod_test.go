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
// copies are the lines that work. Then the same with the lines the README
// tells Gin users to add, and a Gin server. The build runs offline (GOPROXY=off) on the
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

	buildOutside(t, goMod, program)

	// The README's words for Gin users: ginlimit added to both lists.
	const lib = "github.com/tollgate/tollgate/pkg/limiter"
	withGin := goMod
	for _, line := range []string{"\t" + lib + " v0.0.0\n", "\t" + lib + " => " + readmeClone + "pkg/limiter\n"} {
		require.Equal(t, 1, strings.Count(withGin, line), "the README's go.mod has %q", line)
		withGin = strings.Replace(withGin, line, line+strings.ReplaceAll(line, "pkg/limiter", "pkg/limiter/ginlimit"), 1)
	}
	buildOutside(t, withGin, ginProgram)
}

// ginProgram is the smallest server of a Gin user.
const ginProgram = `package main

import (
	"log"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/ginlimit"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

func main() {
	api := limiter.Policy{Name: "api", Algorithm: limiter.SlidingWindow, Limit: 100, Window: time.Minute}
	lim, err := httplimit.New(memstore.New(), []limiter.Policy{api})
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(ginlimit.New(lim))
	log.Fatal(router.Run("127.0.0.1:8081"))
}
`

// buildOutside writes goMod, the clone's path made this repository's, and
// program into a new module in a temporary folder and builds it offline with
// GOWORK=off. It skips the test when the module cache lacks a third-party
// module.
func buildOutside(t *testing.T, goMod, program string) {
	t.Helper()
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
		t.Skipf("the module cache lacks a module the program needs; run go mod download in the Tollgate modules it imports:\n%s", out)
	}
	require.NoError(t, err, "the go.mod:\n%s\ndoes not build the program:\n%s", goMod, out)
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
