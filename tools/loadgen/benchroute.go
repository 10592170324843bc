package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// envoyDescriptorKey is the descriptor key of bench's POST /json requests;
// the Envoy-format config must have a rule on it (configs/envoy-bench/bench.yaml).
const envoyDescriptorKey = "client"

// benchRoute is a request shape bench sends over --keys keys: where the key
// goes (a header or the body) and what the body looks like. The same shape
// drives vegeta (targeter) and wrk (Lua script).
type benchRoute struct {
	Name   string
	Method string
	Path   string
	// KeyHeader is the header carrying the key, or "" when it is in the body.
	KeyHeader string
	// NumericKeys: the keys are 1..n (user ids) instead of PREFIX-i; the
	// run's prefix is then in the body, so each run still has fresh keys.
	NumericKeys bool
	// Body is the request body with {policy}, {prefix} and {key} replaced;
	// "" for none.
	Body string
	// ProbeWant, when set, is text the probe's answer must hold besides the
	// 200: a peer that answers 200 with the error inside the body (say,
	// gubernator on a malformed request) has not made a decision.
	ProbeWant string
}

// benchRoutes are the routes bench can drive.
var benchRoutes = []benchRoute{
	{Name: "check", Method: http.MethodPost, Path: checkPath, Body: `{"policy":"{policy}","key":"{key}","cost":1}`},
	{Name: "ping", Method: http.MethodGet, Path: "/ping", KeyHeader: "X-Client-Key"},
	{Name: "rate-check", Method: http.MethodPost, Path: "/rate/check", KeyHeader: "X-User-Id", NumericKeys: true,
		Body: `{"endpoint":"/{prefix}"}`},
	{Name: "json", Method: http.MethodPost, Path: "/json",
		Body: `{"domain":"{policy}","descriptors":[{"entries":[{"key":"` + envoyDescriptorKey + `","value":"{key}"}]}]}`},
	// gubernator's HTTP gateway (gubernator.proto's GetRateLimitsReq, field
	// names as in the proto): one request per call, the policy as its name,
	// the key as its unique_key. gubernator takes the limit with every
	// request, so the body carries configs/bench.yaml's bench policy: a limit
	// no run reaches, a 1 s window (duration is in milliseconds), and the
	// default algorithm, TOKEN_BUCKET, which refills at once when the
	// duration ends, as a fixed window does. A missing name or key is an
	// "error" inside a 200 answer (its status still UNDER_LIMIT, the enum's
	// zero), hence ProbeWant: the gateway writes every field, an empty
	// error included.
	{Name: "gubernator", Method: http.MethodPost, Path: "/v1/GetRateLimits",
		Body:      `{"requests":[{"name":"{policy}","unique_key":"{key}","hits":1,"limit":2000000000,"duration":1000}]}`,
		ProbeWant: `"error":""`},
}

// grpcRoute is --route grpc: the json route's request over Envoy's gRPC
// API, which runGRPC sends (--generator grpc only); no HTTP request has
// this shape.
var grpcRoute = benchRoute{Name: "grpc", Method: "gRPC", Path: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}

// routeNames lists the names of benchRoutes.
func routeNames() string {
	names := make([]string, len(benchRoutes))
	for i, r := range benchRoutes {
		names[i] = r.Name
	}
	return strings.Join(append(names, grpcRoute.Name), ", ")
}

// lookupRoute returns the route called name.
func lookupRoute(name string) (benchRoute, bool) {
	if name == grpcRoute.Name {
		return grpcRoute, true
	}
	i := slices.IndexFunc(benchRoutes, func(r benchRoute) bool { return r.Name == name })
	if i < 0 {
		return benchRoute{}, false
	}
	return benchRoutes[i], true
}

// bodyParts returns the body before and after the key, with policy and
// prefix filled in (policy, prefix and keys are plain ASCII: no escaping).
func (r benchRoute) bodyParts(policy, prefix string) (before, after string) {
	b := strings.NewReplacer("{policy}", policy, "{prefix}", prefix).Replace(r.Body)
	before, after, _ = strings.Cut(b, "{key}")
	return before, after
}

// hasKeyInBody says whether the body carries the key.
func (r benchRoute) hasKeyInBody() bool { return strings.Contains(r.Body, "{key}") }

// key returns the i-th key (0-based) of a run.
func (r benchRoute) key(prefix string, i uint64) string {
	if r.NumericKeys {
		return strconv.FormatUint(i+1, 10)
	}
	return prefix + "-" + strconv.FormatUint(i, 10)
}

