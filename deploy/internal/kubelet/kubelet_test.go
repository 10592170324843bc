package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestContainerfileEnv(t *testing.T) {
	env, err := ContainerfileEnv(strings.NewReader("FROM scratch\nENV A=1 \\\n    B=/x\nUSER 1\nENV C=3\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"A=1", "B=/x", "C=3"}, env)
	_, err = ContainerfileEnv(strings.NewReader("ENV A 1\n"))
	assert.Error(t, err)
}

// TestUpdateSwapsDataAsTheKubeletDoes: after Update, every key reads the new
// content through its link, a removed key is gone, ..data names the one
// version folder left.
func TestUpdateSwapsDataAsTheKubeletDoes(t *testing.T) {
	dir := t.TempDir()
	WriteAtomic(t, dir, map[string]string{"a.yaml": "1", "b.yaml": "1"})
	Update(t, dir, map[string]string{"a.yaml": "2", "c.yaml": "2"})
	for k, want := range map[string]string{"a.yaml": "2", "c.yaml": "2"} {
		b, err := os.ReadFile(filepath.Join(dir, k))
		require.NoError(t, err, k)
		assert.Equal(t, want, string(b), k)
		link, err := os.Readlink(filepath.Join(dir, k))
		require.NoError(t, err)
		assert.Equal(t, filepath.Join("..data", k), link)
	}
	_, err := os.Lstat(filepath.Join(dir, "b.yaml"))
	assert.True(t, os.IsNotExist(err), "b.yaml was removed from the ConfigMap")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var versions []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "..2") {
			versions = append(versions, e.Name())
		}
	}
	require.Len(t, versions, 1)
	target, err := os.Readlink(filepath.Join(dir, "..data"))
	require.NoError(t, err)
	assert.Equal(t, versions[0], target)
}
