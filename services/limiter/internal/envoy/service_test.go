package envoy

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

// eachStore runs fn against a fresh server on every store.
func eachStore(t *testing.T, fn func(t *testing.T, s *server)) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) { fn(t, serve(t, fixtures(t), open(t))) })
	}
}

// TestNestedDescriptorsAndSeveralPerRequest follows the documented messaging
// example: marketing mail to one recipient is limited by the nested limit,
// every mail to that recipient by the top-level one, both in one request.
func TestNestedDescriptorsAndSeveralPerRequest(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		marketing := entries("message_type", "marketing", "to", "2065550101")
		any := entries("to", "2065550101")
		for i, want := range [][]rlsv3.RateLimitResponse_Code{
			{OK, OK, OK}, {OK, OK, OK}, {OVER, OVER, OK}, {OVER, OVER, OK}, {OVER, OVER, OVER},
		} {
			resp := s.ask(t, "messaging", 0, marketing, any)
			assert.Equal(t, want, codesOf(resp), "request %d", i+1)
		}
		resp := s.ask(t, "messaging", 0, marketing, any)
		nested, top := resp.GetStatuses()[0], resp.GetStatuses()[1]
		assert.Equal(t, &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 2, Unit: rlsv3.RateLimitResponse_RateLimit_DAY}, nested.GetCurrentLimit())
		assert.Equal(t, uint32(4), top.GetCurrentLimit().GetRequestsPerUnit())
		assert.Equal(t, uint32(0), top.GetLimitRemaining())
		dayEnd := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
		assert.Equal(t, dayEnd.Sub(t0), top.GetDurationUntilReset().AsDuration())

		other := s.ask(t, "messaging", 0, entries("message_type", "marketing", "to", "2065550199"), entries("to", "2065550199"))
		assert.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OK, OK}, codesOf(other), "another recipient has its own counters")
		assert.Equal(t, []uint32{1, 3}, []uint32{other.GetStatuses()[0].GetLimitRemaining(), other.GetStatuses()[1].GetLimitRemaining()})

		// The placeholder alone, or a deeper descriptor than configured,
		// matches no limit: OK without current_limit.
		for _, d := range []*ratelimitv3.RateLimitDescriptor{
			entries("message_type", "marketing"),
			entries("to", "2065550101", "cc", "x"),
			entries("message_type", "transactional", "to", "2065550101"),
		} {
			resp := s.ask(t, "messaging", 0, d)
			assert.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OK}, codesOf(resp))
			assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit())
			assert.Empty(t, resp.GetResponseHeadersToAdd())
		}
	})
}

// TestExactThenFirstWildcardThenKey checks envoyproxy/ratelimit's matching
// order (issue #16, point 7): between two matching wildcards the first in
// file order wins, the shorter (t* before trial-*) as the longer
// (/api/admin/* before /api/*).
func TestExactThenFirstWildcardThenKey(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		tests := []struct {
			key, value string
			want       uint32
		}{
			{"customer", "alice", 3},    // key without value
			{"customer", "vip", 5},      // exact value
			{"customer", "vipx", 3},     // not the exact value
			{"customer", "trial-7", 2},  // t*, written first, though trial-* is longer
			{"customer", "team", 2},     // t*
			{"customer", "t", 2},        // '*' matches the empty string
			{"path", "/api/admin/x", 7}, // /api/admin/*, written first
			{"path", "/api/users", 8},   // only /api/* matches
			{"path", "/api/admin", 8},   // /api/admin/* needs the slash
		}
		for _, tt := range tests {
			resp := s.ask(t, "edge", 0, entries(tt.key, tt.value))
			assert.Equal(t, tt.want, resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), tt.value)
		}
		vip := s.ask(t, "edge", 0, entries("customer", "vip"))
		assert.Equal(t, "vip", vip.GetStatuses()[0].GetCurrentLimit().GetName(), "rate_limit.name is echoed")
	})
}

