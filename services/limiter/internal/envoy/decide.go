package envoy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
)

// Decide decides every descriptor of req with dec (each is one limit; all
// of them are counted) and answers OVER_LIMIT when any non-shadow limit is
// over, as envoyproxy/ratelimit does. Both transports, gRPC and POST /json,
// answer through it.
//
//   - A descriptor's limit is its request-side override when it has one
//     (see Rules.Override), else the rule its entries match (Rules.Match).
//     One that matches nothing (an unknown domain, no rule, no entries), an
//     unlimited one, and one whose limit another matched limit replaces
//     answer OK without current_limit.
//   - Its cost is its hits_addend when set (0 checks without counting:
//     over only when the key is already past its limit), else the
//     request's hits_addend if above 0, else 1. A cost above the limit is
//     over; the fixed window counts it, as the peer does (the other
//     algorithms count only what passes).
//   - With Options.StopIncrementWhenOverLimit, when any descriptor would go
//     over its limit, only those are counted; the others are checked
//     without counting (see stopIncrement).
//   - The answer is OVER_LIMIT when a descriptor not in quota mode is over,
//     or when every descriptor in quota mode is (quota_mode, or
//     Options.QuotaMode for all; an over quota descriptor still reports
//     OVER_LIMIT in its status); with Options.ShadowMode it is OK whatever
//     the statuses say. All as envoyproxy/ratelimit answers.
//   - The answer carries header fields only with Options.ResponseHeaders,
//     and dynamic_metadata only with Options.DynamicMetadata.
//
// Errors are plain Go errors, which each transport answers in its own
// terms (the gRPC server in status codes, see ShouldRateLimit; POST /json
// in HTTP problems): ErrInvalid for an empty domain, no descriptors, a bad
// limit override, negative hits (not supported) or a request over the
// bounds; otherwise the store could not decide, and the error keeps the
// cause in its chain: limiter.ErrOverloaded when this instance shed the
// request (its decision could not be sent within the budget),
// context.Canceled when the caller went away, the store's error else.
func Decide(ctx context.Context, dec *decide.Decider, rules *envoyrules.Rules, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	limits := make([]*envoyrules.Limit, len(req.GetDescriptors()))
	keys := make([]limiter.Key, len(limits))
	replaced := map[string]bool{}
	for i, desc := range req.GetDescriptors() {
		if desc.GetLimit() != nil {
			var err error
			if limits[i], keys[i], err = rules.Override(req.GetDomain(), desc); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		} else {
			limits[i], keys[i] = rules.Match(req.GetDomain(), desc.GetEntries())
		}
		if limits[i] != nil {
			for _, name := range limits[i].Replaces {
				replaced[name] = true
			}
		}
	}
	checks := make([]decide.Check, 0, len(limits))
	index := make([]int, 0, len(limits)) // index[j]: the descriptor of checks[j]
	for i, desc := range req.GetDescriptors() {
		l := limits[i]
		if l != nil && l.Name != "" && replaced[l.Name] {
			limits[i] = nil
			continue
		}
		if l == nil || l.Unlimited {
			continue
		}
		cost := uint64(max(1, req.GetHitsAddend()))
		if h := desc.GetHitsAddend(); h != nil {
			cost = h.GetValue()
		}
		c := decide.Check{Policy: l.Policy, Key: keys[i], Cost: int64(min(cost, math.MaxInt64))}
		switch {
		case l.Blocked():
			c.Mode = decide.Refuse
		case cost == 0:
			c.Mode = decide.Read // a check without hits
		case cost > uint64(l.Policy.Limit) && l.Policy.Algorithm != limiter.FixedWindow:
			// A cost that can never pass, under an algorithm that counts
			// only what passes: read only. The fixed window counts it.
			c.Mode = decide.Read
		}
		checks = append(checks, c)
		index = append(index, i)
	}
	o := rules.Options()
	if o.StopIncrementWhenOverLimit {
		if err := stopIncrement(ctx, dec, checks); err != nil {
			return nil, err
		}
	}
	v, err := dec.Each(ctx, checks, o.ResponseHeaders)
	if err != nil {
		return nil, err
	}
	resp := answer(limits, index, v, o)
	if o.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, limits, index, v)
	}
	return resp, nil
}

// stopIncrement applies STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT to checks,
// as envoyproxy/ratelimit does: it reads every check first; when one or
// more would be over their limit with their cost added (a limit of zero
// and a cost above the limit always are; shadow limits count too), those
// stay as they are and every other one becomes a check without counting,
// answered from the count as it is. When none would, nothing changes. Like the peer's, the read and
// the count are two steps: a concurrent request can slip between them.
func stopIncrement(ctx context.Context, dec *decide.Decider, checks []decide.Check) error {
	over := make([]bool, len(checks))
	anyOver := false
	for j, c := range checks {
		if c.Mode == decide.Refuse || c.Cost > c.Policy.Limit {
			over[j] = true
		} else {
			d, err := dec.Peek(ctx, c.Policy, c.Key)
			if err != nil {
				return err
			}
			over[j] = d.Count+c.Cost > c.Policy.Limit
		}
		anyOver = anyOver || over[j]
	}
	if !anyOver {
		return nil
	}
	for j := range checks {
		if checks[j].Mode == decide.Charge && !over[j] {
			checks[j].Mode, checks[j].Cost = decide.Read, 0
		}
	}
	return nil
}

// Bounds of one request: every descriptor is one store decision, so a
// message full of them would turn one call into thousands of writes.
// Envoy's rate-limit actions produce a handful.
const (
	MaxDescriptors = 64 // descriptors in one request
	MaxEntries     = 32 // entries in one descriptor
)

