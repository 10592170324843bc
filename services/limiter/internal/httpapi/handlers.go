package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// readyTimeout bounds the store ping of /readyz.
const readyTimeout = 2 * time.Second

// Answer bodies. Durations are seconds.
type (
	pingBody struct {
		Key        string  `json:"key"`
		Count      int64   `json:"count"`
		Limit      int64   `json:"limit"`
		Remaining  int64   `json:"remaining"`
		ResetAfter float64 `json:"reset_after"`
	}
	statusBody struct {
		Key         string  `json:"key"`
		Count       int64   `json:"count"`
		Limit       int64   `json:"limit"`
		Remaining   int64   `json:"remaining"`
		WindowStart string  `json:"window_start"`
		ResetAfter  float64 `json:"reset_after"`
	}
	checkBody struct {
		Result     string  `json:"result"`
		UserID     int64   `json:"user_id"`
		Endpoint   string  `json:"endpoint"`
		Count      int64   `json:"count"`
		Limit      int64   `json:"limit"`
		Remaining  int64   `json:"remaining"`
		ResetAfter float64 `json:"reset_after"`
	}
	rateStatusBody struct {
		UserID        int64   `json:"user_id"`
		Endpoint      string  `json:"endpoint"`
		Count         int64   `json:"count"`
		Limit         int64   `json:"limit"`
		Remaining     int64   `json:"remaining"`
		WindowSeconds int64   `json:"window_seconds"`
		ResetAfter    float64 `json:"reset_after"`
	}
	resetBody struct {
		UserID   int64   `json:"user_id"`
		Endpoint *string `json:"endpoint"`
		Deleted  int64   `json:"deleted"`
	}
	v1Body struct {
		Allowed      bool    `json:"allowed"`
		Limit        int64   `json:"limit"`
		Remaining    int64   `json:"remaining"`
		Count        int64   `json:"count"`
		ResetAfter   float64 `json:"reset_after"`
		RetryAfter   float64 `json:"retry_after"`
		Policy       string  `json:"policy"`
		Key          string  `json:"key"`
		ShadowDenied bool    `json:"shadow_denied,omitempty"`
	}
)

// outcome is the result of evaluating a route's policies for one attempt.
type outcome struct {
	decisions []limiter.Decision // one per evaluated policy, in order
	refused   int                // index of the enforcing refusal; -1 when allowed
}

// evaluate charges key with cost on r's policies in order, with the time
// read once. The first refusal by an enforcing policy stops the evaluation,
// so later policies are not charged; shadow refusals are counted and
// ignored.
func (h *handler) evaluate(ctx context.Context, r route, key limiter.Key, cost int64, audit string) (outcome, error) {
	now := h.clock.Now()
	out := outcome{decisions: make([]limiter.Decision, 0, len(r.policies)), refused: -1}
	for i, p := range r.policies {
		req := limiter.Request{Key: key, Cost: cost, Now: now}
		if i == r.auditIndex {
			req.Audit = audit
		}
		start := time.Now()
		d, err := h.store.Allow(ctx, p, req)
		h.storeTime.Observe(time.Since(start).Seconds())
		if err != nil {
			return out, err
		}
		out.decisions = append(out.decisions, d)
		pc := r.counters[i]
		switch {
		case d.Allowed:
			pc.allowed.Inc()
		case p.Shadow:
			pc.shadow.Inc()
		default:
			pc.limited.Inc()
			h.offenders.Record(now, p.Name, key.Subject)
			out.refused = i
			return out, nil
		}
	}
	return out, nil
}

// limited sets the rate-limit header fields and, when out is a refusal,
// answers 429 and returns true.
func limited(c *gin.Context, r route, out outcome) bool {
	if r.policyHeader != "" {
		best := out.refused
		if best < 0 {
			for i, d := range out.decisions {
				if !r.policies[i].Shadow && (best < 0 || d.Remaining < out.decisions[best].Remaining) {
					best = i
				}
			}
		}
		if best >= 0 {
			setLimitFields(c.Writer.Header(), r.policyHeader, r.policies[best].Name, &out.decisions[best])
		} else {
			setLimitFields(c.Writer.Header(), r.policyHeader, "", nil)
		}
	}
	if out.refused < 0 {
		return false
	}
	abortLimited(c, r.policies[out.refused], out.decisions[out.refused])
	return true
}