// TestFixedWindowIsTheDefault checks Envoy's behaviour: each value has its own
// counter, the limit+1th request is refused with Retry-After until the window
// ends, and the next window starts afresh.
func TestFixedWindowIsTheDefault(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		for i := 1; i <= 3; i++ {
			resp := s.ask(t, "edge", 0, entries("customer", "alice"))
			require.Equal(t, OK, resp.GetOverallCode(), "request %d", i)
			assert.Equal(t, uint32(3-i), resp.GetStatuses()[0].GetLimitRemaining())
			assert.NotContains(t, headers(resp), "Retry-After")
		}
		resp := s.ask(t, "edge", 0, entries("customer", "alice"))
		assert.Equal(t, []rlsv3.RateLimitResponse_Code{OVER, OVER}, codesOf(resp))
		assert.Equal(t, 15*time.Second, resp.GetStatuses()[0].GetDurationUntilReset().AsDuration())
		assert.Equal(t, map[string]string{
			"RateLimit-Policy": `"edge.customer";q=3;w=60`,
			"RateLimit":        `"edge.customer";r=0;t=15`,
			"Retry-After":      "15",
		}, headers(resp))

		assert.Equal(t, OK, s.ask(t, "edge", 0, entries("customer", "bob")).GetOverallCode(), "bob has his own counter")
		s.clock.Advance(15 * time.Second)
		assert.Equal(t, OK, s.ask(t, "edge", 0, entries("customer", "alice")).GetOverallCode(), "a new window")
		assert.Equal(t, 5.0, s.decisions(t, "edge.customer", "allowed"))
		assert.Equal(t, 1.0, s.decisions(t, "edge.customer", "limited"))
	})
}

func TestBlockedAndUnlimited(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		banned := s.ask(t, "edge", 0, entries("customer", "banned"))
		assert.Equal(t, []rlsv3.RateLimitResponse_Code{OVER, OVER}, codesOf(banned), "requests_per_unit 0 refuses the first request")
		assert.Equal(t, uint32(0), banned.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
		assert.NotContains(t, headers(banned), "Retry-After", "no wait makes a blocked request pass")
		assert.Equal(t, `"edge.customer_banned";q=0;w=1`, headers(banned)["RateLimit-Policy"])

		for range 50 {
			resp := s.ask(t, "platform", 0, entries("internal", "batch"))
			require.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OK}, codesOf(resp))
			assert.Equal(t, uint32(math.MaxUint32), resp.GetStatuses()[0].GetLimitRemaining())
			assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit())
			assert.Empty(t, resp.GetResponseHeadersToAdd())
		}
	})
}

func TestShadowModeCountsButNeverRefuses(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		for i := 1; i <= 3; i++ {
			resp := s.ask(t, "platform", 0, entries("tenant", "t1", "plan", "free"))
			assert.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OK}, codesOf(resp), "request %d", i)
			assert.Equal(t, uint32(1), resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
			assert.Empty(t, resp.GetResponseHeadersToAdd(), "a shadow limit adds no header")
		}
		assert.Equal(t, 1.0, s.decisions(t, "platform.tenant.plan_free", "allowed"))
		assert.Equal(t, 2.0, s.decisions(t, "platform.tenant.plan_free", "shadow_limited"))

		want := []rlsv3.RateLimitResponse_Code{OK, OK, OVER}
		for i, w := range want {
			assert.Equal(t, w, s.ask(t, "platform", 0, entries("tenant", "t1", "plan", "paid")).GetOverallCode(), "paid request %d", i+1)
		}
		both := s.ask(t, "platform", 0, entries("tenant", "t2", "plan", "free"), entries("tenant", "t2", "plan", "free"))
		assert.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OK, OK}, codesOf(both), "a shadow refusal inside a request stays OK")
	})
}

// TestHitsAddendAndAlgorithmExtension uses the sliding_log policy (limit 5 per
// minute), where refused attempts are not recorded.
func TestHitsAddendAndAlgorithmExtension(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		key := entries("api_key", "k1")
		remaining := func(resp *rlsv3.RateLimitResponse) uint32 { return resp.GetStatuses()[0].GetLimitRemaining() }

		resp := s.ask(t, "platform", 3, key)
		assert.Equal(t, OK, resp.GetOverallCode())
		assert.Equal(t, uint32(2), remaining(resp), "hits_addend 3 takes 3")

		resp = s.ask(t, "platform", 3, key)
		assert.Equal(t, OVER, resp.GetOverallCode())
		assert.Equal(t, uint32(2), remaining(resp), "a refused attempt is not recorded by sliding_log")
		assert.Equal(t, "60", headers(resp)["Retry-After"], "the 3 units leave the log in 60s")

		key.HitsAddend = wrapperspb.UInt64(2)
		resp = s.ask(t, "platform", 3, key)
		assert.Equal(t, OK, resp.GetOverallCode(), "the descriptor's hits_addend wins over the request's")
		assert.Equal(t, uint32(0), remaining(resp))

		key.HitsAddend = wrapperspb.UInt64(0)
		resp = s.ask(t, "platform", 0, key)
		assert.Equal(t, OVER, resp.GetOverallCode(), "hits_addend 0 checks without counting")
		s.clock.Advance(time.Minute)
		resp = s.ask(t, "platform", 0, key)
		assert.Equal(t, OK, resp.GetOverallCode())
		assert.Equal(t, uint32(5), remaining(resp), "a check counted nothing")

		key.HitsAddend = wrapperspb.UInt64(6)
		resp = s.ask(t, "platform", 0, key)
		assert.Equal(t, OVER, resp.GetOverallCode(), "a cost above the limit never passes")
		assert.Equal(t, uint32(5), remaining(resp), "and is not charged")
		assert.NotContains(t, headers(resp), "Retry-After")

		assert.Equal(t, 3.0, s.decisions(t, "platform.api_key", "allowed"))
		assert.Equal(t, 3.0, s.decisions(t, "platform.api_key", "limited"))
	})
}

func TestHeadersNameTheRefusingLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		marketing := entries("message_type", "marketing", "to", "42")
		any := entries("to", "42")
		resp := s.ask(t, "messaging", 0, marketing, any)
		policy := `"messaging.message_type_marketing.to";q=2;w=86400, "messaging.to";q=4;w=86400`
		left := "43155" // seconds from t0 (12:00:45) to midnight
		assert.Equal(t, map[string]string{
			"RateLimit-Policy": policy,
			"RateLimit":        `"messaging.message_type_marketing.to";r=1;t=` + left,
		}, headers(resp), "when allowed, the limit with the least remaining")
		s.ask(t, "messaging", 0, marketing, any)
		resp = s.ask(t, "messaging", 0, marketing, any)
		assert.Equal(t, map[string]string{
			"RateLimit-Policy": policy,
			"RateLimit":        `"messaging.message_type_marketing.to";r=0;t=` + left,
			"Retry-After":      left,
		}, headers(resp), "when over, the refusing limit")
	})
}

func TestShareThresholdSharesOneCounter(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		got := make([]rlsv3.RateLimitResponse_Code, 0, 3)
		for _, v := range []string{"bucket-a", "bucket-b", "bucket-c"} {
			got = append(got, s.ask(t, "edge", 0, entries("bucket", v)).GetOverallCode())
		}
		assert.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OK, OVER}, got)
	})
}

func TestReplacesDropsTheReplacedLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		search := entries("route", "search", "user", "u1")
		partner := entries("partner", "acme", "user", "u1")
		for i := 1; i <= 3; i++ {
			resp := s.ask(t, "platform", 0, search, partner)
			assert.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OK, OK}, codesOf(resp), "request %d: only the replacing limit (3/min) applies", i)
			assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit(), "the replaced limit is not evaluated")
		}
		assert.Equal(t, OVER, s.ask(t, "platform", 0, search, partner).GetOverallCode())
		alone := s.ask(t, "platform", 0, search)
		assert.Equal(t, OK, alone.GetOverallCode(), "the replaced limit was never charged")
		assert.Equal(t, "search_per_user", alone.GetStatuses()[0].GetCurrentLimit().GetName())
		assert.Equal(t, OVER, s.ask(t, "platform", 0, search).GetOverallCode(), "and applies alone")
	})
}

func TestUnknownDomainAndUnmatchedDescriptorsAreOK(t *testing.T) {
	s := serve(t, fixtures(t), stores["memory"](t))
	for _, domain := range []string{"nowhere", "edge"} {
		resp := s.ask(t, domain, 0, entries("nothing", "here"), entries("customer", "vip", "deeper", "x"))
		assert.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OK, OK}, codesOf(resp), domain)
		for _, st := range resp.GetStatuses() {
			assert.Nil(t, st.GetCurrentLimit())
		}
	}
}

