package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
)

// Need is a set of things a case requires beyond the main target. A case
// whose needs the run cannot meet is reported SKIP with the reason.
type Need uint8

// The needs a case can declare.
const (
	// NeedAdminKey: the case uses the target's real admin key.
	NeedAdminKey Need = 1 << iota
	// NeedClosedTarget: the case talks to a service started without an
	// admin key (--closed-target).
	NeedClosedTarget
	// NeedStrictTarget: the case talks to a service that believes no
	// client-asserted identity from an untrusted peer and serves its
	// decision APIs on an internal listener only (--strict-target).
	NeedStrictTarget
	// NeedLoopback: the case connects from other loopback addresses, as
	// other clients; the target must listen on IPv4 loopback.
	NeedLoopback
	// NeedTrustedProxy: the case connects from the address the target
	// lists in its --trusted-proxies (--trusted-proxy), as a proxy that
	// forwards clients in X-Forwarded-For.
	NeedTrustedProxy
)

// Where names the service a request goes to.
type Where uint8

// The services of a run.
const (
	Main           Where = iota // --target
	Closed                      // --closed-target
	Strict                      // --strict-target
	StrictInternal              // --strict-internal-target
)

var whereNames = [...]string{"", " (closed target)", " (strict target)", " (strict internal target)"}

// Case is one row of the attack table. Steps are sent in order and each
// answer is checked against its step; Then, when set, runs afterwards with
// the same Env for follow-up requests and assertions. Every broken
// assertion is collected, so one run reports all of a case's failures.
type Case struct {
	ID    string // "ATK-01"
	Name  string // a few words
	Desc  string // one line: what is sent and what must come back
	Needs Need
	Steps func(e *Env) []Step
	Then  func(e *Env)
}

// Request is one HTTP request of a case. Path is the path and query,
// already escaped. A nil Body sends no body.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	// To is the service the request goes to; the main target by default.
	To Where
	// From, when valid, is the loopback address the request is sent from,
	// as another client (see NeedLoopback).
	From netip.Addr
}

// String names the request in failure messages; long paths are shortened.
func (r Request) String() string {
	s := r.Method + " " + shorten(r.Path, 60)
	if uid := r.Header.Values("X-User-Id"); len(uid) > 0 {
		s += fmt.Sprintf(" (X-User-Id %q)", uid[0])
	}
	if r.From.IsValid() {
		s += " from " + r.From.String()
	}
	return s + whereNames[r.To]
}

// Response is what came back: a status, headers and body, or a transport
// error (Status is then 0).
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

// Step is one request and the answer it must get. Any answer of 400 or
// more must also be an RFC 9457 problem (Content-Type
// application/problem+json, members type, title, status equal to the HTTP
// status, detail) unless RawError says the HTTP layer answers it.
type Step struct {
	Req  Request
	Want int // the expected HTTP status
	// ConnErrOK accepts a transport error (connection closed or refused)
	// as the expected rejection.
	ConnErrOK bool
	// RawError: the answer comes from the HTTP server itself (431), so its
	// shape is not checked.
	RawError bool
	// Times sends this many copies at once from as many goroutines and
	// counts exactly how many answered as expected; 0 or 1 sends one.
	Times int
	// Check runs further assertions when the status is the expected one.
	// With Times > 1 it runs concurrently and must not draw random values.
	Check func(e *Env, r *Response)
}

// Config is what a run needs. It is read-only during a run.
type Config struct {
	Target         string // base URL of the service under test, no trailing slash
	Closed         string // base URL of a service without an admin key, or ""
	Strict         string // base URL of a strict service's public listener, or ""
	StrictInternal string // base URL of the strict service's internal listener, or ""
	AdminKey       string // the target's admin key, or "" when unknown
	V1Policy       string // a policy of the target that /v1/check may charge
	Seed           uint64 // seeds the random user ids and keys
	Client         *http.Client
	// TrustedProxy is a loopback address the target trusts as a proxy, or
	// the zero Addr.
	TrustedProxy netip.Addr
}

// base returns the base URL of w.
func (c *Config) base(w Where) string {
	return [...]string{c.Target, c.Closed, c.Strict, c.StrictInternal}[w]
}

