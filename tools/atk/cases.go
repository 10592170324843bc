package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
)

// maxExhaust bounds how many requests a case sends to exhaust a budget; a
// target whose limit is larger fails the case instead of being flooded.
const maxExhaust = 200

// floodSize is how many bad requests ATK-29 sends at once.
const floodSize = 200

// adminGuesses is how many wrong admin keys ATK-42 sends from one address:
// more than twice the 20 a minute the service answers 403 before it
// throttles, so that at least one is throttled even when the guesses
// straddle a minute boundary.
const adminGuesses = 2*20 + 1

// idleConnsPerAddr is how many keep-alive connections each of ATK-44's four
// addresses opens: 512 in all, more than the 352 slots of each listener of
// a service with two listeners and 1,024 descriptors.
const idleConnsPerAddr = 128

// Cases is the attack table: ATK-01..ATK-12 are the sliding-window seed's (docs/seeds.md)
// cases with docs/design.md's status codes, the rest what hostile clients send.
// Adding a case is adding a row.
var Cases = []Case{
	{
		ID: "ATK-01", Name: "missing X-User-Id",
		Desc: "POST /rate/check and GET /rate/status without X-User-Id -> 400 problem",
		Steps: func(e *Env) []Step {
			return []Step{
				{Req: check("", "e"), Want: 400},
				{Req: status("", "e"), Want: 400},
			}
		},
	},
	{
		ID: "ATK-02", Name: "empty endpoint",
		Desc: `POST /rate/check {"endpoint": ""} -> 422 problem, nothing recorded`,
		Steps: func(e *Env) []Step {
			uid := e.UserID()
			return []Step{
				{Req: check(uid, ""), Want: 422},
				countIs(uid, "e", 0),
			}
		},
	},
	{
		ID: "ATK-03", Name: "129-character endpoint",
		Desc: "POST /rate/check with a 129-character endpoint -> 422 problem, nothing recorded",
		Steps: func(e *Env) []Step {
			uid, long := e.UserID(), strings.Repeat("a", 129)
			return []Step{
				{Req: check(uid, long), Want: 422},
				countIs(uid, long[:128], 0),
			}
		},
	},
	{
		ID: "ATK-04", Name: "SQL injection in endpoint",
		Desc: "POST /rate/check with endpoint `'; DROP TABLE rate_events; --` -> 200, stored as data: /rate/status for it shows 1, normal checks still work",
		Steps: func(e *Env) []Step {
			uid, inj, ep := e.UserID(), "'; DROP TABLE rate_events; --", e.Token("e-")
			return []Step{
				okCheck(uid, inj, 1),
				countIs(uid, inj, 1),
				okCheck(uid, ep, 1),
				countIs(uid, ep, 1),
			}
		},
	},
	{
		ID: "ATK-05", Name: "non-admin reset",
		Desc: "DELETE /rate/reset/{own id} without X-Admin-Key -> 403 problem, the user's count unchanged",
		Steps: func(e *Env) []Step {
			uid := e.UserID()
			return refusedReset(e, uid, http.Header{}, hdr("X-User-Id", uid))
		},
	},
	{
		ID: "ATK-06", Name: "wrong admin key",
		Desc: "DELETE /rate/reset/{id} and /rate/reset/abc with a wrong X-Admin-Key -> 403 problem (key before path), count unchanged",
		Steps: func(e *Env) []Step {
			uid, wrong := e.UserID(), e.Token("wrong-")
			steps := refusedReset(e, uid, hdr("X-Admin-Key", wrong))
			return append(steps, Step{Req: Request{Method: http.MethodDelete, Path: "/rate/reset/abc", Header: hdr("X-Admin-Key", wrong)}, Want: 403})
		},
	},
	{
		ID: "ATK-07", Name: "negative userId in path",
		Desc:  "DELETE /rate/reset/-1 with the admin key -> 404 problem (403 when the run has no key)",
		Steps: func(e *Env) []Step { return []Step{{Req: reset("-1", e.AdminKey()), Want: e.AdminWant(404)}} },
	},
	{
		ID: "ATK-08", Name: "zero userId in path",
		Desc:  "DELETE /rate/reset/0 with the admin key -> 404 problem (403 when the run has no key)",
		Steps: func(e *Env) []Step { return []Step{{Req: reset("0", e.AdminKey()), Want: e.AdminWant(404)}} },
	},
	{
		ID: "ATK-09", Name: "non-numeric userId in path",
		Desc:  "DELETE /rate/reset/abc with the admin key -> 404 problem (403 when the run has no key)",
		Steps: func(e *Env) []Step { return []Step{{Req: reset("abc", e.AdminKey()), Want: e.AdminWant(404)}} },
	},
	{
		ID: "ATK-10", Name: "status without endpoint",
		Desc: "GET /rate/status without ?endpoint= and with it empty -> 422 problem",
		Steps: func(e *Env) []Step {
			uid := e.UserID()
			return []Step{
				{Req: statusQuery(uid, ""), Want: 422},
				{Req: statusQuery(uid, "?endpoint="), Want: 422},
			}
		},
	},
	{
		ID: "ATK-11", Name: "check without body",
		Desc: "POST /rate/check with no body -> 400 problem",
		Steps: func(e *Env) []Step {
			return []Step{{Req: checkBody(e.UserID(), nil), Want: 400}}
		},
	},
	{
		ID: "ATK-12", Name: "body without endpoint key",
		Desc: `POST /rate/check with {} and {"endpont": "e"} -> 422 problem`,
		Steps: func(e *Env) []Step {
			uid := e.UserID()
			return []Step{
				{Req: checkBody(uid, []byte(`{}`)), Want: 422},
				{Req: checkBody(uid, []byte(`{"endpont":"e"}`)), Want: 422},
			}
		},
	},
	{
		ID: "ATK-13", Name: "overflowing X-User-Id",
		Desc:  "X-User-Id 99999999999999999999, 9223372036854775808, 18446744073709551616 on check and status -> 400 problem",
		Steps: badUserIDs("99999999999999999999", "9223372036854775808", "18446744073709551616"),
	},
	{
		ID: "ATK-14", Name: "signed X-User-Id",
		Desc:  "X-User-Id +5, -5, -0 on check and status -> 400 problem",
		Steps: badUserIDs("+5", "-5", "-0"),
	},
	{
		ID: "ATK-15", Name: "space, hex and decimal X-User-Id",
		Desc:  "X-User-Id '1 2', 0x1F, 1_000, 1e3, 1.0 on check and status -> 400 problem",
		Steps: badUserIDs("1 2", "0x1F", "1_000", "1e3", "1.0"),
	},
	{
		ID: "ATK-16", Name: "unicode-digit X-User-Id",
		Desc:  "X-User-Id in Arabic-Indic, fullwidth and mathematical digits on check and status -> 400 problem",
		Steps: badUserIDs("١٢٣", "１２３", "𝟏𝟐𝟑"),
	},
	{
		ID: "ATK-17", Name: "zero X-User-Id",
		Desc:  "X-User-Id 0, 00, 0000000000 on check and status -> 400 problem",
		Steps: badUserIDs("0", "00", "0000000000"),
	},
	{
		ID: "ATK-18", Name: "forged X-Forwarded-For on /ping",
		Desc: "GET /ping without X-Client-Key, a new forged X-Forwarded-For/Forwarded each time: one budget for the peer, then 429 with Retry-After",
		Then: forgedPing("X-Forwarded-For", "Forwarded"),
	},
	{
		ID: "ATK-19", Name: "forged X-Real-IP on /ping",
		Desc: "GET /ping without X-Client-Key, a new forged X-Real-IP/True-Client-IP each time: one budget for the peer, then 429 with Retry-After",
		Then: forgedPing("X-Real-IP", "True-Client-IP"),
	},
	{
		ID: "ATK-20", Name: "body over 64 KiB",
		Desc: "POST /rate/check and /v1/check with a 65 KiB JSON body -> 413 problem, nothing recorded",
		Steps: func(e *Env) []Step {
			uid, pad := e.UserID(), strings.Repeat("x", 65<<10)
			return []Step{
				{Req: checkBody(uid, fmt.Appendf(nil, `{"endpoint":"e","pad":"%s"}`, pad)), Want: 413},
				{Req: Request{Method: http.MethodPost, Path: "/v1/check", Header: hdr("Content-Type", "application/json"),
					Body: fmt.Appendf(nil, `{"policy":"check","key":"k","cost":1,"pad":"%s"}`, pad)}, Want: 413},
				countIs(uid, "e", 0),
			}
		},
	},
	{
		ID: "ATK-21", Name: "malformed JSON",
		Desc: "POST /rate/check with truncated JSON, trailing garbage, two objects, plain text -> 400 problem, nothing recorded",
		Steps: func(e *Env) []Step {
			uid := e.UserID()
			var steps []Step
			for _, b := range []string{`{"endpoint":`, `{"endpoint":"e"} x`, `{"endpoint":"e"}{"endpoint":"e"}`, `endpoint=e`} {
				steps = append(steps, Step{Req: checkBody(uid, []byte(b)), Want: 400})
			}
			return append(steps, countIs(uid, "e", 0))
		},
	},
	{
		ID: "ATK-22", Name: "wrong JSON type for endpoint",
		Desc: "POST /rate/check with endpoint 5, true, [\"e\"], {\"e\":1}, null -> 422 problem",
		Steps: func(e *Env) []Step {
			uid := e.UserID()
			var steps []Step
			for _, v := range []string{`5`, `true`, `["e"]`, `{"e":1}`, `null`} {
				steps = append(steps, Step{Req: checkBody(uid, []byte(`{"endpoint":`+v+`}`)), Want: 422})
			}
			return steps
		},
	},
	{
		ID: "ATK-23", Name: "wrong methods",
		Desc: "GET /rate/check, POST /rate/reset/1, PUT /v1/check -> 405 problem with an Allow header naming the right method",
		Steps: func(e *Env) []Step {
			allow := func(method string) func(e *Env, r *Response) {
				return func(e *Env, r *Response) {
					var methods []string
					for _, v := range r.Header.Values("Allow") {
						for m := range strings.SplitSeq(v, ",") {
							methods = append(methods, strings.TrimSpace(m))
						}
					}
					assert.Contains(e.T, methods, method, "405: Allow header")
				}
			}
			return []Step{
				{Req: Request{Method: http.MethodGet, Path: "/rate/check", Header: hdr("X-User-Id", e.UserID())}, Want: 405, Check: allow(http.MethodPost)},
				{Req: Request{Method: http.MethodPost, Path: "/rate/reset/1", Header: hdr("X-Admin-Key", e.AdminKey())}, Want: 405, Check: allow(http.MethodDelete)},
				{Req: Request{Method: http.MethodPut, Path: "/v1/check", Body: []byte(`{"policy":"check","key":"k","cost":1}`)}, Want: 405, Check: allow(http.MethodPost)},
			}
		},
	},
	{
		ID: "ATK-24", Name: "near-miss admin keys",
		Desc:  "DELETE /rate/reset/{id} with the key one character changed, cut short, extended, ' x' appended, case swapped, empty -> 403 problem, count unchanged",
		Needs: NeedAdminKey,
		Steps: func(e *Env) []Step {
			var hs []http.Header
			for _, k := range nearMisses(e.AdminKey()) {
				hs = append(hs, http.Header{"X-Admin-Key": {k}})
			}
			return refusedReset(e, e.UserID(), hs...)
		},
	},
	{
		ID: "ATK-25", Name: "injection via X-Client-Key and /status?key",
		Desc: "GET /ping with X-Client-Key `c-…'); DROP TABLE rate_limit_windows; --` -> 200 keyed by it; /status?key= it -> 1, /status?key=' OR '1'='1 -> 0",
		Steps: func(e *Env) []Step {
			ck := e.Token("c-") + "'); DROP TABLE rate_limit_windows; --"
			return []Step{
				{Req: Request{Method: http.MethodGet, Path: "/ping", Header: hdr("X-Client-Key", ck)}, Want: 200, Check: func(e *Env, r *Response) {
					e.Member(r, "key", ck, "/ping")
					assert.Equal(e.T, int64(1), e.Number(r, "count", "/ping"), "/ping with a fresh X-Client-Key: count")
				}},
				keyCountIs(ck, 1),
				keyCountIs("' OR '1'='1", 0),
			}
		},
	},
	{
		ID: "ATK-26", Name: "injection via /v1/check key",
		Desc: "POST /v1/check (policy --v1-policy) twice with key `k-…' OR '1'='1`, once with another such key -> 200, allowed; one counter per exact key (remaining falls by one, the other key starts afresh)",
		Then: func(e *Env) {
			k1, k2 := e.Token("k-")+"' OR '1'='1", e.Token("k-")+"' OR '1'='1"
			var remaining []int64
			for _, key := range []string{k1, k1, k2} {
				r := e.Run(Step{Req: v1(key, e.cfg.V1Policy, 1), Want: 200})
				if r.Status != http.StatusOK {
					return
				}
				e.Member(r, "allowed", "true", "POST /v1/check")
				remaining = append(remaining, e.Number(r, "remaining", "POST /v1/check"))
			}
			assert.Equal(e.T, remaining[0]-1, remaining[1], "/v1/check with the same injected key twice: remaining falls by one")
			assert.Equal(e.T, remaining[0], remaining[2], "/v1/check with another injected key: a fresh counter")
		},
	},
	{
		ID: "ATK-27", Name: "injection via path id and /rate/status endpoint",
		Desc: "DELETE /rate/reset/1 OR 1=1 (and ;DROP, ' OR) -> 404 (403 without key); /rate/status?endpoint=' OR '1'='1 -> 0 for a user with one event",
		Steps: func(e *Env) []Step {
			uid, ep := e.UserID(), e.Token("e-")
			steps := []Step{okCheck(uid, ep, 1)}
			for _, id := range []string{"1 OR 1=1", "1;DROP TABLE rate_events", "1' OR '1'='1"} {
				steps = append(steps, Step{Req: reset(url.PathEscape(id), e.AdminKey()), Want: e.AdminWant(404)})
			}
			return append(steps, countIs(uid, "' OR '1'='1", 0), countIs(uid, ep+"' --", 0), countIs(uid, ep, 1))
		},
	},
	{
		ID: "ATK-28", Name: "header over 1 MiB",
		Desc: "GET /healthz with a 1 MiB + 64 KiB header (past net/http's 1 MiB default) -> 431 or the connection closed; /healthz still 200 afterwards",
		Steps: func(e *Env) []Step {
			return []Step{
				{Req: Request{Method: http.MethodGet, Path: "/healthz", Header: hdr("X-Atk-Pad", strings.Repeat("a", 1<<20+64<<10))},
					Want: http.StatusRequestHeaderFieldsTooLarge, ConnErrOK: true, RawError: true},
				{Req: Request{Method: http.MethodGet, Path: "/healthz"}, Want: 200},
			}
		},
	},
	{
		ID: "ATK-29", Name: "flood of bad requests",
		Desc: "200 concurrent malformed POST /rate/check for one user -> all 400; then /healthz 200 and that user's first good check 200 with count 1",
		Steps: func(e *Env) []Step {
			uid, ep := e.UserID(), e.Token("e-")
			return []Step{
				{Req: checkBody(uid, []byte(`{"endpoint":`)), Want: 400, Times: floodSize},
				{Req: Request{Method: http.MethodGet, Path: "/healthz"}, Want: 200},
				okCheck(uid, ep, 1),
			}
		},
	},
	{
		ID: "ATK-30", Name: "unknown policy",
		Desc: "POST /v1/check with a policy that does not exist -> 404 problem",
		Steps: func(e *Env) []Step {
			return []Step{{Req: v1(e.Token("k-"), e.Token("no-such-policy-"), 1), Want: 404}}
		},
	},
	{
		ID: "ATK-31", Name: "bad cost",
		Desc: "POST /v1/check (policy --v1-policy) with cost 0, -1 and limit+1 -> 422 problem",
		Then: func(e *Env) {
			key := e.Token("k-")
			r := e.Run(Step{Req: v1(key, e.cfg.V1Policy, 1), Want: 200})
			if r.Status != 200 {
				return
			}
			limit := e.Number(r, "limit", "/v1/check")
			for _, cost := range []int64{0, -1, limit + 1} {
				e.Run(Step{Req: v1(key, e.cfg.V1Policy, cost), Want: 422})
			}
		},
	},
	{
		ID: "ATK-32", Name: "fail-closed admin",
		Desc:  "against --closed-target (no admin key configured): DELETE /rate/reset/1 with no key, a random key, an empty X-Admin-Key, and /rate/reset/abc -> 403 problem",
		Needs: NeedClosedTarget,
		Steps: func(e *Env) []Step {
			var steps []Step
			for _, h := range []http.Header{{}, hdr("X-Admin-Key", e.Token("guess-")), {"X-Admin-Key": {""}}} {
				for _, path := range []string{"/rate/reset/1", "/rate/reset/1?endpoint=e", "/rate/reset/abc"} {
					steps = append(steps, Step{Req: Request{Method: http.MethodDelete, Path: path, Header: h, To: Closed}, Want: 403})
				}
			}
			return steps
		},
	},
	{
		ID: "ATK-33", Name: "429 answer and RateLimit headers",
		Desc: "POST /rate/check until refused: counts 1..limit with RateLimit/RateLimit-Policy; then 429 problem rate-limit-exceeded with Retry-After and both headers; refusals not recorded",
		Then: func(e *Env) {
			uid, ep := e.UserID(), e.Token("e-")
			for i := int64(1); i <= maxExhaust+1; i++ {
				r := e.Do(check(uid, ep))
				if r.Status == http.StatusTooManyRequests {
					limit := i - 1
					if !assert.Positive(e.T, limit, "POST /rate/check: the first check of a fresh user and endpoint was refused (ids reused from an earlier run with this --seed?)") {
						return
					}
					assertDenied(e, r, "POST /rate/check over the limit")
					assertRateLimitHeaders(e, r, "429 of POST /rate/check")
					e.Run(Step{Req: check(uid, ep), Want: 429})
					e.Run(countIs(uid, ep, limit))
					return
				}
				if !assert.Equal(e.T, 200, r.Status, "POST /rate/check #%d: status (body %s)", i, shorten(string(r.Body), 120)) {
					return
				}
				assertRateLimitHeaders(e, r, "200 of POST /rate/check")
				what := fmt.Sprintf("POST /rate/check #%d", i)
				assert.Equal(e.T, i, e.Number(r, "count", what), "%s: count", what)
				assert.Equal(e.T, e.Number(r, "limit", what)-i, e.Number(r, "remaining", what), "%s: remaining", what)
			}
			assert.Fail(e.T, fmt.Sprintf("POST /rate/check: no 429 after %d checks of one user and endpoint", maxExhaust+1))
		},
	},
	{
		ID: "ATK-34", Name: "reset is scoped",
		Desc:  "DELETE /rate/reset/{A}?endpoint=e1 with the key -> 200 deleted 1, only A's e1 cleared; then /rate/reset/{A} clears A only; user B untouched",
		Needs: NeedAdminKey,
		Steps: func(e *Env) []Step {
			a, b, e1, e2, key := e.UserID(), e.UserID(), e.Token("e1-"), e.Token("e2-"), e.AdminKey()
			deleted := func(user, endpoint string, n int64) func(e *Env, r *Response) {
				return func(e *Env, r *Response) {
					e.Member(r, "user_id", user, "reset")
					e.Member(r, "endpoint", endpoint, "reset")
					assert.Equal(e.T, n, e.Number(r, "deleted", "reset"), "reset of %s endpoint %s: deleted", user, endpoint)
				}
			}
			return []Step{
				okCheck(a, e1, 1), okCheck(a, e2, 1), okCheck(b, e1, 1),
				{Req: reset(a+"?endpoint="+url.QueryEscape(e1), key), Want: 200, Check: deleted(a, e1, 1)},
				countIs(a, e1, 0), countIs(a, e2, 1), countIs(b, e1, 1),
				{Req: reset(a, key), Want: 200, Check: deleted(a, "null", 1)},
				countIs(a, e2, 0), countIs(b, e1, 1),
			}
		},
	},
	{
		ID: "ATK-35", Name: "128-character endpoint accepted",
		Desc: "POST /rate/check with a 128-character endpoint (the longest allowed) -> 200 count 1; /rate/status for it -> 1",
		Steps: func(e *Env) []Step {
			uid, ep := e.UserID(), strings.Repeat("b", 128)
			return []Step{okCheck(uid, ep, 1), countIs(uid, ep, 1)}
		},
	},
	{
		ID: "ATK-36", Name: "bypass by key rotation",
		Desc:  "against --strict-target: GET /ping until 429, then a fresh X-Client-Key on each of 5 requests -> still 429 (a client-asserted key from an untrusted peer is not believed)",
		Needs: NeedStrictTarget,
		Then: func(e *Env) {
			if !exhaustPing(e, Request{Method: http.MethodGet, Path: "/ping", To: Strict}) {
				return
			}
			for range 5 {
				r := e.Run(Step{Req: Request{Method: http.MethodGet, Path: "/ping", Header: hdr("X-Client-Key", e.Token("rotated-")), To: Strict}, Want: 429})
				if r.Status == http.StatusTooManyRequests {
					assertDenied(e, r, "GET /ping with a rotated X-Client-Key")
				}
			}
		},
	},
	{
		ID: "ATK-37", Name: "lock-out through a shared namespace",
		Desc:  "GET /ping with X-Client-Key set to another client's address until 429; then GET /ping from that address -> 200 count 1 (header keys and peer addresses are separate budgets)",
		Needs: NeedLoopback,
		Then: func(e *Env) {
			victim := e.PeerIP()
			if exhaustPing(e, Request{Method: http.MethodGet, Path: "/ping", Header: hdr("X-Client-Key", victim.String())}) {
				e.Run(victimPing(victim))
			}
		},
	},
	{
		ID: "ATK-38", Name: "lock-out through /v1/check on a seed policy",
		Desc:  `POST /v1/check {"policy":"ping"} with another client's address (bare and "peer:"), cost 3, and {"policy":"check"} -> 403 problem; then GET /ping from that address -> 200 count 1`,
		Needs: NeedLoopback,
		Steps: func(e *Env) []Step {
			victim := e.PeerIP()
			return []Step{
				{Req: v1(victim.String(), "ping", 3), Want: 403},
				{Req: v1("peer:"+victim.String(), "ping", 3), Want: 403},
				{Req: v1(e.UserID(), "check", 1), Want: 403},
				victimPing(victim),
			}
		},
	},
	{
		ID: "ATK-39", Name: "decision APIs on the public listener",
		Desc:  "against --strict-target: POST /v1/check, POST /json, GET /metrics, GET /admin/offenders -> 404 problem; /healthz 200; on --strict-internal-target /v1/check, /json and /metrics -> 200",
		Needs: NeedStrictTarget,
		Steps: func(e *Env) []Step {
			admin := hdr("X-Admin-Key", e.Token("guess-"))
			json := Request{Method: http.MethodPost, Path: "/json", Header: hdr("Content-Type", "application/json"),
				Body: []byte(`{"domain":"atk","descriptors":[{"entries":[{"key":"k","value":"` + e.Token("v-") + `"}]}],"hits_addend":1000}`), To: Strict}
			check := v1(e.Token("k-"), e.cfg.V1Policy, 1)
			check.To = Strict
			steps := []Step{
				{Req: check, Want: 404},
				{Req: json, Want: 404},
				{Req: Request{Method: http.MethodGet, Path: "/metrics", To: Strict}, Want: 404},
				{Req: Request{Method: http.MethodGet, Path: "/admin/offenders", Header: admin, To: Strict}, Want: 404},
				{Req: Request{Method: http.MethodGet, Path: "/healthz", To: Strict}, Want: 200},
			}
			if e.cfg.StrictInternal == "" {
				e.Note("no --strict-internal-target: the decision APIs' new place is not checked")
				return steps
			}
			check.To, json.To = StrictInternal, StrictInternal
			return append(steps,
				Step{Req: check, Want: 200},
				Step{Req: json, Want: 200},
				Step{Req: Request{Method: http.MethodGet, Path: "/metrics", To: StrictInternal}, Want: 200},
			)
		},
	},
	{
		ID: "ATK-40", Name: "IPv6 clients behind a proxy grouped by /64",
		Desc:  "from --trusted-proxy: GET /ping with X-Forwarded-For a new address of one /64 each time -> keyed P::/64, one budget, then 429; /status?key=<another address of it> -> that count; another /64 and ::ffff:203.0.x.y (keyed 203.0.x.y) start afresh",
		Needs: NeedTrustedProxy,
		Then: func(e *Env) {
			prefix := e.IPv6Net()
			for i := int64(1); i <= maxExhaust+1; i++ {
				r := e.Do(forwarded(e, fmt.Sprintf("%s::%x", prefix, i)))
				what := fmt.Sprintf("GET /ping via the proxy, X-Forwarded-For %s::%x", prefix, i)
				if r.Status == http.StatusTooManyRequests {
					if assert.Greater(e.T, i, int64(1), "%s: the first address of a fresh /64 was refused", what) {
						assertDenied(e, r, what)
					}
					break
				}
				if !assert.Equal(e.T, 200, r.Status, "%s: status (body %s)", what, shorten(string(r.Body), 120)) {
					return
				}
				if !e.Member(r, "key", prefix+"::/64", what) || !assert.Equal(e.T, i, e.Number(r, "count", what), "%s: count (one budget for the /64)", what) {
					return
				}
				if i == 2 {
					e.Run(Step{Req: Request{Method: http.MethodGet, Path: "/status?key=" + url.QueryEscape(prefix+"::ffff")}, Want: 200, Check: func(e *Env, r *Response) {
						assert.Equal(e.T, int64(2), e.Number(r, "count", "GET /status"), "GET /status?key=%s::ffff: the count of its /64", prefix)
					}})
				}
				if i == maxExhaust+1 {
					assert.Fail(e.T, fmt.Sprintf("GET /ping via the proxy: no 429 after %d addresses of one /64", i))
				}
			}
			other, v4 := e.IPv6Net(), e.ForgedIP()
			for _, c := range []struct{ xff, key string }{{other + "::1", other + "::/64"}, {"::ffff:" + v4, v4}} {
				e.Run(Step{Req: forwarded(e, c.xff), Want: 200, Check: func(e *Env, r *Response) {
					e.Member(r, "key", c.key, "GET /ping via the proxy, X-Forwarded-For "+c.xff)
					assert.Equal(e.T, int64(1), e.Number(r, "count", "GET /ping"), "GET /ping via the proxy, X-Forwarded-For %s: a fresh budget", c.xff)
				}})
			}
		},
	},
	{
		ID: "ATK-41", Name: "X-Forwarded-For entries with ports or malformed",
		Desc:  "from --trusted-proxy: X-Forwarded-For 203.0.x.y:5555 and [2001:db8:…]:443 -> keyed by the address (IPv6 its /64), each its own budget; a malformed last entry (unknown, _hidden, a bad port) -> 400 problem, and the proxy's own count unchanged",
		Needs: NeedTrustedProxy,
		Steps: func(e *Env) []Step {
			v4, v6 := e.ForgedIP(), e.IPv6Net()
			proxy := e.cfg.TrustedProxy.String()
			var before int64
			steps := []Step{
				{Req: Request{Method: http.MethodGet, Path: "/status?key=" + proxy}, Want: 200, Check: func(e *Env, r *Response) {
					before = e.Number(r, "count", "GET /status of the proxy")
				}},
			}
			for _, c := range []struct{ xff, key string }{
				{v4 + ":5555", v4}, {"198.51.100.1, " + v4 + ":6666", v4}, {"[" + v6 + "::1]:443", v6 + "::/64"},
			} {
				steps = append(steps, Step{Req: forwarded(e, c.xff), Want: 200, Check: func(e *Env, r *Response) {
					e.Member(r, "key", c.key, "GET /ping via the proxy, X-Forwarded-For "+c.xff)
				}})
			}
			for _, bad := range []string{"unknown", v4 + ", _hidden", v4 + ":99999"} {
				steps = append(steps, Step{Req: forwarded(e, bad), Want: 400})
			}
			return append(steps, Step{Req: Request{Method: http.MethodGet, Path: "/status?key=" + proxy}, Want: 200, Check: func(e *Env, r *Response) {
				assert.Equal(e.T, before, e.Number(r, "count", "GET /status of the proxy"), "the proxy's own count after malformed forwarded entries")
			}}, Step{Req: Request{Method: http.MethodGet, Path: "/status?key=" + v4}, Want: 200, Check: func(e *Env, r *Response) {
				assert.Equal(e.T, int64(2), e.Number(r, "count", "GET /status"), "GET /status?key=%s: the two requests forwarded with its ports", v4)
			}})
		},
	},
	{
		ID: "ATK-42", Name: "admin locked out by others' wrong keys",
		Desc:  fmt.Sprintf("from one other loopback address, %d wrong X-Admin-Key on DELETE /rate/reset/{id} -> 403 or 429 with Retry-After (at least one 429), count unchanged; then the right key from that address -> 200, deleted 1", adminGuesses),
		Needs: NeedAdminKey | NeedLoopback,
		Then: func(e *Env) {
			shared, uid, ep := e.PeerIP(), e.UserID(), e.Token("e-")
			if r := e.Run(okCheck(uid, ep, 1)); r.Status != http.StatusOK {
				return
			}
			throttled := 0
			for i := range adminGuesses {
				req := Request{Method: http.MethodDelete, Path: "/rate/reset/" + uid, Header: hdr("X-Admin-Key", e.Token("wrong-")), From: shared}
				what := fmt.Sprintf("%s, wrong key #%d", req, i+1)
				r := e.Do(req)
				switch {
				case r.Status == http.StatusForbidden: // also after a 429, when a new minute began
					AssertProblem(e.T, r, what)
				case r.Status == http.StatusTooManyRequests:
					assertDenied(e, r, what)
					throttled++
				default:
					assert.Fail(e.T, fmt.Sprintf("%s: status 403 or 429, got %d (body %s, error %v)", what, r.Status, shorten(string(r.Body), 120), r.Err))
					return
				}
			}
			assert.Positive(e.T, throttled, "%d wrong admin keys from %s: none throttled", adminGuesses, shared)
			e.Run(countIs(uid, ep, 1))
			e.Run(Step{Req: Request{Method: http.MethodDelete, Path: "/rate/reset/" + uid, Header: hdr("X-Admin-Key", e.AdminKey()), From: shared}, Want: 200,
				Check: func(e *Env, r *Response) {
					assert.Equal(e.T, int64(1), e.Number(r, "deleted", "reset with the right key"), "reset with the right key from %s: deleted", shared)
				}})
			e.Run(countIs(uid, ep, 0))
		},
	},
	{
		ID: "ATK-43", Name: "admin reset on the public listener",
		Desc:  "against --strict-target: DELETE /rate/reset/{id} with the admin key -> 404 problem (every admin route is on the internal listener); on --strict-internal-target -> 200",
		Needs: NeedStrictTarget,
		Steps: func(e *Env) []Step {
			reset := Request{Method: http.MethodDelete, Path: "/rate/reset/" + e.UserID(), Header: hdr("X-Admin-Key", e.AdminKey()), To: Strict}
			steps := []Step{{Req: reset, Want: 404}}
			if e.cfg.StrictInternal == "" {
				e.Note("no --strict-internal-target: the admin reset's new place is not checked")
				return steps
			}
			reset.To = StrictInternal
			return append(steps, Step{Req: reset, Want: e.AdminWant(200)})
		},
	},
	{
		ID: "ATK-44", Name: "idle connections from four addresses",
		Desc:  "against --strict-target: four addresses each open up to 128 keep-alive connections (one GET /healthz each, then idle) and hold them; then a fifth address's GET /healthz -> 200 and GET /ping -> 200 count 1",
		Needs: NeedStrictTarget | NeedLoopback,
		Then: func(e *Env) {
			var froms []netip.Addr
			for len(froms) < 5 {
				if a := e.PeerIP(); !slices.Contains(froms, a) {
					froms = append(froms, a)
				}
			}
			if held, turned := holdIdle(e, froms[:4], idleConnsPerAddr); turned == 0 {
				e.Note("all %d idle connections were held: the target's connection bounds were not reached (start it with a small descriptor limit, e.g. ulimit -n 1024)", held)
			}
			e.Run(Step{Req: Request{Method: http.MethodGet, Path: "/healthz", To: Strict, From: froms[4]}, Want: 200})
			ping := victimPing(froms[4])
			ping.Req.To = Strict
			e.Run(ping)
		},
	},
	{
		ID: "ATK-45", Name: "forward-auth: ; segment parameters",
		Desc: fmt.Sprintf("against --strict-internal-target's gateway rule for %s (key header:%s, %d an hour): GET /v1/forward-auth for %sitems until refused, then for %s;x/items and %s;jsessionid=1/items;y (a servlet upstream serves them as %sitems) -> 429 problem",
			gwPrefix, gwKeyHeader, gwLimit, gwPrefix, strings.TrimSuffix(gwPrefix, "/"), strings.TrimSuffix(gwPrefix, "/"), gwPrefix),
		Needs: NeedStrictTarget,
		Then: func(e *Env) {
			base := strings.TrimSuffix(gwPrefix, "/")
			gatewaySpellings(e, "", gwPrefix+"items", []string{base + ";x/items", base + ";jsessionid=1/items;y"}, nil)
		},
	},
	{
		ID: "ATK-46", Name: "forward-auth: other spellings of a path",
		Desc:  fmt.Sprintf("against --strict-internal-target's gateway rule for %s: GET /v1/forward-auth for %sitems until refused, then for the same path upper-cased, with a backslash (raw or %%5C), %%-escaped, with // and dot segments, and as an absolute-form http:// URI -> 429 problem", gwPrefix, gwPrefix),
		Needs: NeedStrictTarget,
		Then: func(e *Env) {
			base := strings.TrimSuffix(gwPrefix, "/")
			gatewaySpellings(e, "", gwPrefix+"items", []string{
				strings.ToUpper(base) + "/items", base + `\items`, base + "%5Citems", "/%" + fmt.Sprintf("%02X", base[1]) + base[2:] + "/items",
				"/" + gwPrefix + "/items", "/x/.." + gwPrefix + "items", "http://" + gwHost + gwPrefix + "items",
			}, nil)
		},
	},
	{
		ID: "ATK-47", Name: "forward-auth: other spellings of a host",
		Desc:  fmt.Sprintf("against --strict-internal-target's gateway rule for host %s, path %s: GET /v1/forward-auth with X-Forwarded-Host %s until refused, then with %s., its upper case, a port, both, and an absolute-form URI naming it -> 429 problem", gwHost, gwHostPrefix, gwHost, gwHost),
		Needs: NeedStrictTarget,
		Then: func(e *Env) {
			gatewaySpellings(e, gwHost, gwHostPrefix+"x", []string{gwHostPrefix + "x", gwHostPrefix + "x", gwHostPrefix + "x", gwHostPrefix + "x", "http://" + gwHost + "." + gwHostPrefix + "x"},
				[]string{gwHost + ".", strings.ToUpper(gwHost), gwHost + ":8443", gwHost + ".:8443", "other.test"})
		},
	},
}

