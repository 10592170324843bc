package main

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repo is the import path prefix of every package of the workspace.
const repo = "github.com/tollgate/tollgate/"

// stores are the library's store packages.
var stores = local("pkg/limiter/memstore", "pkg/limiter/sqlitestore", "pkg/limiter/redisstore")

// local returns the import paths of the workspace's paths.
func local(paths ...string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = repo + p
	}
	return out
}

// layerRule is one import rule of DESIGN.md ("Layout"): no package named by
// from (a path under repo; a trailing "/..." takes the folder's packages
// too), except those in except, imports a package that is or is under one
// of forbid (import paths), directly (direct) or through others.
type layerRule struct {
	why    string
	from   []string
	except []string
	forbid []string
	direct bool
}

var layerRules = []layerRule{
	{
		why:    "the library imports nothing of the service or the tools",
		from:   []string{"pkg/limiter/..."},
		forbid: local("services", "tools"),
	},
	{
		why:    "the library's root package imports none of its stores and no web framework",
		from:   []string{"pkg/limiter"},
		forbid: append([]string{"github.com/gin-gonic/gin", "net/http"}, stores...),
	},
	{
		why:    "in the service, only the store stack (internal/app) and the fallback's local memory store (internal/fallback) import a store",
		from:   []string{"services/limiter/..."},
		except: []string{"services/limiter/internal/app", "services/limiter/internal/fallback"},
		forbid: stores,
		direct: true,
	},
	{
		why:    "the configuration, the HTTP edge and the decision layer reach no store, even through another package",
		from:   []string{"services/limiter/internal/config", "services/limiter/internal/httpapi", "services/limiter/internal/decide"},
		forbid: stores,
	},
	{
		why:    "Envoy's transports, its rules and the snapshot never reach the HTTP edge",
		from:   []string{"services/limiter/internal/envoy", "services/limiter/internal/envoyrules", "services/limiter/internal/snapshot"},
		forbid: append(local("services/limiter/internal/httpapi"), "github.com/gin-gonic/gin"),
	},
	{
		why:    "the fallback and Envoy's rules and transports own their types and errors: they never reach the service's configuration",
		from:   []string{"services/limiter/internal/fallback", "services/limiter/internal/envoyrules", "services/limiter/internal/envoy"},
		forbid: local("services/limiter/internal/config"),
	},
	{
		why:    "the library imports no tracing framework: its stores tell a limiter.StoreObserver, which the service turns into spans",
		from:   []string{"pkg/limiter/..."},
		forbid: []string{"go.opentelemetry.io"},
	},
	{
		why:    "in the service, only internal/telemetry (and its test receiver) imports OpenTelemetry: the transports and the decision layer call its seams",
		from:   []string{"services/limiter/..."},
		except: []string{"services/limiter/internal/telemetry", "services/limiter/internal/telemetry/otlptest"},
		forbid: []string{"go.opentelemetry.io"},
		direct: true,
	},
	{
		why:    "atk and loadgen speak HTTP to a running service, like any client: they import nothing of the library or the service",
		from:   []string{"tools/atk/...", "tools/loadgen/..."},
		forbid: local("pkg", "services"),
	},
	{
		why:    "the lab drives the library, never the service",
		from:   []string{"tools/lab/..."},
		forbid: local("services"),
	},
	{
		why:    "no transport in the Envoy rule model, nor in the snapshot that holds it: no gRPC, no Gin, neither the HTTP edge nor Envoy's gRPC and JSON edge",
		from:   []string{"services/limiter/internal/envoyrules", "services/limiter/internal/snapshot"},
		forbid: append(local("services/limiter/internal/httpapi", "services/limiter/internal/envoy"), "google.golang.org/grpc", "github.com/gin-gonic/gin"),
	},
}

