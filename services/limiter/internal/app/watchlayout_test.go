package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// envoyRule is one domain's file: descriptor k at perMinute.
func envoyRule(domain string, perMinute int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n", domain, perMinute)
}

// watched is an app serving the Envoy folder at path, watching it.
type watched struct {
	app  *App
	logs *lines
	n    atomic.Int64
}

// watchFolder starts an app on the Envoy folder at path (a folder or a
// symbolic link to one) with the folder watch running until the test ends.
func watchFolder(t *testing.T, path string) *watched {
	t.Helper()
	args := []string{"--store=memory", "--envoy-config", path}
	cfg := load(t, args...)
	w := &watched{logs: &lines{}}
	a, err := New(context.Background(), cfg, WithClock(limitertest.NewClock(t0)), WithLogger(NewLogger(cfg, w.logs)),
		WithReload(func() (config.Config, error) { return config.Load(args, func(string) string { return "" }) }, nil))
	require.NoError(t, err)
	w.app = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.watchEnvoy(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		assert.NoError(t, a.Close())
	})
	w.logged(t, "the Envoy folder is watched") // changes before it would go unseen
	return w
}

// limit is domain's descriptor k limit per POST /json, 0 when none.
func (w *watched) limit(t *testing.T, domain string) uint32 {
	t.Helper()
	body, err := protojson.Marshal(req(domain, []string{"k", fmt.Sprint("v", w.n.Add(1))}))
	require.NoError(t, err)
	rec := send(t, w.app.Handler(), http.MethodPost, "/json", string(body), map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var resp rlsv3.RateLimitResponse
	require.NoError(t, protojson.Unmarshal(rec.Body.Bytes(), &resp))
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// until waits, generously, for domain to report want.
func (w *watched) until(t *testing.T, step, domain string, want uint32) {
	t.Helper()
	start := time.Now()
	if !assert.Eventually(t, func() bool { return w.limit(t, domain) == want }, 20*time.Second, 10*time.Millisecond) {
		t.Fatalf("%s: %s reports %d, want %d", step, domain, w.limit(t, domain), want)
	}
	t.Logf("%s: applied after %v", step, time.Since(start).Round(time.Millisecond))
}

// logged waits, generously, for a log line holding s.
func (w *watched) logged(t *testing.T, s string) {
	t.Helper()
	require.Eventually(t, func() bool { return len(w.logs.matching(s)) > 0 }, 20*time.Second, 10*time.Millisecond, "no log line holds %q", s)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o750))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
}

// swapLink points the symbolic link at link to target atomically, as
// `ln -sfn` through a rename does (envoyproxy/ratelimit's
// RUNTIME_ROOT/current, Kubernetes' ..data).
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".tmp"
	require.NoError(t, os.Symlink(target, tmp))
	require.NoError(t, os.Rename(tmp, link))
}

// Swapping a `current` symbolic link (envoyproxy/ratelimit's RUNTIME_ROOT
// layout) triggered no reload; afterwards the new target is watched.
func TestEnvoyWatchFollowsACurrentLinkSwap(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "v1", "a.yaml"), envoyRule("alpha", 5))
	require.NoError(t, os.Symlink(filepath.Join(root, "v1"), filepath.Join(root, "current")))
	w := watchFolder(t, filepath.Join(root, "current"))
	require.Equal(t, uint32(5), w.limit(t, "alpha"))

	writeFile(t, filepath.Join(root, "v2", "a.yaml"), envoyRule("alpha", 7))
	swapLink(t, filepath.Join(root, "v2"), filepath.Join(root, "current"))
	w.until(t, "current swapped", "alpha", 7)
	writeFile(t, filepath.Join(root, "v2", "b.yaml"), envoyRule("beta", 2))
	w.until(t, "a file written in the new target", "beta", 2)
}

// Kubernetes mounts a ConfigMap as links to ..data/<file>, ..data a link
// swapped to a new timestamped folder on each update.
func TestEnvoyWatchFollowsAConfigMapUpdate(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "..2026_01_01", "a.yaml"), envoyRule("alpha", 5))
	require.NoError(t, os.Symlink("..2026_01_01", filepath.Join(dir, "..data")))
	require.NoError(t, os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")))
	w := watchFolder(t, dir)
	require.Equal(t, uint32(5), w.limit(t, "alpha"))

	writeFile(t, filepath.Join(dir, "..2026_01_02", "a.yaml"), envoyRule("alpha", 8))
	swapLink(t, "..2026_01_02", filepath.Join(dir, "..data"))
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..2026_01_01")))
	w.until(t, "..data swapped", "alpha", 8)
}

// Removing and recreating the folder silently ended the watch; a file
// rewritten in place with a pause was applied half-written; when watching
// ends, a WARN says so.
func TestEnvoyWatchSurvivesTheFolderReplacedAndHalfWrittenFiles(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "conf")
	dir := filepath.Join(parent, "rules")
	writeFile(t, filepath.Join(dir, "a.yaml"), envoyRule("alpha", 5))
	w := watchFolder(t, dir)
	require.Equal(t, uint32(5), w.limit(t, "alpha"))

	require.NoError(t, os.RemoveAll(dir))
	w.logged(t, "reload refused")
	assert.Equal(t, uint32(5), w.limit(t, "alpha"), "the running rules stay while the folder is gone")
	writeFile(t, filepath.Join(dir, "a.yaml"), envoyRule("alpha", 9))
	w.until(t, "folder recreated", "alpha", 9)

	whole := envoyRule("alpha", 12)
	writeFile(t, filepath.Join(dir, "a.yaml"), whole[:len(whole)-2]) // "requests_per_unit: 1", parsed
	w.logged(t, "half-written")
	assert.Equal(t, uint32(9), w.limit(t, "alpha"), "a half-written file keeps the running rules")
	writeFile(t, filepath.Join(dir, "a.yaml"), whole)
	w.until(t, "file completed", "alpha", 12)

	require.NoError(t, os.RemoveAll(parent))
	w.logged(t, "no longer watched")
	assert.Contains(t, w.logs.matching("no longer watched")[0], "level=WARN")
}