// loopback reports whether the main target listens on an IPv4 loopback
// address, so that requests can come from others.
func (c *Config) loopback() bool {
	u, err := url.Parse(c.Target)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(u.Hostname())
	return err == nil && a.Is4() && a.IsLoopback()
}

// Env is a case's view of the run: the collecting TestingT, the HTTP
// client and the case's own random source. It is used by one case at a
// time; T is safe for concurrent use.
type Env struct {
	T     *Collector
	ctx   context.Context
	cfg   *Config
	rng   *rand.Rand
	notes []string
}

// Outcome is a case's verdict.
type Outcome string

// The verdicts.
const (
	Pass Outcome = "PASS"
	Fail Outcome = "FAIL"
	Skip Outcome = "SKIP"
)

// Result is the verdict of one case, with every broken assertion
// (Failures) and remarks such as a skip reason (Notes).
type Result struct {
	ID       string        `json:"id"`
	Name     string        `json:"name"`
	Desc     string        `json:"description"`
	Outcome  Outcome       `json:"result"`
	Failures []string      `json:"failures,omitempty"`
	Notes    []string      `json:"notes,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Run plays the cases in order against cfg's targets and returns one
// result per case. Cases run one after the other so that their budgets on
// the target do not interfere; a cancelled ctx fails the remaining
// requests.
func Run(ctx context.Context, cfg *Config, cases []Case) []Result {
	results := make([]Result, 0, len(cases))
	for _, c := range cases {
		results = append(results, runCase(ctx, cfg, c))
	}
	return results
}

func runCase(ctx context.Context, cfg *Config, c Case) (res Result) {
	res = Result{ID: c.ID, Name: c.Name, Desc: c.Desc}
	if reason := unmet(cfg, c.Needs); reason != "" {
		res.Outcome, res.Notes = Skip, []string{reason}
		return res
	}
	e := newEnv(ctx, cfg, c.ID)
	start := time.Now()
	defer func() {
		// A target's answer must never crash the runner; a slip in a case's
		// own code is reported as that case's failure.
		if p := recover(); p != nil {
			e.T.Errorf("case stopped: %v", p)
		}
		res.Duration = time.Since(start)
		res.Failures, res.Notes = e.T.Messages(), e.notes
		res.Outcome = Pass
		if len(res.Failures) > 0 {
			res.Outcome = Fail
		}
	}()
	if c.Steps != nil {
		for _, s := range c.Steps(e) {
			e.Run(s)
		}
	}
	if c.Then != nil {
		c.Then(e)
	}
	return res
}

// newEnv returns the Env of case id: its random source depends only on the
// seed and the id, so a case draws the same ids with or without --only.
func newEnv(ctx context.Context, cfg *Config, id string) *Env {
	h := fnv.New64a()
	h.Write([]byte(id))
	return &Env{T: &Collector{}, ctx: ctx, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, h.Sum64()))}
}

func unmet(cfg *Config, n Need) string {
	var missing []string
	if n&NeedAdminKey != 0 && cfg.AdminKey == "" {
		missing = append(missing, "the admin key is unset (see --admin-key-env)")
	}
	if n&NeedClosedTarget != 0 && cfg.Closed == "" {
		missing = append(missing, "no --closed-target given")
	}
	if n&NeedStrictTarget != 0 && cfg.Strict == "" {
		missing = append(missing, "no --strict-target given")
	}
	if n&(NeedLoopback|NeedTrustedProxy) != 0 && !cfg.loopback() {
		missing = append(missing, "the target is not on IPv4 loopback, so the runner cannot connect as other clients")
	}
	if n&NeedTrustedProxy != 0 && !cfg.TrustedProxy.IsValid() {
		missing = append(missing, "no --trusted-proxy given")
	}
	return strings.Join(missing, "; ")
}

// Note records a remark shown with the case's result, once.
func (e *Env) Note(format string, args ...any) {
	if n := fmt.Sprintf(format, args...); !slices.Contains(e.notes, n) {
		e.notes = append(e.notes, n)
	}
}

// UserID returns a fresh random positive user id, as decimal text.
func (e *Env) UserID() string {
	return strconv.FormatInt(1_000_000_000+e.rng.Int64N(1<<52), 10)
}

// Token returns prefix followed by 12 random lowercase letters and digits.
func (e *Env) Token(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte(prefix)
	for range 12 {
		b = append(b, alphabet[e.rng.IntN(len(alphabet))])
	}
	return string(b)
}

// PeerIP returns a random loopback address other than 127.0.0.1, to connect
// from as another client.
func (e *Env) PeerIP() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(1 + e.rng.IntN(254)), byte(e.rng.IntN(256)), byte(1 + e.rng.IntN(254))})
}

// IPv6Net returns a random /64 of the IPv6 documentation range, as its
// first four groups ("2001:db8:1a2b:3c4d"); append "::/64" for its key or
// "::x" for an address in it.
func (e *Env) IPv6Net() string {
	return fmt.Sprintf("2001:db8:%x:%x", e.rng.IntN(1<<16), e.rng.IntN(1<<16))
}

// ForgedIP returns a random address of the documentation ranges, for
// forged forwarding headers.
func (e *Env) ForgedIP() string {
	return fmt.Sprintf("203.0.%d.%d", e.rng.IntN(256), 1+e.rng.IntN(254))
}

// AdminKey returns the target's admin key, or "" when the run has none.
func (e *Env) AdminKey() string { return e.cfg.AdminKey }

// AdminWant returns want when the run has the admin key. Without it the
// request goes without a key and the service must answer 403, because the
// key is checked before the path; the case notes it.
func (e *Env) AdminWant(want int) int {
	if e.cfg.AdminKey != "" {
		return want
	}
	e.Note("admin key unset: expected 403 (the key is checked before the path) instead of %d", want)
	return http.StatusForbidden
}

// Do sends req and reads the whole answer. It asserts nothing.
func (e *Env) Do(req Request) *Response {
	base := e.cfg.base(req.To)
	client := e.cfg.Client
	if req.From.IsValid() {
		client = fromClient(client, req.From)
		defer client.CloseIdleConnections()
	}
	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(req.Body)
	}
	hr, err := http.NewRequestWithContext(e.ctx, req.Method, base+req.Path, body)
	if err != nil {
		return &Response{Err: err}
	}
	for k, vs := range req.Header {
		hr.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := client.Do(hr)
	if err != nil {
		return &Response{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// fromClient returns a copy of c whose connections come from src.
func fromClient(c *http.Client, src netip.Addr) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: c.Timeout}
	cc := *c
	cc.Transport = &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	return &cc
}

// Run sends the step's request (Times copies at once when set), asserts
// its expectations and returns the (first) answer.
func (e *Env) Run(s Step) *Response {
	if s.Times <= 1 {
		r := e.Do(s.Req)
		e.expect(e.T, s, r)
		return r
	}
	type outcome struct {
		r    *Response
		msgs []string
	}
	out := make([]outcome, s.Times)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			c := &Collector{}
			r := e.Do(s.Req)
			e.expect(c, s, r)
			out[i] = outcome{r, c.Messages()}
		})
	}
	wg.Wait()
	good, first := 0, ""
	for _, o := range out {
		if len(o.msgs) == 0 {
			good++
		} else if first == "" {
			first = o.msgs[0]
		}
	}
	assert.Equal(e.T, s.Times, good, "%s x%d sent at once: answers as expected (first wrong one: %s)", s.Req, s.Times, first)
	return out[0].r
}

func (e *Env) expect(t *Collector, s Step, r *Response) {
	if r.Err != nil {
		if !s.ConnErrOK {
			assert.NoError(t, r.Err, "%s", s.Req)
		}
		return
	}
	if !assert.Equal(t, s.Want, r.Status, "%s: status (body %s)", s.Req, shorten(string(r.Body), 160)) {
		return
	}
	if s.Want >= 400 && !s.RawError {
		AssertProblem(t, r, s.Req.String())
	}
	if s.Check != nil {
		s.Check(&Env{T: t, ctx: e.ctx, cfg: e.cfg, rng: e.rng}, r)
	}
}

// AssertProblem asserts that r is an RFC 9457 problem: Content-Type
// application/problem+json and a JSON object with string members type,
// title and detail and a numeric status equal to the HTTP status.
func AssertProblem(t assert.TestingT, r *Response, what string) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	ok := assert.NoError(t, err, "%s: Content-Type %q", what, r.Header.Get("Content-Type")) &&
		assert.Equal(t, "application/problem+json", mt, "%s: Content-Type", what)
	p, jerr := decodeObject(r.Body)
	if !assert.NoError(t, jerr, "%s: problem body %s", what, shorten(string(r.Body), 120)) {
		return false
	}
	for _, m := range []string{"type", "title", "detail"} {
		_, isString := p[m].(string)
		ok = assert.True(t, isString, "%s: problem member %q is a string (got %v)", what, m, p[m]) && ok
	}
	st, isNum := Int(p["status"])
	ok = assert.True(t, isNum, "%s: problem member \"status\" is a number (got %v)", what, p["status"]) && ok
	return assert.Equal(t, int64(r.Status), st, "%s: problem status equals the HTTP status", what) && ok
}

// Object decodes the answer's JSON object; a body that is not one is a
// failed assertion and an empty map.
func (e *Env) Object(r *Response, what string) map[string]any {
	m, err := decodeObject(r.Body)
	assert.NoError(e.T, err, "%s: JSON object body %s", what, shorten(string(r.Body), 120))
	return m
}

// Number returns the integer member name of the answer's JSON object,
// asserting that it is one.
func (e *Env) Number(r *Response, name, what string) int64 {
	v, ok := Int(e.Object(r, what)[name])
	assert.True(e.T, ok, "%s: member %q is an integer (body %s)", what, name, shorten(string(r.Body), 120))
	return v
}

// Member asserts that member name of the answer's JSON object, rendered
// as text (numbers in decimal), equals want.
func (e *Env) Member(r *Response, name, want, what string) bool {
	return assert.Equal(e.T, want, Text(e.Object(r, what)[name]), "%s: member %q", what, name)
}

func decodeObject(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	m := map[string]any{}
	if err := d.Decode(&m); err != nil {
		return map[string]any{}, fmt.Errorf("atk: decode json object: %w", err)
	}
	return m, nil
}

// Int converts a decoded JSON number holding an integer.
func Int(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// Text renders a decoded JSON scalar as text: strings as they are,
// numbers in their JSON spelling, null as "null".
func Text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return "null"
	default:
		return fmt.Sprint(v)
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:n], len(s))
}

// Collector is the assert.TestingT of a case: Errorf appends a condensed
// message instead of stopping, so a case reports every broken assertion.
// It is safe for concurrent use.
type Collector struct {
	mu   sync.Mutex
	msgs []string
}

// Errorf records one failed assertion.
func (c *Collector) Errorf(format string, args ...any) {
	msg := condense(fmt.Sprintf(format, args...))
	c.mu.Lock()
	c.msgs = append(c.msgs, msg)
	c.mu.Unlock()
}

// Messages returns a copy of the recorded failures, in order.
func (c *Collector) Messages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.msgs...)
}

var (
	labelLine = regexp.MustCompile(`^\t([A-Za-z ]+):\s*\t(.*)$`)
	spaces    = regexp.MustCompile(`\s+`)
)

// condense turns testify's labelled multi-line report into one line:
// "<message>: <error>", without the trace and the diff.
func condense(s string) string {
	var label string
	parts := map[string][]string{}
	for _, line := range strings.Split(s, "\n") {
		if m := labelLine.FindStringSubmatch(line); m != nil {
			label = m[1]
			line = m[2]
		}
		if label == "" || strings.TrimSpace(line) == "" {
			continue
		}
		parts[label] = append(parts[label], strings.TrimSpace(line))
	}
	if len(parts) == 0 {
		return spaces.ReplaceAllString(strings.TrimSpace(s), " ")
	}
	errText := strings.Join(parts["Error"], " ")
	if i := strings.Index(errText, "Diff:"); i >= 0 {
		errText = errText[:i]
	}
	errText = spaces.ReplaceAllString(strings.TrimSpace(errText), " ")
	if msg := strings.Join(parts["Messages"], " "); msg != "" {
		return msg + ": " + errText
	}
	return errText
}
