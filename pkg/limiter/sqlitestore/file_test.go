package sqlitestore_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

// readOnly makes the file at path unwritable for this process while its
// folder stays writable: by its mode, or, for root (whom modes do not stop),
// by a read-only bind mount of the file on itself.
func readOnly(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(path, 0o444))
		return
	}
	if out, err := exec.Command("mount", "--bind", "-o", "ro", path, path).CombinedOutput(); err != nil {
		t.Skipf("needs a read-only bind mount (root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", path).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", path, err, out)
		}
	})
}

// TestOpenRefusesAnUnwritableFile: a file that can be read but not written
// cannot record a decision, so Open fails instead of a first request.
func TestOpenRefusesAnUnwritableFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limiter.db")
	s, err := sqlitestore.Open(path)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	readOnly(t, path)

	s, err = sqlitestore.Open(path)
	if err == nil {
		_ = s.Close()
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, limiter.ErrUnavailable)
	assert.ErrorContains(t, err, "readonly")
}

// TestOpenNamesTheFileItCannotCreate: a database in a read-only folder (a
// container's /data mounted read-only) fails Open with the file's path and
// the system's reason, not SQLite's "unable to open database file (14)".
func TestOpenNamesTheFileItCannotCreate(t *testing.T) {
	dir := t.TempDir()
	readOnly(t, dir)
	path := filepath.Join(dir, "limiter.db")
	s, err := sqlitestore.Open(path)
	if err == nil {
		_ = s.Close()
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Regexp(t, "read-only file system|permission denied", err.Error())
}

// TestDeletedFileIsReopened: once the file is deleted under a running
// store, the store's next decision opens the file at the path again
// (creating it), so that it counts with every other store on that path
// instead of alone in a file nobody else can see. Deleting only the main
// file and deleting it with its WAL and shared-memory files both work.
func TestDeletedFileIsReopened(t *testing.T) {
	for _, tt := range []struct {
		name    string
		deleted []string
	}{
		{"main file", []string{""}},
		{"with wal and shm", []string{"", "-wal", "-shm"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "limiter.db")
			a := open(t, path)
			ctx := context.Background()
			p := policy("ping", limiter.FixedWindow, 3)
			key := limiter.Request{Key: limiter.Key{Subject: "k"}, Cost: 1, Now: t0}
			for range 2 {
				_, err := a.Allow(ctx, p, key)
				require.NoError(t, err)
			}
			for _, suffix := range tt.deleted {
				require.NoError(t, os.Remove(path+suffix))
			}
			d, err := a.Allow(ctx, p, key)
			require.NoError(t, err)
			assert.Equal(t, int64(1), d.Count, "counted in a new file")
			_, err = os.Stat(path)
			require.NoError(t, err, "the file is back at its path")

			b := open(t, path)
			var allowed int
			for i := range 8 {
				s := []*sqlitestore.Store{a, b}[i%2]
				d, err := s.Allow(ctx, p, key)
				require.NoError(t, err)
				if d.Allowed {
					allowed++
				}
			}
			assert.Equal(t, 2, allowed, "the two stores share one count: 3 in all, one was taken before b opened")
			require.NoError(t, a.Ping(ctx))
		})
	}
}

// TestReplacedFileIsReopened: a file moved over the database's path (a
// restored backup, here a database without the store's tables) is opened
// at the next decision and gets the schema, instead of every decision
// failing on the old handle or on "no such table".
func TestReplacedFileIsReopened(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limiter.db")
	s := open(t, path)
	ctx := context.Background()
	p := policy("ping", limiter.FixedWindow, 3)
	req := limiter.Request{Key: limiter.Key{Subject: "k"}, Cost: 1, Now: t0}
	_, err := s.Allow(ctx, p, req)
	require.NoError(t, err)

	other := filepath.Join(dir, "restored.db")
	raw := rawDB(t, other)
	_, err = raw.Exec("CREATE TABLE notes (x TEXT)")
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	require.NoError(t, os.Rename(other, path))

	require.NoError(t, s.Ping(ctx), "ping repairs too")
	d, err := s.Allow(ctx, p, req)
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Count)
	db := rawDB(t, path)
	assert.Equal(t, int64(1), queryInt(t, db, "SELECT count FROM rate_limit_windows WHERE key = 'k'"))
	assert.Equal(t, int64(1), queryInt(t, db, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'notes'"), "the restored file's own tables stay")
	peek, err := s.Peek(ctx, p, req.Key, t0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), peek.Count, "reads go to the new file too")
}

