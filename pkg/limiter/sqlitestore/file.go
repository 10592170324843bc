package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// errNotOpen is the state after a reopen failed: the next batch tries again.
var errNotOpen = errors.New("the database file is not open")

// identify records which files the connections have open: the database
// file, its WAL and its shared-memory index.
func (s *Store) identify() error {
	fi, err := os.Stat(s.path)
	if err != nil {
		return unavailable(err)
	}
	s.file = fi
	for i, suffix := range walSuffixes {
		s.wal[i], _ = os.Stat(s.path + suffix) // nil: none yet
	}
	return nil
}

// walSuffixes name the WAL and the shared-memory index beside the database.
var walSuffixes = [2]string{"-wal", "-shm"}

// checkFile makes sure the connections have the file at the path open. When
// that file was deleted or replaced (another inode, or none), deciding on
// the open handle would count in a file that no other process sees: it
// closes the stale connections and opens the path again, creating the file
// and its schema when missing. Only the writer goroutine calls it.
//
// SQLite does not checkpoint a moved file when it closes, so its WAL and
// shared-memory index stay beside the path, and a new file opened there
// would read the old file's pages from them: they are deleted first, unless
// they are no longer the old file's (deleted with it, and created again by
// another process for the new one).
func (s *Store) checkFile() error {
	if s.db != nil {
		fi, err := os.Stat(s.path)
		if err == nil && os.SameFile(fi, s.file) {
			return nil
		}
	}
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.db != nil {
		_ = s.release() // the old file is gone: nothing of it to report
		for i, suffix := range walSuffixes {
			if fi, err := os.Stat(s.path + suffix); err == nil && s.wal[i] != nil && os.SameFile(fi, s.wal[i]) {
				_ = os.Remove(s.path + suffix) // gone already: as wanted
			}
		}
	}
	if err := s.open(); err != nil {
		_ = s.release() // err says why
		return unavailable(fmt.Errorf("the database file %s was deleted or replaced, and opening it again failed: %w", s.path, err))
	}
	return nil
}

// isFull reports whether err is SQLite's "database or disk is full".
func isFull(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL
}

// storageFailure marks the errors that say the file cannot be used (full,
// read-only, I/O, corrupt, locked) as limiter.ErrUnavailable, leaving others
// (a constraint, a trigger) as they are.
func storageFailure(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return unavailable(err)
	}
	return err
}

// reserve is the room kept to recover from a full disk; see
// WithDiskReserve. Its state is the file's existence, which every process
// on the database sees.
type reserve struct {
	path string
	size int64 // 0: no reserve
}

// errDiskFull is why decisions are refused while the reserve is missing.
var errDiskFull = errors.New("disk full")

// missing returns an error when the reserve should exist and does not.
func (r *reserve) missing() error {
	if r.size == 0 {
		return nil
	}
	if fi, err := os.Stat(r.path); err == nil && fi.Size() >= r.size {
		return nil
	}
	return unavailable(fmt.Errorf("%w: the reserve %s is used up or could not be written; decisions resume once a prune frees %d bytes", errDiskFull, r.path, r.size))
}

// release deletes the reserve, giving its room to the database.
func (r *reserve) release() {
	if r.size > 0 {
		_ = os.Remove(r.path) // already gone: nothing to give
	}
}

// restore writes the reserve when it is missing: real bytes (a sparse file
// would reserve nothing), in a temporary file renamed into place, so that
// processes sharing the database never see half a reserve.
func (r *reserve) restore() (err error) {
	if r.missing() == nil {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(r.path), filepath.Base(r.path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = io.CopyN(f, zeros{}, r.size); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), r.path)
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// checkpoint copies the WAL into the database file: PASSIVE lets the next
// write start the WAL again from its beginning, TRUNCATE also cuts the
// database file to its pages and the WAL to nothing. A reader in another
// process makes it stop early (busy), which is not an error: a later one
// finishes.
func (s *Store) checkpoint(ctx context.Context, mode string) error {
	var busy, frames, done int64
	if err := s.wconn.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &frames, &done); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
