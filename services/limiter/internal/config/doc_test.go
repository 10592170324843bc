package config

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfigurationDocListsEverySetting holds docs/configuration.md to the
// settings --help prints: each is listed in the reference with its
// environment variable, its YAML key and its default, and the reference
// lists no other flag.
func TestConfigurationDocListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "configuration.md"))
	require.NoError(t, err)
	all := append([]setting{configSetting, compatSetting}, settings...)
	for _, s := range all {
		def := "`" + s.def + "`"
		if s.def == "" {
			def = "none"
		}
		where := "YAML `" + s.yamlKey() + "`"
		if s.name == configSetting.name || s.name == compatSetting.name {
			where = "never in the file itself"
		}
		want := "- `--" + s.name + "` (`" + s.env() + "`, " + where + "; default " + def + "): "
		assert.Contains(t, string(doc), want, "docs/configuration.md lists --%s as --help does", s.name)
	}
	listed := regexp.MustCompile("(?m)^- `--([a-z0-9-]+)` ").FindAllString(string(doc), -1)
	assert.Len(t, listed, len(all), "docs/configuration.md lists as many settings as --help")
}
