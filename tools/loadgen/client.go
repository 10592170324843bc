package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// checkPath is the service's generic decision route.
const checkPath = "/v1/check"

// errTargetDown says the target did not answer GET /healthz with 200.
var errTargetDown = errors.New("target is not healthy")

// checkRequest is the body of POST /v1/check.
type checkRequest struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	Cost   int64  `json:"cost"`
}

// decision is the part of a /v1/check answer loadgen relies on. Durations
// are seconds.
type decision struct {
	Allowed    bool    `json:"allowed"`
	Limit      int64   `json:"limit"`
	Remaining  int64   `json:"remaining"`
	ResetAfter float64 `json:"reset_after"`
	RetryAfter float64 `json:"retry_after"`
}

// checkTarget is the vegeta target asking target for one unit of policy on key.
func checkTarget(target, policy, key string) vegeta.Target {
	// Marshalling two strings and an int cannot fail.
	body, _ := json.Marshal(checkRequest{Policy: policy, Key: key, Cost: 1})
	return vegeta.Target{
		Method: http.MethodPost,
		URL:    target + checkPath,
		Body:   body,
		Header: http.Header{"Content-Type": {"application/json"}},
	}
}

// keyTargeter returns a targeter that cycles through n keys named
// prefix-0 … prefix-(n-1) under policy. It is safe for concurrent use.
func keyTargeter(target, policy, prefix string, n int) vegeta.Targeter {
	var next atomic.Uint64
	return func(t *vegeta.Target) error {
		if t == nil {
			return vegeta.ErrNilTarget
		}
		i := (next.Add(1) - 1) % uint64(n)
		*t = checkTarget(target, policy, prefix+"-"+strconv.FormatUint(i, 10))
		return nil
	}
}

// outcome classifies one answer of the limiter.
type outcome int

const (
	failed   outcome = iota // transport error or an unexpected status
	admitted                // 200
	refused                 // 429
)

func outcomeOf(r *vegeta.Result) outcome {
	switch {
	case r.Code == http.StatusOK:
		return admitted
	case r.Code == http.StatusTooManyRequests:
		return refused
	default:
		return failed
	}
}

// tally counts the outcomes of a result set.
type tally struct {
	Admitted, Refused, Failed int
	// FirstFailure describes the first failed result: its error, or its
	// status code.
	FirstFailure string
}

func (t *tally) add(r *vegeta.Result) {
	switch outcomeOf(r) {
	case admitted:
		t.Admitted++
	case refused:
		t.Refused++
	default:
		t.Failed++
		if t.FirstFailure == "" {
			t.FirstFailure = r.Error
			if t.FirstFailure == "" {
				t.FirstFailure = fmt.Sprintf("status %d", r.Code)
			}
		}
	}
}

// merge adds u's counts to t.
func (t *tally) merge(u tally) {
	t.Admitted += u.Admitted
	t.Refused += u.Refused
	t.Failed += u.Failed
	if t.FirstFailure == "" {
		t.FirstFailure = u.FirstFailure
	}
}

// note returns a Markdown list item naming the first failure among
// policy's requests, or "" when none failed.
func (t tally) note(policy string) string {
	if t.Failed == 0 {
		return ""
	}
	return fmt.Sprintf("- %s: %d failed, the first with: `%s`\n", policy, t.Failed, t.FirstFailure)
}

// Total is the number of results counted.
func (t tally) Total() int { return t.Admitted + t.Refused + t.Failed }

// newClient returns the HTTP client every attack of one run shares: up to
// conns idle keep-alive connections to the target, each request bounded by
// timeout.
func newClient(conns int, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     time.Minute,
		},
	}
}

// checkHealth asks GET target/healthz and wants 200.
func checkHealth(ctx context.Context, c *http.Client, target string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("loadgen: %s: %w", target, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("loadgen: %s/healthz: %w: %w", target, errTargetDown, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("loadgen: %s/healthz answered %s: %w", target, resp.Status, errTargetDown)
	}
	return nil
}

// waitHealthy asks GET target/healthz every 100ms until it answers 200 or
// wait has passed; with wait 0 it asks once. It returns the last failure.
func waitHealthy(ctx context.Context, c *http.Client, target string, wait time.Duration) error {
	return poll(ctx, target, wait, func() error { return checkHealth(ctx, c, target) })
}

// poll calls try every 100ms until it succeeds or wait has passed, and
// returns its last error.
func poll(ctx context.Context, target string, wait time.Duration, try func() error) error {
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := try()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loadgen: waiting for %s: %w", target, ctx.Err())
		case <-tick.C:
		}
	}
}

// probePolicy spends one unit of policy on key and checks that the service
// knows the policy and, unless limit is 0, that it has the limit and window
// loadgen plans with. The window is checked when the answer carries the IETF
// RateLimit-Policy field with a w parameter.
func probePolicy(ctx context.Context, c *http.Client, target, policy, key string, limit int64, window time.Duration) error {
	t := checkTarget(target, policy, key)
	req, err := http.NewRequestWithContext(ctx, t.Method, t.URL, bytes.NewReader(t.Body))
	if err != nil {
		return fmt.Errorf("loadgen: probe %s: %w", policy, err)
	}
	req.Header = t.Header
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("loadgen: probe %s: %w", policy, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return fmt.Errorf("loadgen: probe %s: %w", policy, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("loadgen: probe %s: %s on a fresh key (is the policy in the service's config?): %s",
			policy, resp.Status, bytes.TrimSpace(body))
	}
	var d decision
	if err := json.Unmarshal(body, &d); err != nil {
		return fmt.Errorf("loadgen: probe %s: decoding the answer: %w", policy, err)
	}
	if limit == 0 {
		return nil
	}
	if d.Limit != limit {
		return fmt.Errorf("loadgen: probe %s: the service's limit is %d, loadgen plans with --limit %d", policy, d.Limit, limit)
	}
	if w, ok := policyWindow(resp.Header.Get("RateLimit-Policy")); ok && w != window {
		return fmt.Errorf("loadgen: probe %s: the service's window is %s, loadgen plans with --window %s", policy, w, window)
	}
	return nil
}

// policyWindow reads the w parameter (seconds) of the first policy item of
// an IETF RateLimit-Policy field value, such as `"default";q=20;w=2`.
func policyWindow(field string) (time.Duration, bool) {
	item, _, _ := strings.Cut(field, ",")
	for param := range strings.SplitSeq(item, ";") {
		name, value, ok := strings.Cut(strings.TrimSpace(param), "=")
		if !ok || name != "w" {
			continue
		}
		s, err := strconv.ParseUint(value, 10, 32)
		if err != nil {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	return 0, false
}