// The gateway rules ATK-45..47 need on the strict target's
// /v1/forward-auth (scripts/atk.sh configures them): requests whose path
// starts with gwPrefix, and requests for host gwHost whose path starts with
// gwHostPrefix, each limited to gwLimit per hour per value of header
// gwKeyHeader.
const (
	gwPrefix     = "/atk-gw/"
	gwHost       = "atk.test"
	gwHostPrefix = "/atk-host/"
	gwKeyHeader  = "X-Atk-Gw"
	gwLimit      = 3
)

// forwardAuth is GET /v1/forward-auth on the strict internal target about
// a request for uri (and host, when not empty), keyed by key.
func forwardAuth(uri, host, key string) Request {
	return Request{Method: http.MethodGet, Path: "/v1/forward-auth", To: StrictInternal,
		Header: hdr("X-Forwarded-Method", "GET", "X-Forwarded-Uri", uri, "X-Forwarded-Host", host, gwKeyHeader, key)}
}

// gatewaySpellings asks forward-auth about uri (for host) with a fresh key
// until the rule refuses it, then about each of others (with hosts[i] when
// hosts is not nil), which must be refused as the same request: 429.
// Without --strict-internal-target, or when no rule matches uri (a target
// not configured as scripts/atk.sh does), it notes why and checks nothing.
func gatewaySpellings(e *Env, host, uri string, others, hosts []string) {
	if e.cfg.StrictInternal == "" {
		e.Note("no --strict-internal-target: /v1/forward-auth is not checked")
		return
	}
	key := e.Token("gw-")
	for i := 1; i <= gwLimit+1; i++ {
		r := e.Do(forwardAuth(uri, host, key))
		what := fmt.Sprintf("GET /v1/forward-auth for %s%s #%d", host, uri, i)
		if r.Status == http.StatusTooManyRequests && i > 1 {
			AssertProblem(e.T, r, what)
			break
		}
		if !assert.Equal(e.T, 200, r.Status, "%s: status (body %s)", what, shorten(string(r.Body), 120)) {
			return
		}
		if o := e.Object(r, what); o["allowed"] == true && o["rule"] == nil {
			e.Note("the strict internal target has no gateway rule for %s%s (see scripts/atk.sh): not checked", host, uri)
			return
		}
		if i == gwLimit+1 {
			assert.Fail(e.T, fmt.Sprintf("%s: not refused after the limit of %d", what, gwLimit))
			return
		}
	}
	for i, other := range others {
		h := host
		if hosts != nil {
			h = hosts[i]
		}
		e.Run(Step{Req: forwardAuth(other, h, key), Want: http.StatusTooManyRequests})
	}
}