// ErrInvalid is the error, in the chain of Decide's and DecodeJSON's, of a
// request no configuration could answer: the caller's to fix (gRPC's
// InvalidArgument, HTTP's 400). The error's message says what is wrong.
var ErrInvalid = errors.New("envoy: invalid request")

// invalid returns an ErrInvalid saying msg.
func invalid(msg string) error { return fmt.Errorf("%w: %s", ErrInvalid, msg) }

// validate refuses what no configuration could answer, and requests over
// the bounds above.
func validate(req *rlsv3.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return invalid("the rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return invalid("the rate limit descriptor list must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return invalid(fmt.Sprintf("%d descriptors in one request; at most %d", len(req.GetDescriptors()), MaxDescriptors))
	}
	// None of the message's generated rules: the peer answers a
	// descriptor without entries, and an entry without key, as matching
	// nothing; Override checks a limit override.
	for _, d := range req.GetDescriptors() {
		switch {
		case d.GetIsNegativeHits():
			return invalid("negative hits are not supported")
		case len(d.GetEntries()) > MaxEntries:
			return invalid(fmt.Sprintf("%d entries in one descriptor; at most %d", len(d.GetEntries()), MaxEntries))
		}
	}
	return nil
}

// answer builds the response from the verdict v of the checks of the
// descriptors index names: one status per descriptor, the overall code (see
// Decide), and, with o.ResponseHeaders, the header fields
// (RateLimit-Policy, RateLimit, plus Retry-After when the answer is over)
// for Envoy to add to the client's response.
func answer(limits []*envoyrules.Limit, index []int, v decide.Verdict, o envoyrules.Options) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(limits)),
	}
	// One allocation holds every status, with its current_limit and its
	// duration: not one each.
	parts := make([]struct {
		status   rlsv3.RateLimitResponse_DescriptorStatus
		current  rlsv3.RateLimitResponse_RateLimit
		duration durationpb.Duration
	}, len(limits))
	for i, l := range limits {
		st := &parts[i].status
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		if l != nil && l.Unlimited {
			st.LimitRemaining = math.MaxUint32
		}
	}
	for j, r := range v.Results {
		l, p := limits[index[j]], &parts[index[j]]
		st := &p.status
		// The unit enums number their common values alike (the peer
		// converts one to the other the same way).
		p.current.Name, p.current.RequestsPerUnit, p.current.Unit = l.Name, l.RequestsPerUnit, rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit)
		st.CurrentLimit = &p.current
		st.LimitRemaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
		reset := max(r.ResetAfter, 0)
		p.duration.Seconds, p.duration.Nanos = int64(reset/time.Second), int32(reset%time.Second)
		st.DurationUntilReset = &p.duration
		if r.Over && !l.Policy.Shadow { // shadows are counted and reported, never enforced
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if overall(limits, resp.Statuses, o.QuotaMode) && !o.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if o.LimitHeaders {
		resp.ResponseHeadersToAdd = limitHeaders(o.LimitHeaderNames, limits, resp.Statuses, o.QuotaMode)
	}
	h := v.Header
	if !o.ResponseHeaders || h.Policy == "" {
		return resp
	}
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
		&corev3.HeaderValue{Key: "RateLimit-Policy", Value: h.Policy},
		&corev3.HeaderValue{Key: "RateLimit", Value: h.RateLimit},
	)
	if h.RetryAfter >= 0 && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(h.RetryAfter, 10)})
	}
	return resp
}

// limitHeaders are envoyproxy/ratelimit's header fields, chosen as it
// chooses them: of the descriptors with a current_limit, the first with the
// least limit_remaining, unless a descriptor not in quota mode is over (the
// last such one then); its requests_per_unit, limit_remaining and the whole
// seconds until its window resets. None when no descriptor has a limit.
func limitHeaders(names envoyrules.LimitHeaderNames, limits []*envoyrules.Limit, statuses []*rlsv3.RateLimitResponse_DescriptorStatus, allQuota bool) []*corev3.HeaderValue {
	var shown *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range statuses {
		if st.GetCurrentLimit() != nil && st.GetLimitRemaining() < least {
			shown, least = st, st.GetLimitRemaining()
		}
		quota := allQuota || (limits[i] != nil && limits[i].Quota)
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && !quota {
			shown, least = st, 0
		}
	}
	if shown == nil {
		return nil
	}
	reset := httplimit.RetryAfterSeconds(shown.GetDurationUntilReset().AsDuration())
	return []*corev3.HeaderValue{
		{Key: names.Limit, Value: strconv.FormatUint(uint64(shown.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: names.Remaining, Value: strconv.FormatUint(uint64(shown.GetLimitRemaining()), 10)},
		{Key: names.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}

// overall reports whether the request is over, as envoyproxy/ratelimit
// decides it from the descriptors' statuses: when a descriptor not in quota
// mode is over, or when there are descriptors in quota mode (every one but
// the unlimited with allQuota) and all of them are over.
func overall(limits []*envoyrules.Limit, statuses []*rlsv3.RateLimitResponse_DescriptorStatus, allQuota bool) bool {
	quotas, quotasOver := 0, 0
	for i, l := range limits {
		if l != nil && l.Unlimited {
			continue
		}
		over := statuses[i].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		if !allQuota && (l == nil || !l.Quota) {
			if over {
				return true
			}
			continue
		}
		quotas++
		if over {
			quotasOver++
		}
	}
	return quotas > 0 && quotas == quotasOver
}