func TestBadRequestsAreRefusedNotPanicked(t *testing.T) {
	s := serve(t, fixtures(t), stores["memory"](t))
	noUnit := entries("customer", "vip")
	noUnit.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	tooHigh := entries("customer", "vip")
	tooHigh.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: math.MaxUint32, Unit: typev3.RateLimitUnit_SECOND}
	negative := entries("customer", "vip")
	negative.IsNegativeHits = true
	many := make([]*ratelimitv3.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = entries("customer", "vip")
	}
	wide := &ratelimitv3.RateLimitDescriptor{}
	for i := range MaxEntries + 1 {
		wide.Entries = append(wide.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: fmt.Sprint("k", i), Value: "v"})
	}
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want codes.Code
		msg  string
	}{
		{"empty descriptor list", &rlsv3.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument, "descriptor list must not be empty"},
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("a", "b")}}, codes.InvalidArgument, "domain must not be empty"},
		{"limit override without unit", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{noUnit}}, codes.InvalidArgument, "unit UNKNOWN is not one of SECOND"},
		{"limit override above the bound", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{tooHigh}}, codes.InvalidArgument, "requests_per_unit 4294967295 is above 2147483648"},
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{negative}}, codes.InvalidArgument, "negative hits"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, codes.InvalidArgument, "65 descriptors in one request; at most 64"},
		{"too many entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{wide}}, codes.InvalidArgument, "33 entries in one descriptor; at most 32"},
		{"oversized message", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			entries("customer", strings.Repeat("x", MaxMessageBytes)),
		}}, codes.ResourceExhausted, "larger than max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.client.ShouldRateLimit(context.Background(), tt.req)
			st, ok := status.FromError(err)
			require.True(t, ok, "%v", err)
			assert.Equal(t, tt.want, st.Code())
			assert.Contains(t, st.Message(), tt.msg)
		})
	}
	// A value just under the message bound is a long key, hashed to fit.
	long := s.ask(t, "edge", 0, entries("customer", strings.Repeat("y", 100_000)))
	assert.Equal(t, OK, long.GetOverallCode())
	assert.Equal(t, uint32(2), long.GetStatuses()[0].GetLimitRemaining())
}

func TestHealthIsServing(t *testing.T) {
	s := serve(t, fixtures(t), stores["memory"](t))
	for _, name := range []string{"", ServiceName} {
		resp, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus(), name)
	}
}

// TestConcurrentCallsAreExact charges one counter from many goroutines over
// gRPC: exactly the limit passes.
func TestConcurrentCallsAreExact(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		const callers = 60
		results := make(chan rlsv3.RateLimitResponse_Code, callers)
		for range callers {
			go func() {
				resp, err := s.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
					Domain: "platform", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("api_key", "shared")},
				})
				if err != nil {
					results <- rlsv3.RateLimitResponse_UNKNOWN
					return
				}
				results <- resp.GetOverallCode()
			}()
		}
		counts := map[rlsv3.RateLimitResponse_Code]int{}
		for range callers {
			counts[<-results]++
		}
		assert.Equal(t, map[rlsv3.RateLimitResponse_Code]int{OK: 5, OVER: callers - 5}, counts)
	})
}

func TestAPanicIsAnsweredInternal(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	_, err := recoverUnary(log)(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/y"},
		func(context.Context, any) (any, error) { panic("boom") })
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.NotContains(t, err.Error(), "boom", "the panic stays in the log")
	assert.Contains(t, logged.String(), "boom")
}

// TestCurrentLimitNamesEveryUnit: every unit a rule may have reaches the
// answer's current_limit under Envoy's name for it, a week too (the rule
// model numbers its units as Envoy's answer does, which converts them by a
// cast).
func TestCurrentLimitNamesEveryUnit(t *testing.T) {
	for _, unit := range []string{"second", "minute", "hour", "day", "week", "month", "year"} {
		r := envoyrules.NewRules(envoyrules.Options{})
		require.NoError(t, r.Add("u.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: "+unit+", requests_per_unit: 7}\n")))
		snap := newService(t, r, stores["memory"](t), limitertest.NewClock(t0), prometheus.NewRegistry()).current()
		resp, err := Decide(context.Background(), snap.Decider, snap.Envoy, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("k", "v")}})
		require.NoError(t, err)
		current := resp.GetStatuses()[0].GetCurrentLimit()
		assert.Equal(t, strings.ToUpper(unit), current.GetUnit().String())
		assert.EqualValues(t, 7, current.GetRequestsPerUnit(), unit)
	}
}

// TestEachCallLoadsOneSnapshot: a call decides with the Envoy rules and the
// decider of the one snapshot it loaded.
func TestEachCallLoadsOneSnapshot(t *testing.T) {
	snap := newService(t, fixtures(t), stores["memory"](t), limitertest.NewClock(t0), prometheus.NewRegistry()).current()
	loads := 0
	svc := NewService(func() *snapshot.Snapshot { loads++; return snap })
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("customer", "vip")}})
	require.NoError(t, err)
	assert.NotNil(t, resp.GetStatuses()[0].GetCurrentLimit(), "the snapshot's rules matched the descriptor")
	assert.Equal(t, 1, loads, "one load per call")
}