// hdr builds a header from name, value pairs; an empty value leaves the
// name out.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			h.Set(kv[i], kv[i+1])
		}
	}
	return h
}

// checkBody is POST /rate/check as user uid ("" sends no X-User-Id).
func checkBody(uid string, body []byte) Request {
	return Request{Method: http.MethodPost, Path: "/rate/check", Header: hdr("X-User-Id", uid, "Content-Type", "application/json"), Body: body}
}

func check(uid, endpoint string) Request {
	b, _ := json.Marshal(map[string]string{"endpoint": endpoint}) // a map of strings always marshals
	return checkBody(uid, b)
}

func statusQuery(uid, query string) Request {
	return Request{Method: http.MethodGet, Path: "/rate/status" + query, Header: hdr("X-User-Id", uid)}
}

func status(uid, endpoint string) Request {
	return statusQuery(uid, "?endpoint="+url.QueryEscape(endpoint))
}

// reset is DELETE /rate/reset/{path}; key "" sends no X-Admin-Key.
func reset(path, key string) Request {
	return Request{Method: http.MethodDelete, Path: "/rate/reset/" + path, Header: hdr("X-Admin-Key", key)}
}

func v1(key, policy string, cost int64) Request {
	b, _ := json.Marshal(map[string]any{"policy": policy, "key": key, "cost": cost}) // strings and an int always marshal
	return Request{Method: http.MethodPost, Path: "/v1/check", Header: hdr("Content-Type", "application/json"), Body: b}
}

