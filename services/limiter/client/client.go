// Package client calls a Tollgate rate-limit service from another Go
// program: [Client.Check] asks for a decision over HTTP (POST /v1/check),
// [Envoy.ShouldRateLimit] over gRPC with Envoy's rate-limit API.
//
// # When the service cannot decide
//
// Every call returns a decision and an error. A refusal by the limit is a
// decision (Allowed false) with a nil error. When the service cannot decide
// — it is down or unreachable, too slow for the call's timeout, or answers a
// 5xx (503 when its store fails) — the error wraps [ErrUnavailable] and the
// decision is the client's failure mode: refused under [FailClosed] (the
// default), allowed under [FailOpen]; Decision.Unavailable is true either
// way. A request the service refuses as malformed (a 4xx problem such as an
// unknown policy) returns a *[Problem] error and is never allowed, whatever
// the failure mode: it is a bug to fix, not an outage to ride out. A 429 is
// a refusal whatever its body (a proxy's or a firewall's too: then only
// RetryAfter, from its Retry-After header, is known). A 200 that is not a
// Tollgate decision, a redirect (never followed) and an answer body over
// 64 KiB (closed, not read on) count as the service not deciding. So
//
//	d, err := c.Check(ctx, "api", userID, 1)
//	if err != nil {
//		log.Printf("rate limit: %v", err) // and d.Allowed is the failure mode
//	}
//	if !d.Allowed {
//		// answer 429, retry after d.RetryAfter
//	}
//
// The zero value of neither type is usable; build them with [New] and
// [NewEnvoy]. Both are safe for concurrent use and reuse their connections:
// make one per service and share it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// FailureMode is what a call decides when the service cannot.
type FailureMode int

const (
	// FailClosed refuses: Decision.Allowed is false. The default.
	FailClosed FailureMode = iota
	// FailOpen allows: Decision.Allowed is true. Pick it when the limit
	// only protects capacity and refusing everyone would be the worse
	// outage.
	FailOpen
)

// DefaultTimeout bounds each call unless WithTimeout says otherwise: a
// rate-limit check sits in front of a request, so a stalled service must
// cost little.
const DefaultTimeout = time.Second

// maxBody bounds the answer bodies read (the service's are a few hundred
// bytes).
const maxBody = 64 << 10

// ErrUnavailable is wrapped by the error of a call the service could not
// decide (see the package documentation).
var ErrUnavailable = errors.New("client: the rate-limit service is unavailable")

// config holds the options common to Client and Envoy.
type config struct {
	timeout    time.Duration
	mode       FailureMode
	httpClient *http.Client
	dialOpts   []grpc.DialOption
}

// Option configures New and NewEnvoy.
type Option func(*config)

// WithTimeout bounds each call (d > 0; default DefaultTimeout), on top of the
// caller's context.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithFailureMode sets what a call decides when the service cannot (default
// FailClosed).
func WithFailureMode(m FailureMode) Option { return func(c *config) { c.mode = m } }

// WithHTTPClient makes Client send its requests with a copy of hc instead
// of its own client (which keeps up to 64 idle connections to the service).
// Client still applies its timeout per call, and never follows a redirect.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

func newConfig(opts []Option) (config, error) {
	c := config{timeout: DefaultTimeout}
	for _, o := range opts {
		o(&c)
	}
	if c.timeout <= 0 {
		return c, fmt.Errorf("client: timeout %s is not positive", c.timeout)
	}
	if c.mode != FailClosed && c.mode != FailOpen {
		return c, fmt.Errorf("client: unknown failure mode %d", c.mode)
	}
	return c, nil
}

// Client calls the service's HTTP API.
type Client struct {
	endpoint string // base URL + /v1/check
	http     *http.Client
	cfg      config
}

// New returns a client of the service at baseURL ("http://127.0.0.1:8080").
func New(baseURL string, opts ...Option) (*Client, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q is not an http(s) URL", baseURL)
	}
	hc := cfg.httpClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64 // the default, 2, would redial under concurrency
		hc = &http.Client{Transport: t}
	} else {
		own := *hc
		hc = &own
	}
	// A redirect is not the service's answer: following it would send the
	// request (and its key) elsewhere.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{endpoint: strings.TrimSuffix(u.String(), "/") + "/v1/check", http: hc, cfg: cfg}, nil
}

// Close closes the idle connections of the client's own transport.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Decision is the service's answer to one check.
type Decision struct {
	// Allowed says whether the attempt may go on. When the service could
	// not decide it is the failure mode's answer.
	Allowed bool
	// Unavailable is true when the service could not decide.
	Unavailable bool
	// Limit, Remaining and Count are the policy's limit, the units that
	// could still pass now, and what the store holds for the current window.
	Limit, Remaining, Count int64
	// ResetAfter is how long until the key is back to its full limit;
	// RetryAfter, when refused, how long until the same cost could pass.
	ResetAfter, RetryAfter time.Duration
	// ShadowDenied is true when a shadow policy would have refused.
	ShadowDenied bool
}

