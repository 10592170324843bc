// Package snapshot holds the configuration a request is served with: every
// part that a reload changes (the policies, the seed routes, the Envoy
// rules, the gateway rules and, through the store, each policy's on_store_error mode), built
// and validated whole by New and never changed afterwards. The service
// publishes the one in force through one atomic.Pointer; each request
// loads it once and finishes on it, whatever a reload publishes meanwhile.
package snapshot

import (
	"fmt"
	"slices"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
)

// Parts are what New builds a Snapshot from.
type Parts struct {
	// Policies are every configured policy; /v1/check accepts their names.
	Policies []limiter.Policy
	// PingRoute and CheckRoute name the policies of the seed routes, in
	// evaluation order: /ping and /status use PingRoute, /rate/* CheckRoute.
	PingRoute, CheckRoute []string
	// Envoy are the rules of Envoy's rate-limit API; nil when the service
	// offers no Envoy API.
	Envoy *envoyrules.Rules
	// Store decides; the service passes one that applies these policies'
	// on_store_error modes.
	Store limiter.Store
	// StoreName labels the store metrics ("sqlite", "memory", "redis").
	StoreName string
	// Clock is read once per request.
	Clock limiter.Clock
	// Metrics and Offenders are the decision layer's, shared by every
	// snapshot so that counts go on across reloads.
	Metrics   *decide.Metrics
	Offenders *decide.Offenders
	// Identity resolves whose budget a request spends (its API keys are
	// re-read on reload); nil resolves with the defaults: identity headers
	// believed from any client, no API key.
	Identity *identity.Resolver
	// DecisionAPI names the seed routes' policies that /v1/check may charge
	// anyway; the others are refused there (see Seed).
	DecisionAPI []string
	// Budget bounds each request's decisions (decide.Options.Budget).
	Budget time.Duration
	// Gateway are the rules of /v1/forward-auth, in order; nil: none.
	Gateway []gateway.Rule
	// Tracer traces the decisions (decide.Options.Tracer); nil: none.
	Tracer decide.Tracer
}

// Snapshot is one configuration in force. It is immutable.
type Snapshot struct {
	// Decider decides on Store, for every transport.
	Decider *decide.Decider
	// Store is the store of Parts, for the calls outside a request (pruning,
	// the probe of a reload).
	Store limiter.Store
	// Ping and Check are the seed routes' plans.
	Ping, Check *decide.Plan
	// Envoy are the Envoy rules; nil when the service offers no Envoy API.
	Envoy *envoyrules.Rules
	// Identity resolves whose budget a request spends. Never nil.
	Identity *identity.Resolver
	// Gateway are the rules of /v1/forward-auth; never nil (no rule: every
	// request passes). GatewayPlan returns a rule's plan.
	Gateway *gateway.Rules

	policies []limiter.Policy
	seed     map[string]bool         // seed routes' policies closed to /v1/check
	single   map[string]*decide.Plan // /v1/check: one plan per policy
	gateway  []*decide.Plan          // one per gateway rule
}

// New validates every policy, resolves the routes' names and returns the
// snapshot. On error there is no snapshot: a reload keeps the one in force.
func New(p Parts) (*Snapshot, error) {
	if p.Store == nil || p.Clock == nil || p.Metrics == nil {
		return nil, fmt.Errorf("snapshot: parts need a store, a clock and metrics")
	}
	byName := make(map[string]limiter.Policy, len(p.Policies))
	for _, q := range p.Policies {
		if err := q.Validate(); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		if _, dup := byName[q.Name]; dup {
			return nil, fmt.Errorf("snapshot: policy %q given twice", q.Name)
		}
		byName[q.Name] = q
	}
	resolve := func(what string, names []string) (*decide.Plan, error) {
		if len(names) == 0 {
			return nil, fmt.Errorf("snapshot: route %s has no policy", what)
		}
		ps := make([]limiter.Policy, len(names))
		for i, n := range names {
			q, ok := byName[n]
			if !ok {
				return nil, fmt.Errorf("snapshot: route %s: unknown policy %q", what, n)
			}
			ps[i] = q
		}
		return p.Metrics.NewPlan(ps), nil
	}
	ping, err := resolve("ping", p.PingRoute)
	if err != nil {
		return nil, err
	}
	check, err := resolve("check", p.CheckRoute)
	if err != nil {
		return nil, err
	}
	rules, err := gateway.New(p.Gateway)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	gwPlans := make([]*decide.Plan, rules.Len())
	for i := range gwPlans {
		if gwPlans[i], err = resolve(fmt.Sprintf("gateway[%d]", i), rules.Rule(i).Policies); err != nil {
			return nil, err
		}
	}
	dec, err := decide.New(decide.Options{Store: p.Store, StoreName: p.StoreName, Clock: p.Clock, Metrics: p.Metrics, Offenders: p.Offenders, Budget: p.Budget, Tracer: p.Tracer})
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	s := &Snapshot{
		Decider:  dec,
		Store:    p.Store,
		Ping:     ping,
		Check:    check,
		Envoy:    p.Envoy,
		Identity: p.Identity,
		Gateway:  rules,
		gateway:  gwPlans,
		policies: slices.Clone(p.Policies),
		single:   make(map[string]*decide.Plan, len(byName)),
		seed:     map[string]bool{},
	}
	if s.Identity == nil {
		s.Identity = &identity.Resolver{}
	}
	for _, n := range slices.Concat(p.PingRoute, p.CheckRoute) {
		s.seed[n] = !slices.Contains(p.DecisionAPI, n)
	}
	for name, q := range byName {
		s.single[name] = p.Metrics.NewPlan([]limiter.Policy{q})
	}
	return s, nil
}

// Seed reports whether the policy named name belongs to a seed route and
// has not opted in to /v1/check (decision_api): charging it there would let
// a caller spend any client's /ping or /rate/check budget.
func (s *Snapshot) Seed(name string) bool { return s.seed[name] }

// Single returns the plan of /v1/check for the policy named name.
func (s *Snapshot) Single(name string) (*decide.Plan, bool) {
	p, ok := s.single[name]
	return p, ok
}

// GatewayPlan returns the plan of gateway rule i (0 <= i < Gateway.Len()).
func (s *Snapshot) GatewayPlan(i int) *decide.Plan { return s.gateway[i] }

// Stored returns every policy whose state the store keeps: the configured
// ones, then those the Envoy rules derive.
func (s *Snapshot) Stored() []limiter.Policy {
	if s.Envoy == nil {
		return s.policies
	}
	return slices.Concat(s.policies, s.Envoy.Policies())
}
