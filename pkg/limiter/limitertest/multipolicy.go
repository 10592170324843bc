package limitertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// The rule for one request charged against several policies in order
// (limiter.Evaluation) has three users that must answer alike: the
// service's decision layer, the httplimit middleware and the lab's whatif
// replay, which predicts what the service answers. Each runs the cases
// below with RunMultiPolicy in its own tests, against the same expected
// answers: the lab is a module of its own that never imports the
// service, and the decision layer is internal to the service, so the
// cases live here, where all three can read them.

// multiPolicyStart is the time of a case's first request: 15 seconds before
// a minute ends, 13h00m15s before the UTC day ends.
var multiPolicyStart = time.Date(2026, 5, 1, 10, 59, 45, 0, time.UTC)

// multiPolicyCase is a script of requests, each charged against the
// policies in order on one store, with the answer each must get.
type multiPolicyCase struct {
	name     string
	policies []limiter.Policy
	requests []multiPolicyRequest
}

// multiPolicyRequest is one request of a case: at after multiPolicyStart,
// for key, of cost units (at most the smallest limit, which every user
// accepts), and the answer it must get.
type multiPolicyRequest struct {
	at   time.Duration
	key  string
	cost int64
	want MultiPolicyAnswer
}

// MultiPolicyAnswer is what a user of the rule answered for one request.
type MultiPolicyAnswer struct {
	// Allowed: no enforcing policy refused.
	Allowed bool
	// Refused names the enforcing policy that refused; empty when allowed.
	Refused string
	// Charged names the policies the store was asked to charge, in order.
	Charged []string
	// RateLimit is the shown policy's RateLimit field ("name";r=R;t=T: the
	// policy, its remaining and its reset); empty when none is shown.
	RateLimit string
	// RetryAfter is the Retry-After value in seconds; -1 when none.
	RetryAfter int64
}

// MultiPolicyFunc answers one request of a case: key charged with cost at
// the time of the clock it was started with. Charged is left empty: the
// store tells it.
type MultiPolicyFunc func(key string, cost int64) MultiPolicyAnswer

// RunMultiPolicy runs multiPolicyCases through one user of the rule. For
// each case, start returns that user's answering function for the case's
// policies, deciding on store at clock's time: store passes every call to
// a fresh store of newStore (closed at the end of the case) and records
// the policies each request charges. Every answer is compared with the
// case's, field by field.
func RunMultiPolicy(t *testing.T, newStore func(testing.TB) limiter.Store,
	start func(t *testing.T, policies []limiter.Policy, store limiter.Store, clock limiter.Clock) MultiPolicyFunc) {
	for _, c := range multiPolicyCases {
		t.Run(c.name, func(t *testing.T) {
			store := &charges{Store: newStore(t)}
			t.Cleanup(func() { _ = store.Close() })
			clock := NewClock(multiPolicyStart)
			answer := start(t, c.policies, store, clock)
			for i, r := range c.requests {
				clock.Set(multiPolicyStart.Add(r.at))
				got := answer(r.key, r.cost)
				got.Charged = store.take()
				assert.Equal(t, r.want, got, "request %d: %s at +%s, cost %d", i, r.key, r.at, r.cost)
			}
		})
	}
}

// charges passes every call to the store it holds and records the name of
// the policy of each Allow, in order.
type charges struct {
	limiter.Store
	mu    sync.Mutex
	names []string
}

func (c *charges) Allow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	c.mu.Lock()
	c.names = append(c.names, p.Name)
	c.mu.Unlock()
	return c.Store.Allow(ctx, p, r)
}

// take returns the names recorded since the last take.
func (c *charges) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := c.names
	c.names = nil
	return names
}

// shadow returns p as a shadow policy.
func shadow(p limiter.Policy) limiter.Policy { p.Shadow = true; return p }

const day = 24 * time.Hour

// allowed is the answer of a request that passed, showing rateLimit.
func allowed(rateLimit string, charged ...string) MultiPolicyAnswer {
	return MultiPolicyAnswer{Allowed: true, Charged: charged, RateLimit: rateLimit, RetryAfter: -1}
}