// envoyproxy/ratelimit's runtime layout puts the swapped link above the
// rules folder: RUNTIME_ROOT/current -> v1, rules in current/config. A
// swap of current (ln -s v2 tmp && mv -T tmp current) left the limit at
// v1's: only a link at the watched path itself was followed.
func TestEnvoyWatchFollowsTheRuntimeRootLayout(t *testing.T) {
	root := t.TempDir()
	for v, perMinute := range map[string]int{"v1": 5, "v2": 50, "v3": 60} {
		writeFile(t, filepath.Join(root, v, "config", "a.yaml"), envoyRule("alpha", perMinute))
	}
	require.NoError(t, os.Symlink("v1", filepath.Join(root, "current")))
	w := watchFolder(t, filepath.Join(root, "current", "config"))
	require.Equal(t, uint32(5), w.limit(t, "alpha"))

	swapLink(t, "v2", filepath.Join(root, "current"))
	w.until(t, "current swapped to v2", "alpha", 50)
	require.NoError(t, os.RemoveAll(filepath.Join(root, "v1")))
	swapLink(t, "v3", filepath.Join(root, "current"))
	w.until(t, "current swapped to v3", "alpha", 60)
	writeFile(t, filepath.Join(root, "v3", "config", "b.yaml"), envoyRule("beta", 3))
	w.until(t, "a file written in v3's config", "beta", 3)
	writeFile(t, filepath.Join(root, "v2", "config", "b.yaml"), envoyRule("beta", 4))
	writeFile(t, filepath.Join(root, "v3", "config", "c.yaml"), envoyRule("gamma", 1))
	w.until(t, "a later file in v3's config", "gamma", 1)
	assert.Equal(t, uint32(3), w.limit(t, "beta"), "v2, no longer current, is not read")
}

// A subfolder of a Kubernetes ConfigMap mount (items with path
// config/a.yaml) is the link config -> ..data/config, ..data swapped to a
// new timestamped folder on each update.
func TestEnvoyWatchFollowsAConfigMapSubfolder(t *testing.T) {
	mount := t.TempDir()
	writeFile(t, filepath.Join(mount, "..2026_01_01_00_00_00.1", "config", "a.yaml"), envoyRule("alpha", 5))
	require.NoError(t, os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(mount, "..data")))
	require.NoError(t, os.Symlink(filepath.Join("..data", "config"), filepath.Join(mount, "config")))
	w := watchFolder(t, filepath.Join(mount, "config"))
	require.Equal(t, uint32(5), w.limit(t, "alpha"))

	for i, perMinute := range []int{8, 11} {
		next := fmt.Sprintf("..2026_01_0%d_00_00_00.%d", i+2, i+2)
		writeFile(t, filepath.Join(mount, next, "config", "a.yaml"), envoyRule("alpha", perMinute))
		old, err := os.Readlink(filepath.Join(mount, "..data"))
		require.NoError(t, err)
		swapLink(t, next, filepath.Join(mount, "..data"))
		require.NoError(t, os.RemoveAll(filepath.Join(mount, old)))
		w.until(t, "..data swapped to "+next, "alpha", uint32(perMinute))
	}
}

// A chain of two links on the path: outer -> inner -> v1, rules in
// outer/config. Swapping either link applies the folder it names now.
func TestEnvoyWatchFollowsAChainOfTwoLinks(t *testing.T) {
	root := t.TempDir()
	for v, perMinute := range map[string]int{"v1": 5, "v2": 6, "v3": 7} {
		writeFile(t, filepath.Join(root, v, "config", "a.yaml"), envoyRule("alpha", perMinute))
	}
	require.NoError(t, os.Symlink("v1", filepath.Join(root, "inner")))
	require.NoError(t, os.Symlink("inner", filepath.Join(root, "outer")))
	w := watchFolder(t, filepath.Join(root, "outer", "config"))
	require.Equal(t, uint32(5), w.limit(t, "alpha"))

	swapLink(t, "v2", filepath.Join(root, "inner"))
	w.until(t, "inner swapped to v2", "alpha", 6)
	require.NoError(t, os.Symlink("v3", filepath.Join(root, "other")))
	swapLink(t, filepath.Join(root, "other"), filepath.Join(root, "outer"))
	w.until(t, "outer swapped to other -> v3", "alpha", 7)
	swapLink(t, "v1", filepath.Join(root, "inner"))
	writeFile(t, filepath.Join(root, "v3", "config", "b.yaml"), envoyRule("beta", 2))
	w.until(t, "a file written in v3's config", "beta", 2)
	assert.Equal(t, uint32(7), w.limit(t, "alpha"), "inner is no longer on the path")
}