// forwarded is GET /ping from the run's trusted proxy, forwarding xff.
func forwarded(e *Env, xff string) Request {
	return Request{Method: http.MethodGet, Path: "/ping", Header: hdr("X-Forwarded-For", xff), From: e.cfg.TrustedProxy}
}

// okCheck is an allowed check whose answer names the user and endpoint
// and counts n.
func okCheck(uid, endpoint string, n int64) Step {
	return Step{Req: check(uid, endpoint), Want: 200, Check: func(e *Env, r *Response) {
		e.Member(r, "result", "ok", "POST /rate/check")
		e.Member(r, "user_id", uid, "POST /rate/check")
		e.Member(r, "endpoint", endpoint, "POST /rate/check")
		assert.Equal(e.T, n, e.Number(r, "count", "POST /rate/check"), "POST /rate/check %q: count", shorten(endpoint, 40))
	}}
}

// countIs reads /rate/status for (uid, endpoint) and expects count n.
func countIs(uid, endpoint string, n int64) Step {
	return Step{Req: status(uid, endpoint), Want: 200, Check: func(e *Env, r *Response) {
		e.Member(r, "endpoint", endpoint, "GET /rate/status")
		assert.Equal(e.T, n, e.Number(r, "count", "GET /rate/status"), "GET /rate/status %q: count", shorten(endpoint, 40))
	}}
}

