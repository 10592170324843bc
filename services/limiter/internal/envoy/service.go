package envoy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// Options configures New. Every field but StoreName is required.
type Options struct {
	Rules *Rules
	// Store decides; it is the service's store, shared with the HTTP routes.
	Store limiter.Store
	// StoreName labels the store metrics ("sqlite", "memory", "redis").
	StoreName string
	// Clock is read once per ShouldRateLimit call.
	Clock limiter.Clock
	// Metrics counts decisions and store calls, the same collectors as the
	// HTTP routes'.
	Metrics *httpapi.Metrics
	// Offenders records every enforced refusal for GET /admin/offenders,
	// the same tracker as the HTTP routes'; nil records nothing.
	Offenders *httpapi.Offenders
}

// Service answers Envoy's rate-limit API from the rules, the store and the
// clock. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	o     Options
	rules atomic.Pointer[Rules] // o.Rules, then whatever SetRules swaps in
}

// New returns a Service.
func New(o Options) (*Service, error) {
	if o.Rules == nil || o.Store == nil || o.Clock == nil || o.Metrics == nil {
		return nil, errors.New("envoy: options need rules, a store, a clock and metrics")
	}
	s := &Service{o: o}
	s.rules.Store(o.Rules)
	return s, nil
}

// SetRules makes r the rules of every call that starts after it (a reload);
// calls under way finish on the rules they started with. r must not be nil.
func (s *Service) SetRules(r *Rules) { s.rules.Store(r) }

// check is one descriptor's limit and its outcome.
type check struct {
	limit *Limit
	key   limiter.Key
	cost  uint64
	d     limiter.Decision
	over  bool // refused (shadow refusals included)
	// final: no wait makes it pass (requests_per_unit 0, or a cost above
	// the limit), so it gives no Retry-After.
	final bool
}

// ShouldRateLimit decides every descriptor of req (each is one limit; all of
// them are counted) and answers OVER_LIMIT when any non-shadow limit is over.
// A descriptor whose domain or entries match no rate_limit, an unlimited one,
// and one whose limit another matched limit replaces answer OK without
// current_limit. The cost of a descriptor is its hits_addend when set (0
// checks without counting), else the request's hits_addend, else 1.
//
// Errors are gRPC statuses: InvalidArgument for an empty domain, no
// descriptors, an entry without key, a descriptor that overrides the limit
// or asks for negative hits (not supported); Unavailable when the store
// cannot decide (Envoy then applies its failure_mode_deny).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	rules := s.rules.Load()
	checks := make([]check, len(req.GetDescriptors()))
	replaced := map[string]bool{}
	for i, desc := range req.GetDescriptors() {
		c := &checks[i]
		c.limit, c.key = rules.Match(req.GetDomain(), desc.GetEntries())
		c.cost = uint64(max(1, req.GetHitsAddend()))
		if h := desc.GetHitsAddend(); h != nil {
			c.cost = h.GetValue()
		}
		if c.limit != nil {
			for _, name := range c.limit.Replaces {
				replaced[name] = true
			}
		}
	}
	now := s.o.Clock.Now()
	for i := range checks {
		c := &checks[i]
		if c.limit != nil && c.limit.Name != "" && replaced[c.limit.Name] {
			c.limit = nil
		}
		if c.limit == nil || c.limit.Unlimited {
			continue
		}
		if err := s.decide(ctx, c, now); err != nil {
			return nil, err
		}
	}
	return answer(checks), nil
}

// Bounds of one request: every descriptor is one store decision, so a
// message full of them would turn one call into thousands of writes.
// Envoy's rate-limit actions produce a handful.
const (
	MaxDescriptors = 64 // descriptors in one request
	MaxEntries     = 32 // entries in one descriptor
)

