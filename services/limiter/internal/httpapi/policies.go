package httpapi

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// policySet is what the handlers know of the policies: the seed routes and
// one route per policy for /v1/check. It is immutable; a reload replaces the
// whole set in one atomic step, and each request loads it once, so a request
// finishes on the policies it started with.
type policySet struct {
	ping, check route
	single      map[string]route // /v1/check: one route per policy
}

// newPolicySet validates every policy and resolves the routes' names; m
// provides each policy's decision counters.
func (m *Metrics) newPolicySet(policies []limiter.Policy, pingRoute, checkRoute []string) (*policySet, error) {
	byName := make(map[string]limiter.Policy, len(policies))
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
		if _, dup := byName[p.Name]; dup {
			return nil, fmt.Errorf("httpapi: policy %q given twice", p.Name)
		}
		byName[p.Name] = p
	}
	resolve := func(what string, names []string) (route, error) {
		if len(names) == 0 {
			return route{}, fmt.Errorf("httpapi: route %s has no policy", what)
		}
		ps := make([]limiter.Policy, len(names))
		for i, n := range names {
			p, ok := byName[n]
			if !ok {
				return route{}, fmt.Errorf("httpapi: route %s: unknown policy %q", what, n)
			}
			ps[i] = p
		}
		return m.newRoute(ps), nil
	}
	ping, err := resolve("ping", pingRoute)
	if err != nil {
		return nil, err
	}
	check, err := resolve("check", checkRoute)
	if err != nil {
		return nil, err
	}
	set := &policySet{ping: ping, check: check, single: make(map[string]route, len(byName))}
	for name, p := range byName {
		set.single[name] = m.newRoute([]limiter.Policy{p})
	}
	return set, nil
}

// Reloader replaces the policies and routes of a serving engine. Put a new
// Reloader in Options.Reloader: New binds it to the engine it builds (one
// engine per Reloader). Safe for concurrent use.
type Reloader struct {
	h atomic.Pointer[handler]
}

// errUnbound is returned by Reload before New has bound the Reloader.
var errUnbound = errors.New("httpapi: reload: the reloader is not bound to an engine")

// Reload validates policies and resolves the routes' names (as New does),
// then swaps them in with one atomic store: requests already in flight
// finish on the policies they started with, later ones see the new ones. On
// error nothing changes. State kept by the store follows the policy's name:
// a raised limit applies to the counts already made.
func (r *Reloader) Reload(policies []limiter.Policy, pingRoute, checkRoute []string) error {
	h := r.h.Load()
	if h == nil {
		return errUnbound
	}
	set, err := h.metrics.newPolicySet(policies, pingRoute, checkRoute)
	if err != nil {
		return err
	}
	h.policies.Store(set)
	return nil
}
