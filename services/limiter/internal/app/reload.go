package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// Reload outcomes, the values of tollgate_config_reloads_total's result
// label.
const (
	reloadSucceeded = "success"
	reloadFailed    = "failure"
)

// errNoReloadSource is returned by Reload when the app was built without
// WithReload.
var errNoReloadSource = errors.New("app: reload: no configuration source (see WithReload)")

// WithReload lets the app reload its policies and routes: load returns the
// whole configuration read again (main passes config.Load with the
// process's arguments and environment), and each value received on signals
// (main sends SIGHUP there; nil: none) calls Reload, as does, while Run
// serves, a change in the --envoy-config folder (see watchEnvoy).
func WithReload(load func() (config.Config, error), signals <-chan os.Signal) Option {
	return func(a *App) { a.load, a.reloadSignals = load, signals }
}

// newReloadsCounter creates tollgate_config_reloads_total{result}.
func newReloadsCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_config_reloads_total",
		Help: "Reloads of the policies and routes (SIGHUP), by result: success, or failure (the running policies stay).",
	}, []string{"result"})
	c.WithLabelValues(reloadSucceeded)
	c.WithLabelValues(reloadFailed)
	return c
}

// policiesOf returns cfg's policies sorted by name, warning about any
// policy that protects nothing.
func (a *App) policiesOf(cfg config.Live) []limiter.Policy {
	ps := make([]limiter.Policy, 0, len(cfg.Policies))
	for _, n := range slices.Sorted(maps.Keys(cfg.Policies)) {
		p := cfg.Policies[n]
		ps = append(ps, p)
		if p.Algorithm == limiter.SlidingLogUnsafe {
			a.log.Warn("UNSAFE policy: sliding_log_unsafe checks then records in two separate steps and over-admits under concurrency; it exists to demonstrate the race, never use it to protect anything", "policy", p.Name)
		}
	}
	return ps
}

// Reload reads the configuration again and replaces what config.Live holds
// (policies, routes, identity rules, ...) without dropping a request: the
// new set is validated completely (the configuration's own checks, then a
// probe that the store can decide every policy), then swapped in
// atomically; requests in flight finish on the policies they started with.
// On any error the running set stays, and the error is logged as one line
// naming the field. Every other setting (addr, store, trusted_proxies, ...)
// needs a restart: a warning lists those that changed. Reload
// is what SIGHUP calls; it is safe for concurrent use (reloads run one at
// a time).
func (a *App) Reload(ctx context.Context) error { return a.reloadWith(ctx, envoyrules.LoadDir) }

// reloadWatched is Reload for a change the Envoy folder watch saw: a rule
// file that may be half-written is refused (see envoyrules.LoadWholeDir).
func (a *App) reloadWatched(ctx context.Context) error {
	return a.reloadWith(ctx, envoyrules.LoadWholeDir)
}

// reloadWith is Reload reading the Envoy folder with loadDir.
func (a *App) reloadWith(ctx context.Context, loadDir func(string, envoyrules.Options) (*envoyrules.Rules, error)) error {
	a.reloading.Lock()
	defer a.reloading.Unlock()
	cfg, err := a.reload(ctx, loadDir)
	if err != nil {
		a.reloads.WithLabelValues(reloadFailed).Inc()
		a.log.Error("reload refused; the running policies stay", "error", err.Error())
		return err
	}
	a.reloads.WithLabelValues(reloadSucceeded).Inc()
	a.log.Info("reloaded", "policies", config.PoliciesLogValue(cfg.Policies), "routes", cfg.RoutePolicies)
	if changed := restartSettings(a.cfg, cfg); len(changed) > 0 {
		a.log.Warn("reload: these settings changed but apply only after a restart", "settings", changed)
	}
	return nil
}