// unavailable answers 503 when the store could not decide, and counts it.
func (h *handler) unavailable(c *gin.Context, err error) {
	h.storeErr.Inc()
	h.log.LogAttrs(c.Request.Context(), slog.LevelWarn, "store error",
		slog.String("request_id", c.GetString(ctxRequestID)), slog.String("error", err.Error()))
	c.Header("Retry-After", "1")
	abortProblem(c, http.StatusServiceUnavailable, "the rate-limit store could not decide; retry later")
}

// peek reads k's state under p without counting.
func (h *handler) peek(c *gin.Context, p limiter.Policy, k limiter.Key) (limiter.Decision, bool) {
	d, err := h.store.Peek(c.Request.Context(), p, k, h.clock.Now())
	if err != nil {
		h.unavailable(c, err)
		return d, false
	}
	return d, true
}

// clientKey is /ping's identity: X-Client-Key when present and non-empty,
// else the peer address as c.ClientIP sees it (forwarding headers count only
// from trusted proxies). A bad key answers 400.
func clientKey(c *gin.Context) (string, bool) {
	k, err := singleHeader(c, "X-Client-Key")
	if err == nil && k != "" {
		err = ValidateText("X-Client-Key", k, limiter.MaxKeyLen, 0)
	}
	if err != nil {
		abortProblem(c, http.StatusBadRequest, detail(err))
		return "", false
	}
	if k == "" {
		k = c.ClientIP()
	}
	if k == "" {
		abortProblem(c, http.StatusBadRequest, "the client address is unknown; send X-Client-Key")
		return "", false
	}
	return k, true
}

func (h *handler) handlePing(c *gin.Context) {
	key, ok := clientKey(c)
	if !ok {
		return
	}
	c.Set(ctxClient, key)
	ping := h.policies.Load().ping
	out, err := h.evaluate(c.Request.Context(), ping, limiter.Key{Subject: key}, 1, "/ping")
	if err != nil {
		h.unavailable(c, err)
		return
	}
	if limited(c, ping, out) {
		return
	}
	d := out.decisions[0]
	c.JSON(http.StatusOK, pingBody{Key: key, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining, ResetAfter: limiter.Seconds(d.ResetAfter)})
}

func (h *handler) handleStatus(c *gin.Context) {
	key := c.Query("key")
	if err := ValidateText("key", key, limiter.MaxKeyLen, 0); err != nil {
		abortProblem(c, http.StatusUnprocessableEntity, "query parameter "+detail(err))
		return
	}
	c.Set(ctxClient, key)
	d, ok := h.peek(c, h.policies.Load().ping.policies[0], limiter.Key{Subject: key})
	if !ok {
		return
	}
	c.JSON(http.StatusOK, statusBody{
		Key: key, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining,
		WindowStart: d.WindowStart.UTC().Format(time.RFC3339),
		ResetAfter:  limiter.Seconds(d.ResetAfter),
	})
}

func (h *handler) handleCheck(c *gin.Context) {
	check := h.policies.Load().check // before the body: the policies the request started with
	uid, subject, ok := userIDHeader(c)
	if !ok {
		return
	}
	c.Set(ctxClient, subject)
	obj, ok := readObject(c)
	if !ok {
		return
	}
	endpoint, ok := stringMember(c, obj, "endpoint", ValidateEndpoint)
	if !ok {
		return
	}
	out, err := h.evaluate(c.Request.Context(), check, limiter.Key{Subject: subject, Scope: endpoint}, 1, "")
	if err != nil {
		h.unavailable(c, err)
		return
	}
	if limited(c, check, out) {
		return
	}
	d := out.decisions[0]
	c.JSON(http.StatusOK, checkBody{Result: "ok", UserID: uid, Endpoint: endpoint, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining, ResetAfter: limiter.Seconds(d.ResetAfter)})
}

// endpointQuery reads the endpoint query parameter, answering 422 when it is
// missing or invalid.
func endpointQuery(c *gin.Context) (string, bool) {
	ep, present := c.GetQuery("endpoint")
	err := ValidateEndpoint(ep)
	if !present {
		err = inputError("endpoint", "query parameter is required")
	}
	if err != nil {
		abortProblem(c, http.StatusUnprocessableEntity, detail(err))
		return "", false
	}
	return ep, true
}

func (h *handler) handleRateStatus(c *gin.Context) {
	uid, subject, ok := userIDHeader(c)
	if !ok {
		return
	}
	c.Set(ctxClient, subject)
	endpoint, ok := endpointQuery(c)
	if !ok {
		return
	}
	p := h.policies.Load().check.policies[0]
	d, ok := h.peek(c, p, limiter.Key{Subject: subject, Scope: endpoint})
	if !ok {
		return
	}
	c.JSON(http.StatusOK, rateStatusBody{
		UserID: uid, Endpoint: endpoint, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining,
		WindowSeconds: int64(p.Window / time.Second), ResetAfter: limiter.Seconds(d.ResetAfter),
	})
}