// listedPackage is what go list -json says of one package.
type listedPackage struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// workspacePackages lists every package of the workspace and their
// dependencies, with their direct imports.
func workspacePackages(t *testing.T) map[string]listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard",
		repo+"pkg/limiter/...", repo+"services/limiter/...", repo+"tools/...")
	cmd.Dir = "."
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// TestLayering checks DESIGN.md's import rules on the code with go list: a
// rule broken fails naming the package, the forbidden import and the chain
// of imports that reaches it.
func TestLayering(t *testing.T) {
	pkgs := workspacePackages(t)
	require.Contains(t, pkgs, repo+"services/limiter/internal/app", "go list did not see the service")
	for _, rule := range layerRules {
		var from []string
		for path := range pkgs {
			rel, ok := strings.CutPrefix(path, repo)
			if ok && matchesAny(rel, rule.from) && !slices.Contains(rule.except, rel) {
				from = append(from, path)
			}
		}
		require.NotEmpty(t, from, "rule %q names no package: %v", rule.why, rule.from)
		slices.Sort(from)
		for _, p := range from {
			if chain := forbiddenChain(pkgs, p, rule); chain != nil {
				t.Errorf("%s imports %s (%s)\n\tbut %s", trim(p), trim(chain[len(chain)-1]), chainText(chain), rule.why)
			}
		}
	}
}

// forbiddenChain returns the shortest chain of imports from p to a package
// rule forbids (direct imports only when rule.direct), or nil.
func forbiddenChain(pkgs map[string]listedPackage, p string, rule layerRule) []string {
	prev := map[string]string{p: ""}
	queue := []string{p}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[cur].Imports {
			if _, seen := prev[imp]; seen {
				continue
			}
			prev[imp] = cur
			if forbidden(imp, rule.forbid) {
				var chain []string
				for at := imp; at != ""; at = prev[at] {
					chain = append([]string{at}, chain...)
				}
				return chain
			}
			if !rule.direct && !pkgs[imp].Standard {
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// forbidden reports whether path is one of the prefixes or under one.
func forbidden(path string, prefixes []string) bool {
	for _, f := range prefixes {
		if path == f || strings.HasPrefix(path, f+"/") {
			return true
		}
	}
	return false
}

func matchesAny(rel string, patterns []string) bool {
	for _, pat := range patterns {
		if dir, ok := strings.CutSuffix(pat, "/..."); ok {
			if rel == dir || strings.HasPrefix(rel, dir+"/") {
				return true
			}
		} else if rel == pat {
			return true
		}
	}
	return false
}

func trim(p string) string { return strings.TrimPrefix(p, repo) }

func chainText(chain []string) string {
	parts := make([]string, len(chain))
	for i, c := range chain {
		parts[i] = trim(c)
	}
	return strings.Join(parts, " -> ")
}

// TestLayeringRuleCatches: each kind of rule fails on a graph that breaks it
// (a store reached through another package, a direct import, a standard
// library prefix), so that TestLayering's silence means the rules hold.
func TestLayeringRuleCatches(t *testing.T) {
	pkgs := map[string]listedPackage{
		repo + "services/limiter/internal/config": {ImportPath: repo + "services/limiter/internal/config", Imports: []string{"fmt", repo + "services/limiter/internal/canon"}},
		repo + "services/limiter/internal/canon":  {ImportPath: repo + "services/limiter/internal/canon", Imports: []string{repo + "pkg/limiter/redisstore"}},
		repo + "pkg/limiter/redisstore":           {ImportPath: repo + "pkg/limiter/redisstore"},
		repo + "pkg/limiter":                      {ImportPath: repo + "pkg/limiter", Imports: []string{"net/http"}},
		"fmt":                                     {ImportPath: "fmt", Standard: true},
		"net/http":                                {ImportPath: "net/http", Standard: true},
	}
	chain := forbiddenChain(pkgs, repo+"services/limiter/internal/config", layerRules[3])
	require.Equal(t, "services/limiter/internal/config -> services/limiter/internal/canon -> pkg/limiter/redisstore", chainText(chain))
	require.Nil(t, forbiddenChain(pkgs, repo+"services/limiter/internal/config", layerRules[2]), "a direct rule does not follow canon")
	require.NotNil(t, forbiddenChain(pkgs, repo+"services/limiter/internal/canon", layerRules[2]))
	require.Equal(t, []string{repo + "pkg/limiter", "net/http"}, forbiddenChain(pkgs, repo+"pkg/limiter", layerRules[1]))
}
