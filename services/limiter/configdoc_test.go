package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfigurationDocListsEverySetting holds docs/configuration.md to
// --help, the settings' single source: every flag there is listed in the
// reference with its environment variable, its YAML key and its default, and
// the reference lists no flag that --help does not know.
func TestConfigurationDocListsEverySetting(t *testing.T) {
	var help bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"--help"}, noEnv, &help, &bytes.Buffer{}))
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	require.NoError(t, err)

	setting := regexp.MustCompile(`(?m)^  --([a-z0-9-]+)\n .*\n +env (LIMITER_[A-Z0-9_]+), default (.*)$`)
	flags := setting.FindAllStringSubmatch(help.String(), -1)
	require.Greater(t, len(flags), 40, "--help's settings were found")
	for _, f := range flags {
		name, env, def := f[1], f[2], f[3]
		if def != "none" {
			def = "`" + def + "`"
		}
		where := "YAML `" + strings.ReplaceAll(name, "-", "_") + "`"
		if name == "config" {
			where = "never in the file itself"
		}
		want := "- `--" + name + "` (`" + env + "`, " + where + "; default " + def + "): "
		assert.Contains(t, string(doc), want, "docs/configuration.md lists --%s as --help does", name)
	}
	listed := regexp.MustCompile("(?m)^- `--([a-z0-9-]+)` ").FindAllStringSubmatch(string(doc), -1)
	assert.Len(t, listed, len(flags), "docs/configuration.md lists as many settings as --help")
}
