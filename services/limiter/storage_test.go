package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

// TestUnwritableDatabaseRefusesToStart: a database file that can be read
// but not written would fail every decision; the service refuses to start
// on it with one line and exit status 1.
func TestUnwritableDatabaseRefusesToStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limiter.db")
	args := []string{"--addr=127.0.0.1:0", "--sqlite-path=" + path, "--sqlite-disk-reserve=0"}
	s, err := sqlitestore.Open(path) // an existing database, schema and all
	require.NoError(t, err)
	require.NoError(t, s.Close())

	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(path, 0o444))
	} else {
		// Modes do not stop root: a read-only bind mount of the file does.
		if out, err := exec.Command("mount", "--bind", "-o", "ro", path, path).CombinedOutput(); err != nil {
			t.Skipf("needs a read-only bind mount (root): %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", path).Run() })
	}
	err = run(context.Background(), args, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
	var printed bytes.Buffer
	assert.Equal(t, 1, exitCode(err, &printed))
	line := strings.TrimSuffix(printed.String(), "\n")
	assert.NotContains(t, line, "\n", "one line")
	assert.Contains(t, line, "readonly")
}