// Problem is an RFC 9457 problem document the service answered a malformed
// request with (a 4xx other than 429), or with a 5xx (then wrapped with
// ErrUnavailable).
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
}

func (p *Problem) Error() string {
	return fmt.Sprintf("client: problem %d %s: %s (%s)", p.Status, p.Title, p.Detail, p.Type)
}

// v1Answer is the body of a 200 (allowed is true, limit present), and of a
// 429 (a problem with the same numbers but allowed).
type v1Answer struct {
	Allowed      *bool   `json:"allowed"`
	Limit        *int64  `json:"limit"`
	Remaining    int64   `json:"remaining"`
	Count        int64   `json:"count"`
	ResetAfter   float64 `json:"reset_after"`
	RetryAfter   float64 `json:"retry_after"`
	ShadowDenied bool    `json:"shadow_denied"`
}

// decision is the Decision a's numbers say, durations clamped to >= 0.
func (a v1Answer) decision(allowed bool) Decision {
	d := Decision{Allowed: allowed, Remaining: a.Remaining, Count: a.Count,
		ResetAfter: seconds(a.ResetAfter), RetryAfter: seconds(a.RetryAfter), ShadowDenied: a.ShadowDenied}
	if a.Limit != nil {
		d.Limit = *a.Limit
	}
	return d
}

// maxSeconds is the longest time.Duration in seconds.
const maxSeconds = float64(math.MaxInt64 / int64(time.Second))

// seconds converts a duration in seconds, clamped to 0 .. the longest
// Duration (a negative, NaN or huge value from a faulty answer included).
func seconds(s float64) time.Duration {
	switch {
	case !(s > 0):
		return 0
	case s >= maxSeconds:
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

// Check counts cost units (at least 1) for key under the service's policy
// and returns the decision. See the package documentation for its errors.
func (c *Client) Check(ctx context.Context, policy, key string, cost int64) (Decision, error) {
	body, err := json.Marshal(struct {
		Policy string `json:"policy"`
		Key    string `json:"key"`
		Cost   int64  `json:"cost"`
	}{policy, key, cost})
	if err != nil { // strings and an integer always marshal
		return Decision{}, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return Decision{}, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, application/problem+json")
	resp, err := c.http.Do(req)
	if err != nil {
		return c.unavailable(err)
	}
	// Closed unread past the bound, not drained: an endless (or
	// decompressing) body costs no more than maxBody.
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return c.unavailable(fmt.Errorf("reading the answer: %w", err))
	}
	var a v1Answer
	parsed := len(data) <= maxBody && json.Unmarshal(data, &a) == nil
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		// A refusal, even from a proxy in front that says no more: its
		// Retry-After then stands for the numbers.
		if !parsed || a.Limit == nil {
			return Decision{RetryAfter: retryAfterHeader(resp.Header)}, nil
		}
		return a.decision(false), nil
	case resp.StatusCode == http.StatusOK:
		if len(data) > maxBody {
			return c.unavailable(fmt.Errorf("the 200 answer is over %d bytes", maxBody))
		}
		if !parsed || a.Allowed == nil || !*a.Allowed || a.Limit == nil {
			return c.unavailable(fmt.Errorf("the 200 answer is not a Tollgate decision: %s", strconv.Quote(string(data[:min(len(data), 200)]))))
		}
		return a.decision(true), nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return Decision{}, problemOf(resp, data)
	default:
		return c.unavailable(problemOf(resp, data))
	}
}

// retryAfterHeader reads Retry-After in whole seconds; 0 when absent or not
// a number of seconds.
func retryAfterHeader(h http.Header) time.Duration {
	n, err := strconv.ParseFloat(h.Get("Retry-After"), 64)
	if err != nil {
		return 0
	}
	return seconds(n)
}

// problemOf reads a problem document, or makes one from the status when the
// body is not one (a proxy's error page).
func problemOf(resp *http.Response, data []byte) *Problem {
	var p Problem
	if json.Unmarshal(data, &p) != nil || p.Status != resp.StatusCode {
		p = Problem{Type: "about:blank", Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode,
			Detail: "the answer is not a problem document: " + strconv.Quote(string(data[:min(len(data), 200)]))}
	}
	return &p
}

// unavailable returns the failure mode's decision and cause wrapped with
// ErrUnavailable.
func (c *Client) unavailable(cause error) (Decision, error) {
	return Decision{Allowed: c.cfg.mode == FailOpen, Unavailable: true}, fmt.Errorf("%w: %w", ErrUnavailable, cause)
}