// keyCountIs reads /status?key= and expects count n.
func keyCountIs(key string, n int64) Step {
	return Step{Req: Request{Method: http.MethodGet, Path: "/status?key=" + url.QueryEscape(key)}, Want: 200, Check: func(e *Env, r *Response) {
		e.Member(r, "key", key, "GET /status")
		assert.Equal(e.T, n, e.Number(r, "count", "GET /status"), "GET /status?key=%q: count", key)
	}}
}

// badUserIDs sends each id as X-User-Id to /rate/check and /rate/status.
func badUserIDs(ids ...string) func(e *Env) []Step {
	return func(e *Env) []Step {
		var steps []Step
		for _, id := range ids {
			steps = append(steps, Step{Req: check(id, "e"), Want: 400}, Step{Req: status(id, "e"), Want: 400})
		}
		return steps
	}
}

// refusedReset records one event for uid, sends DELETE /rate/reset/{uid}
// with each header set, each of which must be refused with 403, and checks
// that the event is still counted.
func refusedReset(e *Env, uid string, headers ...http.Header) []Step {
	ep := e.Token("e-")
	steps := []Step{okCheck(uid, ep, 1)}
	for _, h := range headers {
		steps = append(steps,
			Step{Req: Request{Method: http.MethodDelete, Path: "/rate/reset/" + uid, Header: h}, Want: 403},
			Step{Req: Request{Method: http.MethodDelete, Path: "/rate/reset/" + uid + "?endpoint=" + url.QueryEscape(ep), Header: h}, Want: 403})
	}
	return append(steps, countIs(uid, ep, 1))
}