// validate refuses what no configuration could answer, and requests over
// the bounds above.
func validate(req *rlsv3.RateLimitRequest) error {
	invalid := func(msg string) error { return status.Error(codes.InvalidArgument, "envoy: "+msg) }
	switch {
	case req.GetDomain() == "":
		return invalid("the rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return invalid("the rate limit descriptor list must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return invalid(fmt.Sprintf("%d descriptors in one request; at most %d", len(req.GetDescriptors()), MaxDescriptors))
	}
	if err := req.Validate(); err != nil {
		return invalid(err.Error())
	}
	for _, d := range req.GetDescriptors() {
		switch {
		case d.GetLimit() != nil:
			return invalid("descriptor limit overrides are not supported; configure the limit in the rules")
		case d.GetIsNegativeHits():
			return invalid("negative hits are not supported")
		case len(d.GetEntries()) > MaxEntries:
			return invalid(fmt.Sprintf("%d entries in one descriptor; at most %d", len(d.GetEntries()), MaxEntries))
		}
	}
	return nil
}

// decide fills c's decision: from the store, or without it for a limit
// that refuses everything.
func (s *Service) decide(ctx context.Context, c *check, now time.Time) error {
	p := c.limit.Policy
	if c.limit.blocked() {
		start := limiter.WindowStart(now, p.Window)
		c.d = limiter.Decision{WindowStart: start, ResetAfter: start.Add(p.Window).Sub(now)}
		c.over, c.final = true, true
		s.refused(now, p, c.key)
		return nil
	}
	var err error
	begin := time.Now()
	switch {
	case c.cost == 0 || c.cost > uint64(p.Limit):
		// A check without hits, or a cost that can never pass: read only.
		c.d, err = s.o.Store.Peek(ctx, p, c.key, now)
		c.over = c.cost > 0 || !c.d.Allowed
		c.final = c.cost > 0
		c.d.RetryAfter = 0
	default:
		c.d, err = s.o.Store.Allow(ctx, p, limiter.Request{Key: c.key, Cost: int64(c.cost), Now: now})
		c.over = !c.d.Allowed
	}
	s.o.Metrics.ObserveStore(s.o.StoreName, time.Since(begin), err != nil)
	if err != nil {
		return status.Error(codes.Unavailable, "envoy: the rate-limit store could not decide: "+err.Error())
	}
	if c.over {
		s.refused(now, p, c.key)
	} else {
		s.o.Metrics.CountDecision(p, true)
	}
	return nil
}

// refused counts a refusal of key by p in the metrics and, unless p is a
// shadow policy, among the offenders.
func (s *Service) refused(now time.Time, p limiter.Policy, key limiter.Key) {
	s.o.Metrics.CountDecision(p, false)
	if !p.Shadow {
		s.o.Offenders.Record(now, p.Name, key.Subject)
	}
}

// answer builds the response: one status per descriptor, the overall code,
// and the draft-10 RateLimit-Policy and RateLimit fields (plus Retry-After
// when over the limit) for Envoy to add to the client's response.
func answer(checks []check) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks)),
	}
	var enforced []limiter.Policy
	shown, retry := -1, time.Duration(-1)
	for i, c := range checks {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case c.limit == nil:
			continue
		case c.limit.Unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
			Name: c.limit.Name, RequestsPerUnit: c.limit.RequestsPerUnit, Unit: c.limit.Unit,
		}
		st.LimitRemaining = uint32(min(max(c.d.Remaining, 0), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(max(c.d.ResetAfter, 0))
		if c.limit.Policy.Shadow {
			continue // counted and reported, never enforced
		}
		enforced = append(enforced, c.limit.Policy)
		if c.over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if !c.final {
				retry = max(retry, c.d.RetryAfter)
			}
		}
		// The RateLimit field shows the first refusal, else the tightest.
		if shown < 0 || (c.over && !checks[shown].over) ||
			(c.over == checks[shown].over && !c.over && c.d.Remaining < checks[shown].d.Remaining) {
			shown = i
		}
	}
	if len(enforced) == 0 {
		return resp
	}
	resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: httpapi.PolicyHeader(enforced)},
		{Key: "RateLimit", Value: httpapi.RateLimitHeader(checks[shown].limit.Policy.Name, checks[shown].d)},
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && retry >= 0 {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(limiter.RetryAfterSeconds(retry), 10)})
	}
	return resp
}
