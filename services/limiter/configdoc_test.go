package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// configDocYAML returns the YAML blocks of docs/configuration.md's section
// headed "## heading", each written to a file.
func configDocYAML(t *testing.T, heading string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	require.NoError(t, err)
	_, section, found := strings.Cut(string(doc), "\n## "+heading+"\n")
	require.True(t, found, "docs/configuration.md has %q", heading)
	section, _, _ = strings.Cut(section, "\n## ")
	var files []string
	for i, part := range strings.Split(section, "```yaml\n")[1:] {
		block, _, found := strings.Cut(part, "```")
		require.True(t, found)
		file := filepath.Join(t.TempDir(), fmt.Sprintf("%d.yaml", i))
		require.NoError(t, os.WriteFile(file, []byte(block), 0o600))
		files = append(files, file)
	}
	require.NotEmpty(t, files, "%q shows a YAML file", heading)
	return files
}

// TestConfigurationDocDefaultsAreTheDefaults: the policies and routes the
// reference calls the defaults, loaded as a file, are exactly what the
// service runs without one; and the example file loads, merged with them.
func TestConfigurationDocDefaultsAreTheDefaults(t *testing.T) {
	none, err := config.Load(nil, noEnv)
	require.NoError(t, err)
	defaults := configDocYAML(t, "Policies and routes: the file MERGES with the defaults")
	require.Len(t, defaults, 1)
	shown, err := config.Load([]string{"--config", defaults[0]}, noEnv)
	require.NoError(t, err)
	assert.Equal(t, none.Policies, shown.Policies)
	assert.Equal(t, none.RoutePolicies, shown.RoutePolicies)

	example := configDocYAML(t, "A file")
	require.Len(t, example, 1)
	c, err := config.Load([]string{"--config", example[0]}, noEnv)
	require.NoError(t, err, "the example file loads")
	assert.Equal(t, []string{"ping", "ping-daily"}, c.RoutePolicies[config.RoutePing])
	assert.Equal(t, []string{"check", "check-new"}, c.RoutePolicies[config.RouteCheck])
	assert.Len(t, c.Policies, 5)
}
