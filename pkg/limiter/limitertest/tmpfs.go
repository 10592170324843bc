package limitertest

import (
	"os/exec"
	"testing"
)

// TmpFS mounts a file system of size (mount's syntax: "16m") on a new
// folder for the test, unmounts it at the end, and returns the folder. A
// store on it meets a full disk for real. Where mounting is not allowed
// (not root) the test is skipped with the reason.
func TmpFS(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("needs a tmpfs of %s (root): mount: %v %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}
