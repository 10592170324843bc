package app

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Debounce of the Envoy folder watch: a reload starts once the folder has
// been quiet for watchQuiet (an editor or a deployment writes several
// events per change), and at the latest watchMaxDelay after the first
// change, even while files keep changing.
const (
	watchQuiet    = 200 * time.Millisecond
	watchMaxDelay = time.Second
)

// watchEnvoy reloads, as SIGHUP does, whenever a file of the --envoy-config
// folder is written, created, removed or renamed (a Kubernetes ConfigMap
// swaps a symbolic link: a rename in the folder), until ctx is done. A
// broken file is refused by the reload, which logs why; the running rules
// stay. Without a folder, or without a configuration source to reload
// from (WithReload), it does nothing; when the folder cannot be watched it
// logs why once and leaves reloading to SIGHUP.
func (a *App) watchEnvoy(ctx context.Context) {
	if a.cfg.EnvoyConfig == "" || a.load == nil {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(a.cfg.EnvoyConfig)
	}
	if err != nil {
		a.log.Warn("the Envoy folder is not watched; reload it with SIGHUP", "folder", a.cfg.EnvoyConfig, "error", err.Error())
		if w != nil {
			_ = w.Close()
		}
		return
	}
	defer w.Close()
	var (
		timer    = time.NewTimer(0)
		deadline time.Time // of the pending reload; zero when none
	)
	<-timer.C
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			a.log.Warn("watching the Envoy folder", "error", err.Error())
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(watchMaxDelay)
			}
			timer.Reset(min(watchQuiet, deadline.Sub(now)))
		case <-timer.C:
			deadline = time.Time{}
			a.log.Info("the Envoy folder changed; reloading")
			_ = a.Reload(ctx) // logged by Reload
		}
	}
}