// nearMisses returns keys that differ from key a little: the last
// character changed, the last one dropped, one appended, " x" appended,
// the case swapped (when that changes it) and the empty key. A trailing
// space alone is not among them: HTTP strips it from header values
// (RFC 9110 section 5.5), so the service never sees it.
func nearMisses(key string) []string {
	last := key[len(key)-1]
	changed := byte('a')
	if last == 'a' {
		changed = 'b'
	}
	out := []string{key[:len(key)-1] + string(changed), key[:len(key)-1], key + "0", key + " x", ""}
	if swapped := strings.Map(swapCase, key); swapped != key {
		out = append(out, swapped)
	}
	return out
}

func swapCase(r rune) rune {
	if unicode.IsUpper(r) {
		return unicode.ToLower(r)
	}
	return unicode.ToUpper(r)
}

// forgedPing exhausts /ping's budget for the runner's own address while
// every request carries a new forged address in the named headers: the 200
// answers must count down one budget, then 429 must come and stay.
func forgedPing(headers ...string) func(e *Env) {
	return func(e *Env) {
		lastRemaining, denied := int64(-1), 0
		for i := 0; i < maxExhaust+2 && denied < 2; i++ {
			ip, h := e.ForgedIP(), http.Header{}
			for _, name := range headers {
				v := ip
				if name == "Forwarded" {
					v = "for=" + ip
				}
				h.Set(name, v)
			}
			what := fmt.Sprintf("GET /ping #%d with forged %s %s", i+1, strings.Join(headers, "/"), ip)
			r := e.Do(Request{Method: http.MethodGet, Path: "/ping", Header: h})
			switch r.Status {
			case http.StatusOK:
				if !assert.Zero(e.T, denied, "%s: 200 after a 429, the forged address got a fresh budget", what) {
					return
				}
				assert.NotContains(e.T, Text(e.Object(r, what)["key"]), ip, "%s: counter key", what)
				remaining := e.Number(r, "remaining", what)
				if lastRemaining >= 0 && !assert.Equal(e.T, lastRemaining-1, remaining, "%s: remaining falls by one (one budget for the peer)", what) {
					return
				}
				lastRemaining = remaining
			case http.StatusTooManyRequests:
				assertDenied(e, r, what)
				denied++
			default:
				assert.Fail(e.T, fmt.Sprintf("%s: status 200 or 429, got %d (body %s, error %v)", what, r.Status, shorten(string(r.Body), 120), r.Err))
				return
			}
		}
		assert.Equal(e.T, 2, denied, "GET /ping with forged %s: refusals among %d requests", strings.Join(headers, "/"), maxExhaust+2)
	}
}

