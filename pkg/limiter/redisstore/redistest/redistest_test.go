package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	assert.Equal(t, "redis://"+s.Addr()+"/0", s.URL())
	c := s.Client()
	require.NoError(t, c.Set(t.Context(), s.Prefix()+":k", "v", 0).Err())

	s.Stop()
	_, err := serverPID(s.Addr(), "")
	assert.Error(t, err, "a server answers after Stop")
	s.Stop() // stopping twice is harmless

	addr := s.Addr()
	s.Restart()
	assert.Equal(t, addr, s.Addr(), "same port")
	_, err = serverPID(s.Addr(), "")
	require.NoError(t, err)
	n, err := c.Exists(t.Context(), s.Prefix()+":k").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(0), n, "no persistence across a restart")
}

func TestPrefixesDiffer(t *testing.T) {
	a, b := Start(t), Start(t)
	assert.NotEqual(t, a.Prefix(), b.Prefix())
	if !a.Shared() {
		assert.NotEqual(t, a.Addr(), b.Addr(), "private servers")
	}
}

// fakeTB records Skip and Fatal instead of ending the real test.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) {
	f.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

// startIn runs start with f on its own goroutine, as the testing package
// would, and waits for it to return or stop.
func startIn(f *fakeTB, start func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		start(f)
	}()
	<-done
}

// startOne is Start for startIn.
func startOne(tb testing.TB) { Start(tb) }

func TestNoRedisSkipsOrFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server
	t.Setenv(EnvURL, "")

	t.Setenv("CI", "")
	f := &fakeTB{TB: t}
	startIn(f, startOne)
	assert.Contains(t, f.skipped, "redis-server")
	assert.Contains(t, f.skipped, EnvURL)
	assert.Empty(t, f.fatal)

	t.Setenv("CI", "true")
	f = &fakeTB{TB: t}
	startIn(f, startOne)
	assert.Contains(t, f.fatal, "redis-server")
	assert.Contains(t, f.fatal, EnvURL)
	assert.Empty(t, f.skipped)
}

// With LIMITER_TEST_NO_TOPOLOGIES set (make check), Cluster and Sentinel
// set-ups are skipped before any process starts, naming the variable, also
// under CI=true; a single server still starts.
func TestNoTopologiesSkipsClusterAndSentinel(t *testing.T) {
	t.Setenv(EnvNoTopologies, "1")
	t.Setenv("CI", "true")
	for name, start := range map[string]func(testing.TB){
		"cluster":  func(tb testing.TB) { StartCluster(tb) },
		"sentinel": func(tb testing.TB) { StartSentinel(tb) },
	} {
		f := &fakeTB{TB: t}
		startIn(f, start)
		assert.Contains(t, f.skipped, EnvNoTopologies, name)
		assert.Empty(t, f.fatal, name)
	}
	if _, err := exec.LookPath("redis-server"); err == nil {
		assert.NotEmpty(t, Start(t).Addr(), "one server is not a topology")
	}
}

// TestSharedServer points Start at an existing server: the test gets that
// URL and a prefix, Stop skips, and the prefix's keys (only those) are gone
// after the test.
func TestSharedServer(t *testing.T) {
	backing := Start(t)
	c := backing.Client()
	ctx := context.Background()
	kept := backing.Prefix() + ":kept"
	require.NoError(t, c.Set(ctx, kept, "kept", 0).Err())
	t.Setenv(EnvURL, backing.URL())

	var prefix string
	t.Run("user", func(t *testing.T) {
		s := Start(t)
		assert.Equal(t, backing.URL(), s.URL())
		assert.Equal(t, backing.Addr(), s.Addr())
		prefix = s.Prefix()
		for _, k := range []string{prefix + ":k", prefix + "-sub:k"} {
			require.NoError(t, s.Client().Set(ctx, k, "v", 0).Err())
		}
		s.Stop()
		t.Error("Stop on a shared server did not skip")
	})
	n, err := c.Exists(ctx, prefix+":k", prefix+"-sub:k").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(0), n, "the test's keys after its cleanup")
	v, err := c.Get(ctx, kept).Result()
	require.NoError(t, err)
	assert.Equal(t, "kept", v)

	t.Setenv(EnvURL, "http://not-redis")
	f := &fakeTB{TB: t}
	startIn(f, startOne)
	assert.Contains(t, f.fatal, EnvURL)
}

// TestForeignServerNotTaken: when another redis-server holds the port, the
// launch fails (ours cannot bind) instead of adopting the other one.
func TestForeignServerNotTaken(t *testing.T) {
	other := Start(t)
	if other.Shared() {
		t.Skip("needs a private redis-server")
	}
	s := &Server{t: t, bin: other.bin, dir: t.TempDir()}
	err := s.launch(other.port)
	assert.ErrorContains(t, err, "exited before answering")
	assert.Equal(t, "", s.URL())
}