// TestFullDiskRecoversAfterPrune fills a small file system with long keys
// until decisions fail, then prunes at a time when they have expired:
// decisions work again without a restart. While the disk is full, Ping
// fails and says why.
func TestFullDiskRecoversAfterPrune(t *testing.T) {
	dir := limitertest.TmpFS(t, "16m")
	path := filepath.Join(dir, "limiter.db")
	s := open(t, path, sqlitestore.WithDiskReserve(6<<20), sqlitestore.WithAuditRetention(time.Hour))
	ctx := context.Background()
	p := policy("ping", limiter.FixedWindow, 10)
	require.NoError(t, s.Ping(ctx))
	assert.False(t, s.DiskFull(), "the reserve is in place")

	admitted, refusedAt := fill(t, s, p, t0)
	require.Greater(t, admitted, 500, "the disk held some keys")
	assert.ErrorIs(t, refusedAt, limiter.ErrUnavailable)
	assert.True(t, s.DiskFull(), "the reserve is used up")
	pingErr := s.Ping(ctx)
	assert.ErrorIs(t, pingErr, limiter.ErrUnavailable)
	assert.ErrorContains(t, pingErr, "disk full")

	_, err := s.Prune(ctx, t0.Add(2*time.Hour), []limiter.Policy{p})
	require.NoError(t, err)
	require.NoError(t, s.Ping(ctx), "ready again after the prune")
	assert.False(t, s.DiskFull(), "the prune wrote the reserve again")
	again, _ := fill(t, s, p, t0.Add(3*time.Hour))
	assert.Greater(t, again, admitted/2, "the space freed by the prune is used again")
	t.Logf("admitted %d keys until the disk was full, %d after the prune", admitted, again)
}

// fill allows long distinct keys at now until the store fails, and returns
// how many it admitted and the error.
func fill(t *testing.T, s *sqlitestore.Store, p limiter.Policy, now time.Time) (int, error) {
	t.Helper()
	ctx := context.Background()
	for i := range 1_000_000 {
		key := limiter.Key{Subject: longKey(i)}
		if _, err := s.Allow(ctx, p, limiter.Request{Key: key, Cost: 1, Now: now, Audit: "/ping"}); err != nil {
			return i, err
		}
	}
	t.Fatal("a million keys did not fill the disk")
	return 0, nil
}

// TestFilesNamesWhatOpenWrites: Files names the database and the reserve
// that Open wrote (real bytes of the configured size), as absolute paths, and
// no reserve when the store keeps none.
func TestFilesNamesWhatOpenWrites(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	require.NoError(t, os.Mkdir("data", 0o750))
	s, err := sqlitestore.Open(filepath.Join("data", "limiter.db"), sqlitestore.WithDiskReserve(64<<10))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	database, reserve := s.Files()
	assert.Equal(t, filepath.Join(dir, "data", "limiter.db"), database)
	assert.Equal(t, filepath.Join(dir, "data", "limiter.db-reserve"), reserve)
	assert.FileExists(t, database)
	fi, err := os.Stat(reserve)
	require.NoError(t, err)
	assert.Equal(t, int64(64<<10), fi.Size())

	bare, err := sqlitestore.Open(filepath.Join(dir, "bare.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = bare.Close() })
	database, reserve = bare.Files()
	assert.Equal(t, filepath.Join(dir, "bare.db"), database)
	assert.Empty(t, reserve)
	assert.NoFileExists(t, filepath.Join(dir, "bare.db-reserve"))
}