// target returns the request for key.
func (r benchRoute) target(base, policy, prefix, key string) vegeta.Target {
	t := vegeta.Target{Method: r.Method, URL: base + r.Path, Header: http.Header{}}
	if r.Body != "" {
		before, after := r.bodyParts(policy, prefix)
		if r.hasKeyInBody() {
			t.Body = []byte(before + key + after)
		} else {
			t.Body = []byte(before)
		}
		t.Header.Set("Content-Type", "application/json")
	}
	if r.KeyHeader != "" {
		t.Header.Set(r.KeyHeader, key)
	}
	return t
}

// targeter cycles through n keys of the run named prefix. It is safe for
// concurrent use.
func (r benchRoute) targeter(base, policy, prefix string, n int) vegeta.Targeter {
	var next atomic.Uint64
	return func(t *vegeta.Target) error {
		if t == nil {
			return vegeta.ErrNilTarget
		}
		i := (next.Add(1) - 1) % uint64(n)
		*t = r.target(base, policy, prefix, r.key(prefix, i))
		return nil
	}
}

// probe sends one request of the route and wants 200.
func (r benchRoute) probe(ctx context.Context, c *http.Client, base, policy, prefix string) error {
	t := r.target(base, policy, prefix, r.key(prefix, 0))
	req, err := http.NewRequestWithContext(ctx, t.Method, t.URL, bytes.NewReader(t.Body))
	if err != nil {
		return fmt.Errorf("loadgen: probe %s: %w", r.Path, err)
	}
	req.Header = t.Header
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("loadgen: probe %s: %w", r.Path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<12))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("loadgen: probe %s %s: %s on a fresh key (does the config have %q?): %s",
			r.Method, r.Path, resp.Status, policy, bytes.TrimSpace(body))
	}
	if !bytes.Contains(body, []byte(r.ProbeWant)) {
		return fmt.Errorf("loadgen: probe %s %s: the answer lacks %s: %s", r.Method, r.Path, r.ProbeWant, bytes.TrimSpace(body))
	}
	return nil
}

// luaString quotes s as a Lua string literal; s is printable ASCII.
func luaString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// wrkScript returns a wrk Lua script that sends the route's requests over
// n random keys of the run named prefix and, when wrk is done, prints one
// line: "loadgen-wrk" then requests, duration (µs), socket errors (connect,
// read, write, timeout), non-2xx/3xx answers, and the p50, p90, p99 and max
// latencies (µs).
func (r benchRoute) wrkScript(policy, prefix string, n int) string {
	var b strings.Builder
	before, after := r.bodyParts(policy, prefix)
	fmt.Fprintf(&b, "local n, prefix, method, path = %d, %s, %s, %s\n", n, luaString(prefix), luaString(r.Method), luaString(r.Path))
	fmt.Fprintf(&b, "local before, after = %s, %s\n", luaString(before), luaString(after))
	b.WriteString("local headers = {}\n")
	if r.Body != "" {
		b.WriteString("headers[\"Content-Type\"] = \"application/json\"\n")
	}
	b.WriteString("function init(args) math.randomseed(os.time()) end\n")
	b.WriteString("function request()\n")
	if r.NumericKeys {
		b.WriteString("  local key = tostring(math.random(n))\n")
	} else {
		b.WriteString("  local key = prefix .. \"-\" .. (math.random(n) - 1)\n")
	}
	if r.KeyHeader != "" {
		fmt.Fprintf(&b, "  headers[%s] = key\n", luaString(r.KeyHeader))
	}
	switch {
	case r.Body == "":
		b.WriteString("  return wrk.format(method, path, headers, nil)\n")
	case r.hasKeyInBody():
		b.WriteString("  return wrk.format(method, path, headers, before .. key .. after)\n")
	default:
		b.WriteString("  return wrk.format(method, path, headers, before)\n")
	}
	b.WriteString("end\n")
	b.WriteString(`function done(s, lat, req)
  local e = s.errors
  io.write(string.format("loadgen-wrk %d %d %d %d %d %d %d %d %d %d %d\n", s.requests, s.duration,
    e.connect, e.read, e.write, e.timeout, e.status,
    lat:percentile(50), lat:percentile(90), lat:percentile(99), lat.max))
end
`)
	return b.String()
}
