package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/envoy.md's table of envoyproxy/ratelimit's variables from peerVars")

// The markers around the generated table in docs/envoy.md.
const (
	peerTableBegin = "<!-- peerVars: generated from services/limiter/internal/config/peerenv.go by `make docs-tables`; do not edit -->\n"
	peerTableEnd   = "<!-- end of the peerVars table -->\n"
)

// peerTable renders peerVars as docs/envoy.md shows them: one row per
// variable, in the table's order, with the peer's default and what
// Tollgate does with it.
func peerTable() string {
	var b strings.Builder
	b.WriteString("| envoyproxy/ratelimit | its default | Tollgate |\n|---|---|---|\n")
	for _, v := range peerVars {
		def := "(unset)"
		if v.def != "" {
			def = "`" + v.def + "`"
		}
		var what string
		switch {
		case v.to != "":
			what = v.to
		case v.ignored != "":
			what = "accepted and ignored: " + v.ignored
		case v.def == "":
			what = "refused when set: " + v.refused
		default:
			what = "refused unless `" + v.def + "`: " + v.refused
		}
		b.WriteString("| `" + v.name + "` | " + def + " | " + strings.ReplaceAll(what, "|", `\|`) + " |\n")
	}
	return b.String()
}

// TestEnvoyDocPeerTable: docs/envoy.md's table of the peer's variables is
// peerVars, row for row: a row added, removed or changed on either side
// fails until `make docs-tables` (go test -run TestEnvoyDocPeerTable
// -update) rewrites the table.
func TestEnvoyDocPeerTable(t *testing.T) {
	path := filepath.Join("..", "..", "..", "..", "docs", "envoy.md")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(b)
	before, rest, found := strings.Cut(doc, peerTableBegin)
	require.True(t, found, "docs/envoy.md lacks the line %q", peerTableBegin)
	table, after, found := strings.Cut(rest, peerTableEnd)
	require.True(t, found, "docs/envoy.md lacks the line %q", peerTableEnd)
	want := peerTable()
	if *update && table != want {
		require.NoError(t, os.WriteFile(path, []byte(before+peerTableBegin+want+peerTableEnd+after), 0o644))
		table = want
	}
	have, wantRows := strings.Split(table, "\n"), strings.Split(want, "\n")
	for i := range max(len(have), len(wantRows)) {
		var h, w string
		if i < len(have) {
			h = have[i]
		}
		if i < len(wantRows) {
			w = wantRows[i]
		}
		require.Equal(t, w, h, "docs/envoy.md's table, line %d, is not peerVars': run make docs-tables", i+1)
	}
}