func adminDigest(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// isAdmin compares X-Admin-Key with the configured key in constant time, on
// SHA-256 digests so that the length does not leak either. Without a
// configured key nobody is admin (fail-closed).
func (h *handler) isAdmin(c *gin.Context) bool {
	if h.adminKey == nil {
		return false
	}
	given, err := singleHeader(c, "X-Admin-Key")
	if err != nil || given == "" {
		return false
	}
	sum := adminDigest(given)
	return subtle.ConstantTimeCompare(sum[:], h.adminKey[:]) == 1
}

func (h *handler) handleReset(c *gin.Context) {
	if !h.isAdmin(c) {
		abortProblem(c, http.StatusForbidden, "a valid X-Admin-Key is required")
		return
	}
	uid, subject, err := ParseUserID(c.Param("userId"))
	if err != nil {
		abortProblem(c, http.StatusNotFound, "no such user: "+detail(err))
		return
	}
	c.Set(ctxClient, subject)
	var endpoint *string
	if _, given := c.GetQuery("endpoint"); given {
		ep, ok := endpointQuery(c)
		if !ok {
			return
		}
		endpoint = &ep
	}
	ctx := c.Request.Context()
	var deleted int64
	for _, p := range h.policies.Load().check.policies {
		var n int64
		if endpoint == nil {
			n, err = h.store.ResetSubject(ctx, p, subject)
		} else {
			n, err = h.store.Reset(ctx, p, limiter.Key{Subject: subject, Scope: *endpoint})
		}
		if err != nil {
			h.unavailable(c, err)
			return
		}
		deleted += n
	}
	c.JSON(http.StatusOK, resetBody{UserID: uid, Endpoint: endpoint, Deleted: deleted})
}

// v1Request is the parsed body of POST /v1/check.
type v1Request struct {
	policy string
	key    string
	cost   int64
}

// parseV1 reads and validates a /v1/check body, answering 400, 413 or 422
// (404 is the caller's, once the policy is looked up).
func parseV1(c *gin.Context) (v1Request, bool) {
	obj, ok := readObject(c)
	if !ok {
		return v1Request{}, false
	}
	r := v1Request{cost: 1}
	if r.policy, ok = stringMember(c, obj, "policy", func(s string) error {
		return ValidateText("policy", s, 128, 0)
	}); !ok {
		return r, false
	}
	if r.key, ok = stringMember(c, obj, "key", func(s string) error {
		return ValidateText("key", s, limiter.MaxKeyLen, 0)
	}); !ok {
		return r, false
	}
	if raw, given := obj["cost"]; given {
		if err := json.Unmarshal(raw, &r.cost); err != nil || r.cost < 1 {
			abortProblem(c, http.StatusUnprocessableEntity, "cost must be an integer of at least 1")
			return r, false
		}
	}
	return r, true
}

func (h *handler) handleV1Check(c *gin.Context) {
	policies := h.policies.Load() // before the body: the policies the request started with
	req, ok := parseV1(c)
	if !ok {
		return
	}
	c.Set(ctxClient, req.key)
	r, ok := policies.single[req.policy]
	if !ok {
		abortProblem(c, http.StatusNotFound, "unknown policy "+strconv.Quote(req.policy))
		return
	}
	p := r.policies[0]
	if req.cost > p.Limit {
		abortProblem(c, http.StatusUnprocessableEntity, "cost "+strconv.FormatInt(req.cost, 10)+" is more than the policy's limit "+strconv.FormatInt(p.Limit, 10))
		return
	}
	out, err := h.evaluate(c.Request.Context(), r, limiter.Key{Subject: req.key}, req.cost, "")
	if err != nil {
		h.unavailable(c, err)
		return
	}
	if limited(c, r, out) {
		return
	}
	d := out.decisions[0]
	c.JSON(http.StatusOK, v1Body{
		Allowed: true, Limit: d.Limit, Remaining: d.Remaining, Count: d.Count,
		ResetAfter: limiter.Seconds(d.ResetAfter), RetryAfter: limiter.Seconds(d.RetryAfter),
		Policy: p.Name, Key: req.key, ShadowDenied: !d.Allowed,
	})
}

func (h *handler) handleReady(c *gin.Context) {
	if h.draining != nil && h.draining() {
		abortProblem(c, http.StatusServiceUnavailable, "shutting down")
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	if err := h.store.Ping(ctx); err != nil {
		h.unavailable(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}