// exhaustPing sends req (a GET /ping) until it is refused, at most
// maxExhaust+1 times, and reports whether it was.
func exhaustPing(e *Env, req Request) bool {
	for i := 1; i <= maxExhaust+1; i++ {
		r := e.Do(req)
		switch r.Status {
		case http.StatusTooManyRequests:
			return true
		case http.StatusOK:
		default:
			assert.Fail(e.T, fmt.Sprintf("%s #%d: status 200 or 429, got %d (body %s, error %v)", req, i, r.Status, shorten(string(r.Body), 120), r.Err))
			return false
		}
	}
	assert.Fail(e.T, fmt.Sprintf("%s: no 429 after %d requests", req, maxExhaust+1))
	return false
}

// victimPing is GET /ping from victim, which has sent nothing before: 200,
// keyed by its address, count 1.
func victimPing(victim netip.Addr) Step {
	return Step{Req: Request{Method: http.MethodGet, Path: "/ping", From: victim}, Want: 200, Check: func(e *Env, r *Response) {
		e.Member(r, "key", victim.String(), "GET /ping from "+victim.String())
		assert.Equal(e.T, int64(1), e.Number(r, "count", "GET /ping from "+victim.String()), "GET /ping from %s, its first request: count", victim)
	}}
}

// assertDenied checks a 429: a problem whose type ends in
// rate-limit-exceeded, title Too Many Requests, and Retry-After in whole
// seconds, at least 1.
func assertDenied(e *Env, r *Response, what string) {
	if !assert.Equal(e.T, http.StatusTooManyRequests, r.Status, "%s: status", what) {
		return
	}
	if AssertProblem(e.T, r, what) {
		p := e.Object(r, what)
		assert.True(e.T, strings.HasSuffix(Text(p["type"]), "rate-limit-exceeded"), "%s: problem type %q ends in rate-limit-exceeded", what, Text(p["type"]))
		assert.Equal(e.T, "Too Many Requests", Text(p["title"]), "%s: problem title", what)
	}
	ra := r.Header.Get("Retry-After")
	secs, err := strconv.ParseUint(ra, 10, 31)
	assert.NoError(e.T, err, "%s: Retry-After %q in whole seconds", what, ra)
	assert.GreaterOrEqual(e.T, secs, uint64(1), "%s: Retry-After", what)
}

