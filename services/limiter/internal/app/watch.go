package app

import (
	"context"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchQuiet debounces the Envoy folder watch: a reload starts once the
// folder has been quiet this long (an editor or a deployment writes several
// events per change). A file still being written after it is refused by
// the reload (see reloadWatched), and its next write starts another wait.
const watchQuiet = 200 * time.Millisecond

// watchEnvoy reloads, as SIGHUP does but refusing half-written files,
// whenever a file of the --envoy-config folder is written, created,
// removed or renamed, until ctx is done. It watches the folder's parent
// too, so that it follows the folder (or the symbolic link it is, such as
// envoyproxy/ratelimit's RUNTIME_ROOT/current) being swapped, removed or
// created again: the watch then moves to what the path names now. Inside
// the folder, Kubernetes' ..data link swap is a rename like any other. A
// refused reload logs why and the running rules stay. Without a folder,
// or without a configuration source to reload from (WithReload), it does
// nothing; when the folder cannot be watched, or watching stops, it logs
// a WARN and leaves reloading to SIGHUP.
func (a *App) watchEnvoy(ctx context.Context) {
	if a.cfg.EnvoyConfig == "" || a.load == nil {
		return
	}
	dir := filepath.Clean(a.cfg.EnvoyConfig)
	parent := filepath.Dir(dir)
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(parent)
	}
	if err == nil {
		err = w.Add(dir)
	}
	if err != nil {
		a.log.Warn("the Envoy folder is not watched; reload it with SIGHUP", "folder", dir, "error", err.Error())
		if w != nil {
			_ = w.Close()
		}
		return
	}
	defer w.Close()
	a.log.Info("the Envoy folder is watched", "folder", dir)
	quiet := time.NewTimer(watchQuiet)
	defer quiet.Stop()
	quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				a.watchStopped(dir, "the watcher closed")
				return
			}
			a.log.Warn("watching the Envoy folder", "folder", dir, "error", err.Error())
		case ev, ok := <-w.Events:
			if !ok {
				a.watchStopped(dir, "the watcher closed")
				return
			}
			switch {
			case ev.Op == fsnotify.Chmod:
				continue
			case ev.Name == parent:
				a.watchStopped(dir, "the folder's parent "+parent+" was removed or moved")
				return
			case ev.Name == dir:
				a.rewatch(w, dir)
			case filepath.Dir(ev.Name) != dir:
				continue // something else beside the folder
			}
			quiet.Reset(watchQuiet)
		case <-quiet.C:
			a.log.Info("the Envoy folder changed; reloading")
			_ = a.reloadWatched(ctx) // logged by Reload
		}
	}
}

// rewatch moves the folder watch to what dir names now, after dir itself
// was created, replaced or removed; while nothing is there, the parent's
// watch waits for it to come back.
func (a *App) rewatch(w *fsnotify.Watcher, dir string) {
	_ = w.Remove(dir) // fails when the watch went with the folder
	if err := w.Add(dir); err != nil {
		a.log.Warn("the Envoy folder is gone; the running rules stay until it is back", "folder", dir, "error", err.Error())
	}
}

// watchStopped logs that the Envoy folder is no longer watched, and why.
func (a *App) watchStopped(dir, why string) {
	a.log.Warn("the Envoy folder is no longer watched; reload it with SIGHUP", "folder", dir, "reason", why)
}
