package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
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
// removed or renamed, until ctx is done. It follows every symbolic link on
// the folder's path, whichever component it is (see planWatch):
// envoyproxy/ratelimit's RUNTIME_ROOT/current -> v2 above a config folder,
// Kubernetes' ..data behind a ConfigMap's subfolder link, a chain of links.
// When one of them, or the folder, is swapped, removed or created again,
// the path is resolved again and the watch moves to what it names now. A
// refused reload logs why and the running rules stay. Without a folder,
// or without a configuration source to reload from (WithReload), it does
// nothing; when the folder cannot be watched, or watching stops, it logs
// a WARN and leaves reloading to SIGHUP.
func (a *App) watchEnvoy(ctx context.Context) {
	if a.cfg.EnvoyConfig == "" || a.load == nil {
		return
	}
	path, err := filepath.Abs(a.cfg.EnvoyConfig)
	var w *fsnotify.Watcher
	var plan watchPlan
	if err == nil {
		w, err = fsnotify.NewWatcher()
	}
	if err == nil {
		plan, err = a.follow(w, path, watchPlan{})
	}
	if err != nil {
		a.log.Warn("the Envoy folder is not watched; reload it with SIGHUP", "folder", path, "error", err.Error())
		if w != nil {
			_ = w.Close()
		}
		return
	}
	defer w.Close()
	a.log.Info("the Envoy folder is watched", "folder", path, "resolved", plan.folder)
	quiet := time.NewTimer(watchQuiet)
	defer quiet.Stop()
	quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				a.watchStopped(path, "the watcher closed")
				return
			}
			a.log.Warn("watching the Envoy folder", "folder", path, "error", err.Error())
		case ev, ok := <-w.Events:
			if !ok {
				a.watchStopped(path, "the watcher closed")
				return
			}
			switch {
			case ev.Op == fsnotify.Chmod:
				continue
			case plan.entries[ev.Name] || plan.dirs[ev.Name]:
				if plan, err = a.follow(w, path, plan); err != nil {
					a.watchStopped(path, err.Error())
					return
				}
			case filepath.Dir(ev.Name) != plan.folder:
				continue // something else beside a watched entry
			}
			quiet.Reset(watchQuiet)
		case <-quiet.C:
			a.log.Info("the Envoy folder changed; reloading")
			_ = a.reloadWatched(ctx) // logged by Reload
		}
	}
}

// follow resolves path again and moves w's watches from old's folders to
// the new plan's, which it returns.
// A link swapped between resolving and watching its folder would go
// unseen, so it resolves until two passes agree.
func (a *App) follow(w *fsnotify.Watcher, path string, old watchPlan) (watchPlan, error) {
	var plan watchPlan
	for range maxLinks {
		next, err := planWatch(path)
		if err != nil {
			return old, err
		}
		if next.same(plan) {
			break
		}
		plan = next
		for dir := range old.dirs {
			if !plan.dirs[dir] {
				_ = w.Remove(dir) // fails when the watch went with the folder
			}
		}
		for dir := range plan.dirs {
			// Add again also when watched: a folder removed and created
			// again under the same name is a new one to watch.
			if err := w.Add(dir); err != nil {
				return old, err
			}
		}
		old = plan
	}
	if plan.folder == "" {
		a.log.Warn("the Envoy folder is gone; the running rules stay until it is back", "folder", path, "missing", plan.missing)
	}
	return plan, nil
}

// watchPlan is what the Envoy folder watch follows for a path.
type watchPlan struct {
	// folder is what the path names now, links resolved; "" while an
	// entry on the way is missing (then missing names it).
	folder, missing string
	// entries are the resolved paths of the entries a change of which
	// changes what the path names: each symbolic link on it (of the path
	// or of a link's target), the path's last component and each link
	// target's last one. An event naming one, or naming a watched
	// folder itself, resolves the path again.
	entries map[string]bool
	// dirs are the folders watched: the folder and each that holds one of
	// entries.
	dirs map[string]bool
}

// same reports whether p and q resolve to the same folder through the
// same entries.
func (p watchPlan) same(q watchPlan) bool {
	return p.folder == q.folder && p.missing == q.missing && maps.Equal(p.entries, q.entries) && maps.Equal(p.dirs, q.dirs)
}

// maxLinks bounds the links followed resolving a path, as Linux does.
const maxLinks = 40

// planWatch resolves the absolute path component by component, as the
// kernel does, noting the entries and folders to watch. An entry that is
// the last of the path or of a link's target may be missing (the watch
// waits for it to come); one on the way to another that the path names
// cannot be waited for, and is an error.
func planWatch(path string) (watchPlan, error) {
	plan := watchPlan{entries: map[string]bool{}, dirs: map[string]bool{}}
	type part struct {
		name string
		last bool // the last of the path or of a link's target
	}
	split := func(p string) []part {
		var parts []part
		for _, name := range strings.Split(p, string(filepath.Separator)) {
			if name != "" && name != "." {
				parts = append(parts, part{name: name})
			}
		}
		if len(parts) > 0 {
			parts[len(parts)-1].last = true
		}
		return parts
	}
	dir := string(filepath.Separator)
	todo := split(path)
	links := 0
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if p.name == ".." {
			dir = filepath.Dir(dir)
			continue
		}
		entry := filepath.Join(dir, p.name)
		if p.last {
			plan.entries[entry], plan.dirs[dir] = true, true
		}
		info, err := os.Lstat(entry)
		switch {
		case errors.Is(err, os.ErrNotExist) && p.last:
			plan.missing = entry
			return plan, nil
		case err != nil:
			return plan, fmt.Errorf("%s, on the way to %s: %w", entry, path, err)
		case info.Mode()&os.ModeSymlink == 0:
			dir = entry
			continue
		}
		if links++; links > maxLinks {
			return plan, fmt.Errorf("more than %d symbolic links resolving %s", maxLinks, path)
		}
		target, err := os.Readlink(entry)
		if err != nil {
			return plan, err
		}
		plan.entries[entry], plan.dirs[dir] = true, true
		if filepath.IsAbs(target) {
			dir = string(filepath.Separator)
		}
		todo = append(split(target), todo...)
	}
	plan.folder = dir
	plan.dirs[dir] = true
	return plan, nil
}

// watchStopped logs that the Envoy folder is no longer watched, and why.
func (a *App) watchStopped(dir, why string) {
	a.log.Warn("the Envoy folder is no longer watched; reload it with SIGHUP", "folder", dir, "reason", why)
}