// refused is the answer of a request refused by policy by, showing
// rateLimit, to retry in retry seconds.
func refused(by, rateLimit string, retry int64, charged ...string) MultiPolicyAnswer {
	return MultiPolicyAnswer{Refused: by, Charged: charged, RateLimit: rateLimit, RetryAfter: retry}
}

// multiPolicyCases are the cases every user of the rule answers alike. In
// each, the times are offsets from multiPolicyStart; key "k" and cost 1
// unless a request says otherwise.
var multiPolicyCases = []multiPolicyCase{
	{
		name:     "one policy counts down, refuses, and starts afresh in the next window",
		policies: []limiter.Policy{policy("ping", limiter.FixedWindow, 3, time.Minute)},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed(`"ping";r=2;t=15`, "ping")},
			{0, "k", 1, allowed(`"ping";r=1;t=15`, "ping")},
			{0, "k", 1, allowed(`"ping";r=0;t=15`, "ping")},
			{0, "k", 1, refused("ping", `"ping";r=0;t=15`, 15, "ping")},
			{15 * time.Second, "k", 1, allowed(`"ping";r=2;t=60`, "ping")},
		},
	},
	{
		// The day's count shows which requests charged it: had the minute's
		// refusals charged it too, it would refuse at +15s.
		name:     "the first enforcing refusal stops the evaluation: the policies after it are not charged",
		policies: []limiter.Policy{policy("minute", limiter.FixedWindow, 2, time.Minute), policy("day", limiter.FixedWindow, 5, day)},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed(`"minute";r=1;t=15`, "minute", "day")},
			{0, "k", 1, allowed(`"minute";r=0;t=15`, "minute", "day")},
			{0, "k", 1, refused("minute", `"minute";r=0;t=15`, 15, "minute")},
			{15 * time.Second, "k", 1, allowed(`"minute";r=1;t=60`, "minute", "day")},
			{15 * time.Second, "k", 1, allowed(`"minute";r=0;t=60`, "minute", "day")},
			{15 * time.Second, "k", 1, refused("minute", `"minute";r=0;t=60`, 60, "minute")},
			{75 * time.Second, "k", 1, allowed(`"day";r=0;t=46740`, "minute", "day")},
			{75 * time.Second, "k", 1, refused("day", `"day";r=0;t=46740`, 46740, "minute", "day")},
			{75 * time.Second, "k", 1, refused("minute", `"minute";r=0;t=60`, 60, "minute")},
		},
	},
	{
		// a's count shows that the refused request charged it: 5 of 5
		// after three requests, so a is shown (the first of equals).
		name:     "a cost above one; the policies before the refusal stay charged",
		policies: []limiter.Policy{policy("a", limiter.FixedWindow, 5, time.Minute), policy("b", limiter.SlidingLog, 3, time.Minute)},
		requests: []multiPolicyRequest{
			{0, "k", 2, allowed(`"b";r=1;t=60`, "a", "b")},
			{0, "k", 2, refused("b", `"b";r=1;t=60`, 60, "a", "b")},
			{0, "k", 1, allowed(`"a";r=0;t=15`, "a", "b")},
		},
	},
	{
		// The trial's own wait, a day, is never the Retry-After.
		name:     "a shadow refusal is counted and ignored, and never shown",
		policies: []limiter.Policy{shadow(policy("trial", limiter.FixedWindow, 1, day)), policy("ping", limiter.FixedWindow, 3, time.Minute)},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed(`"ping";r=2;t=15`, "trial", "ping")},
			{0, "k", 1, allowed(`"ping";r=1;t=15`, "trial", "ping")},
			{0, "k", 1, allowed(`"ping";r=0;t=15`, "trial", "ping")},
			{0, "k", 1, refused("ping", `"ping";r=0;t=15`, 15, "trial", "ping")},
		},
	},
	{
		name:     "nothing after the enforcing refusal is charged, shadows included",
		policies: []limiter.Policy{policy("ping", limiter.FixedWindow, 1, time.Minute), shadow(policy("audit", limiter.FixedWindow, 5, time.Minute))},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed(`"ping";r=0;t=15`, "ping", "audit")},
			{0, "k", 1, refused("ping", `"ping";r=0;t=15`, 15, "ping")},
			{15 * time.Second, "k", 1, allowed(`"ping";r=0;t=60`, "ping", "audit")},
		},
	},
	{
		name: "the enforcing policy with the least remaining is shown, the first of equals",
		policies: []limiter.Policy{policy("wide", limiter.FixedWindow, 10, time.Minute), policy("b", limiter.FixedWindow, 3, time.Minute),
			policy("c", limiter.FixedWindow, 3, time.Minute), shadow(policy("tiny", limiter.FixedWindow, 1, time.Minute))},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed(`"b";r=2;t=15`, "wide", "b", "c", "tiny")},
			{0, "k", 1, allowed(`"b";r=1;t=15`, "wide", "b", "c", "tiny")},
			{0, "k", 1, allowed(`"b";r=0;t=15`, "wide", "b", "c", "tiny")},
			{0, "k", 1, refused("b", `"b";r=0;t=15`, 15, "wide", "b")},
		},
	},
	{
		name:     "only shadows: every request passes and nothing is shown",
		policies: []limiter.Policy{shadow(policy("trial", limiter.FixedWindow, 1, time.Minute))},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed("", "trial")},
			{0, "k", 1, allowed("", "trial")},
		},
	},
	{
		// The log's refusal at +20s waits for its oldest event (+0s) to
		// leave; the bucket, not charged then, admits at +60s.
		name:     "a sliding_log refusal before a token_bucket: the log's wait",
		policies: []limiter.Policy{policy("log", limiter.SlidingLog, 2, time.Minute), policy("bucket", limiter.TokenBucket, 4, time.Minute)},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed(`"log";r=1;t=60`, "log", "bucket")},
			{10 * time.Second, "k", 1, allowed(`"log";r=0;t=60`, "log", "bucket")},
			{20 * time.Second, "k", 1, refused("log", `"log";r=0;t=40`, 40, "log")},
			{60 * time.Second, "k", 1, allowed(`"log";r=0;t=60`, "log", "bucket")},
		},
	},
	{
		name:     "a token_bucket refusal after a sliding_log: the bucket's wait",
		policies: []limiter.Policy{policy("log", limiter.SlidingLog, 5, time.Minute), policy("bucket", limiter.TokenBucket, 2, time.Minute)},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed(`"bucket";r=1;t=30`, "log", "bucket")},
			{0, "k", 1, allowed(`"bucket";r=0;t=60`, "log", "bucket")},
			{0, "k", 1, refused("bucket", `"bucket";r=0;t=30`, 30, "log", "bucket")},
			{30 * time.Second, "k", 1, allowed(`"bucket";r=0;t=60`, "log", "bucket")},
		},
	},
	{
		// The refusal at +0s waits until the weighted estimate leaves room:
		// 15 s to the next window, then 30 s more.
		name:     "a sliding_window refusal before a fixed window",
		policies: []limiter.Policy{policy("weighted", limiter.SlidingWindow, 2, time.Minute), policy("hits", limiter.FixedWindow, 10, time.Minute)},
		requests: []multiPolicyRequest{
			{0, "k", 1, allowed(`"weighted";r=1;t=60`, "weighted", "hits")},
			{0, "k", 1, allowed(`"weighted";r=0;t=60`, "weighted", "hits")},
			{0, "k", 1, refused("weighted", `"weighted";r=0;t=45`, 45, "weighted")},
			{60 * time.Second, "k", 1, allowed(`"weighted";r=0;t=60`, "weighted", "hits")},
		},
	},
	{
		name:     "each key is counted apart",
		policies: []limiter.Policy{policy("ping", limiter.FixedWindow, 1, time.Minute), policy("day", limiter.FixedWindow, 100, day)},
		requests: []multiPolicyRequest{
			{0, "alice", 1, allowed(`"ping";r=0;t=15`, "ping", "day")},
			{0, "bob", 1, allowed(`"ping";r=0;t=15`, "ping", "day")},
			{0, "alice", 1, refused("ping", `"ping";r=0;t=15`, 15, "ping")},
			{15 * time.Second, "bob", 1, allowed(`"ping";r=0;t=60`, "ping", "day")},
		},
	},
}