func (a *App) reload(ctx context.Context, loadDir func(string, envoyrules.Options) (*envoyrules.Rules, error)) (config.Config, error) {
	if a.load == nil {
		return config.Config{}, errNoReloadSource
	}
	cfg, err := a.load()
	if err != nil {
		return cfg, err
	}
	old := a.current.Load()
	if err := keepsRoutedPolicies(old, cfg); err != nil {
		return cfg, err
	}
	// The Envoy folder the service started with is read again too; rules
	// pushed by xDS stay as they are.
	rules := old.Envoy
	if rules != nil && a.cfg.EnvoyConfig != "" {
		if rules, err = rulesInvalid(loadDir(a.cfg.EnvoyConfig, envoyOptions(a.cfg))); err != nil {
			return cfg, err
		}
		if emptied(old.Envoy, rules) && !cfg.EnvoyAllowEmptyReload {
			return cfg, &config.Error{Field: "--envoy-config", Reason: fmt.Sprintf("%s holds no domain any more: every descriptor would be answered OK with no limit; restore the files, or set --envoy-allow-empty-reload to mean it", a.cfg.EnvoyConfig)}
		}
	}
	return cfg, a.publish(ctx, cfg, rules)
}

// emptied reports whether next, replacing running, leaves no domain where
// there were some.
func emptied(running, next *envoyrules.Rules) bool {
	return len(next.Domains()) == 0 && len(running.Domains()) > 0
}

// publish builds the snapshot of cfg with the Envoy rules, probes that the
// store can decide its policies, and publishes it; on error what runs
// stays. Callers hold a.reloading.
func (a *App) publish(ctx context.Context, cfg config.Config, rules *envoyrules.Rules) error {
	old := a.current.Load()
	snap, err := a.snapshot(cfg.Live, rules)
	if err != nil {
		return err
	}
	if err := a.probe(ctx, snap.Store, snap.Stored()); err != nil {
		return err
	}
	a.current.Store(snap)
	a.running = cfg
	if lowered := lowered(old.Stored(), snap.Stored()); len(lowered) > 0 {
		a.log.Warn("reload lowers limits: keys already over a new limit are refused until their windows pass", "policies", lowered)
	}
	return nil
}

// keepsRoutedPolicies refuses a configuration that no longer defines a
// policy the running seed routes use. A file cut short, or its policies
// section lost, would otherwise quietly swap a route's policies for the
// defaults. To retire a policy, take it off its route in one reload, then
// delete it in the next.
func keepsRoutedPolicies(running *snapshot.Snapshot, cfg config.Config) error {
	for _, r := range []struct {
		route string
		plan  *decide.Plan
	}{{config.RoutePing, running.Ping}, {config.RouteCheck, running.Check}} {
		for _, p := range r.plan.Policies() {
			if _, ok := cfg.Policies[p.Name]; !ok {
				return &config.Error{Field: "policies." + p.Name, Reason: fmt.Sprintf("missing, but the running route %s uses it; take it off routes.%s in one reload, then delete it in the next", r.route, r.route)}
			}
		}
	}
	return nil
}

// lowered describes the policies of next whose rate is lower than in prev
// (a smaller limit, or the same limit over a longer window), by name.
func lowered(prev, next []limiter.Policy) []string {
	before := make(map[string]limiter.Policy, len(prev))
	for _, p := range prev {
		before[p.Name] = p
	}
	var out []string
	for _, p := range next {
		b, ok := before[p.Name]
		// limit/window < b.limit/b.window, crossed in whole seconds (windows
		// are whole seconds; the products stay under 2^57).
		if ok && !p.Shadow && p.Limit*int64(b.Window/time.Second) < b.Limit*int64(p.Window/time.Second) {
			out = append(out, fmt.Sprintf("%s: %d per %s -> %d per %s", p.Name, b.Limit, b.Window, p.Limit, p.Window))
		}
	}
	return out
}

// reloadLoop calls Reload for each signal until ctx is done.
func (a *App) reloadLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.reloadSignals:
			_ = a.Reload(ctx) // logged by Reload
		}
	}
}

// restartSettings names the fields of config.Config outside config.Live
// (what Reload applies) whose values differ between running and loaded. It
// compares every field by reflection, so a setting added later is covered
// without a list to keep up to date: config.Live alone says what a reload
// changes. Only names are returned: values may be secrets.
func restartSettings(running, loaded config.Config) []string {
	rv, lv := reflect.ValueOf(running), reflect.ValueOf(loaded)
	live := reflect.TypeFor[config.Live]()
	var changed []string
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		if !f.IsExported() || f.Type == live {
			continue
		}
		if !reflect.DeepEqual(rv.Field(i).Interface(), lv.Field(i).Interface()) {
			changed = append(changed, f.Name)
		}
	}
	return changed
}