func assertRateLimitHeaders(e *Env, r *Response, what string) {
	for _, name := range []string{"RateLimit", "RateLimit-Policy"} {
		assert.NotEmpty(e.T, r.Header.Get(name), "%s: %s header", what, name)
	}
}

// holdIdle opens n keep-alive connections to the strict target from each
// of froms, at once across addresses: each asks GET /healthz once and is
// kept open, idle, until the case ends. It returns how many are still held
// and how many the target turned away (not answered, or closed since).
func holdIdle(e *Env, froms []netip.Addr, n int) (held, turned int) {
	u, err := url.Parse(e.cfg.Strict)
	if err != nil {
		e.T.Errorf("--strict-target %q: %v", e.cfg.Strict, err)
		return 0, 0
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, from := range froms {
		wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: e.cfg.Client.Timeout}
			for range n {
				c, err := d.DialContext(e.ctx, "tcp", u.Host)
				ok := err == nil && askOnce(c, u.Host, e.cfg.Client.Timeout)
				mu.Lock()
				if ok {
					held++
					e.held = append(e.held, c)
				} else {
					turned++
					if c != nil {
						c.Close()
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// A target may also have closed connections it answered, to make room
	// for later ones: those are turned away too.
	for _, c := range e.held {
		if closedByPeer(c) {
			held--
			turned++
		}
	}
	return held, turned
}

// closedByPeer reports whether the other end has closed c: a read finds the
// end of the stream (or a reset) at once, where a live idle connection
// would wait.
func closedByPeer(c net.Conn) bool {
	if c.SetReadDeadline(time.Now().Add(time.Millisecond)) != nil {
		return true
	}
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// askOnce sends GET /healthz on c and reports whether a 200 came back
// within timeout; c stays open either way.
func askOnce(c net.Conn, host string, timeout time.Duration) bool {
	if c.SetDeadline(time.Now().Add(timeout)) != nil {
		return false
	}
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
