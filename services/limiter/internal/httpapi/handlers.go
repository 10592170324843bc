package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
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

// decided sets the rate-limit header fields of v and returns the 429
// problem when v refuses the request.
func decided(c *gin.Context, plan *decide.Plan, v decide.Verdict) *problem {
	setLimitFields(c.Writer.Header(), v.Header)
	if v.Allowed() {
		return nil
	}
	return limited(plan.Policies()[v.Refused], v.Results[v.Refused].Decision)
}

// clientKey is /ping's identity: X-Client-Key when present and non-empty,
// else the peer address as c.ClientIP sees it (forwarding headers count only
// from trusted proxies). A bad key answers 400.
func clientKey(c *gin.Context) (string, *problem) {
	k, err := singleHeader(c, "X-Client-Key")
	if err == nil && k != "" {
		err = ValidateText("X-Client-Key", k, limiter.MaxKeyLen, 0)
	}
	if err != nil {
		return "", fail(http.StatusBadRequest, detail(err))
	}
	if k == "" {
		k = c.ClientIP()
	}
	if k == "" {
		return "", fail(http.StatusBadRequest, "the client address is unknown; send X-Client-Key")
	}
	return k, nil
}

func handlePing(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	key, p := clientKey(c)
	if p != nil {
		return answer{}, p
	}
	c.Set(ctxClient, key)
	v, err := s.Decider.Route(c.Request.Context(), s.Ping, limiter.Key{Subject: key}, 1, "/ping")
	if err != nil {
		return answer{}, unavailable(err)
	}
	if p := decided(c, s.Ping, v); p != nil {
		return answer{}, p
	}
	d := v.Results[0]
	return ok(pingBody{Key: key, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining, ResetAfter: limiter.Seconds(d.ResetAfter)}), nil
}

func handleStatus(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	key := c.Query("key")
	if err := ValidateText("key", key, limiter.MaxKeyLen, 0); err != nil {
		return answer{}, fail(http.StatusUnprocessableEntity, "query parameter "+detail(err))
	}
	c.Set(ctxClient, key)
	d, err := s.Decider.Peek(c.Request.Context(), s.Ping.Policies()[0], limiter.Key{Subject: key})
	if err != nil {
		return answer{}, unavailable(err)
	}
	return ok(statusBody{
		Key: key, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining,
		WindowStart: d.WindowStart.UTC().Format(time.RFC3339),
		ResetAfter:  limiter.Seconds(d.ResetAfter),
	}), nil
}

func handleCheck(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	uid, subject, p := userIDHeader(c)
	if p != nil {
		return answer{}, p
	}
	c.Set(ctxClient, subject)
	obj, p := readObject(c)
	if p != nil {
		return answer{}, p
	}
	endpoint, p := stringMember(obj, "endpoint", ValidateEndpoint)
	if p != nil {
		return answer{}, p
	}
	v, err := s.Decider.Route(c.Request.Context(), s.Check, limiter.Key{Subject: subject, Scope: endpoint}, 1, "")
	if err != nil {
		return answer{}, unavailable(err)
	}
	if p := decided(c, s.Check, v); p != nil {
		return answer{}, p
	}
	d := v.Results[0]
	return ok(checkBody{Result: "ok", UserID: uid, Endpoint: endpoint, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining, ResetAfter: limiter.Seconds(d.ResetAfter)}), nil
}

// endpointQuery reads the endpoint query parameter: 422 when it is missing
// or invalid.
func endpointQuery(c *gin.Context) (string, *problem) {
	ep, present := c.GetQuery("endpoint")
	err := ValidateEndpoint(ep)
	if !present {
		err = inputError("endpoint", "query parameter is required")
	}
	if err != nil {
		return "", fail(http.StatusUnprocessableEntity, detail(err))
	}
	return ep, nil
}

func handleRateStatus(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	uid, subject, p := userIDHeader(c)
	if p != nil {
		return answer{}, p
	}
	c.Set(ctxClient, subject)
	endpoint, p := endpointQuery(c)
	if p != nil {
		return answer{}, p
	}
	policy := s.Check.Policies()[0]
	d, err := s.Decider.Peek(c.Request.Context(), policy, limiter.Key{Subject: subject, Scope: endpoint})
	if err != nil {
		return answer{}, unavailable(err)
	}
	return ok(rateStatusBody{
		UserID: uid, Endpoint: endpoint, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining,
		WindowSeconds: int64(policy.Window / time.Second), ResetAfter: limiter.Seconds(d.ResetAfter),
	}), nil
}

func adminDigest(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// admin compares X-Admin-Key with the configured key in constant time, on
// SHA-256 digests so that the length does not leak either: 403 unless they
// match. Without a configured key nobody is admin (fail-closed).
func (h *handler) admin(c *gin.Context) *problem {
	denied := fail(http.StatusForbidden, "a valid X-Admin-Key is required")
	if h.adminKey == nil {
		return denied
	}
	given, err := singleHeader(c, "X-Admin-Key")
	if err != nil || given == "" {
		return denied
	}
	sum := adminDigest(given)
	if subtle.ConstantTimeCompare(sum[:], h.adminKey[:]) != 1 {
		return denied
	}
	return nil
}

func (h *handler) handleReset(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	if p := h.admin(c); p != nil {
		return answer{}, p
	}
	uid, subject, err := ParseUserID(c.Param("userId"))
	if err != nil {
		return answer{}, fail(http.StatusNotFound, "no such user: "+detail(err))
	}
	c.Set(ctxClient, subject)
	var endpoint *string
	if _, given := c.GetQuery("endpoint"); given {
		ep, p := endpointQuery(c)
		if p != nil {
			return answer{}, p
		}
		endpoint = &ep
	}
	key := limiter.Key{Subject: subject}
	if endpoint != nil {
		key.Scope = *endpoint
	}
	deleted, err := s.Decider.Reset(c.Request.Context(), s.Check.Policies(), key, endpoint != nil)
	if err != nil {
		return answer{}, unavailable(err)
	}
	return ok(resetBody{UserID: uid, Endpoint: endpoint, Deleted: deleted}), nil
}

// v1Request is the parsed body of POST /v1/check.
type v1Request struct {
	policy string
	key    string
	cost   int64
}

// parseV1 reads and validates a /v1/check body: 400, 413 or 422 (404 is
// the caller's, once the policy is looked up).
func parseV1(c *gin.Context) (v1Request, *problem) {
	obj, p := readObject(c)
	if p != nil {
		return v1Request{}, p
	}
	r := v1Request{cost: 1}
	if r.policy, p = stringMember(obj, "policy", func(s string) error {
		return ValidateText("policy", s, 128, 0)
	}); p != nil {
		return r, p
	}
	if r.key, p = stringMember(obj, "key", func(s string) error {
		return ValidateText("key", s, limiter.MaxKeyLen, 0)
	}); p != nil {
		return r, p
	}
	if raw, given := obj["cost"]; given {
		if err := json.Unmarshal(raw, &r.cost); err != nil || r.cost < 1 {
			return r, fail(http.StatusUnprocessableEntity, "cost must be an integer of at least 1")
		}
	}
	return r, nil
}

func handleV1Check(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	req, p := parseV1(c)
	if p != nil {
		return answer{}, p
	}
	c.Set(ctxClient, req.key)
	plan, found := s.Single(req.policy)
	if !found {
		return answer{}, fail(http.StatusNotFound, "unknown policy "+strconv.Quote(req.policy))
	}
	policy := plan.Policies()[0]
	if req.cost > policy.Limit {
		return answer{}, fail(http.StatusUnprocessableEntity, "cost "+strconv.FormatInt(req.cost, 10)+" is more than the policy's limit "+strconv.FormatInt(policy.Limit, 10))
	}
	v, err := s.Decider.Route(c.Request.Context(), plan, limiter.Key{Subject: req.key}, req.cost, "")
	if err != nil {
		return answer{}, unavailable(err)
	}
	if p := decided(c, plan, v); p != nil {
		return answer{}, p
	}
	d := v.Results[0]
	return ok(v1Body{
		Allowed: true, Limit: d.Limit, Remaining: d.Remaining, Count: d.Count,
		ResetAfter: limiter.Seconds(d.ResetAfter), RetryAfter: limiter.Seconds(d.RetryAfter),
		Policy: policy.Name, Key: req.key, ShadowDenied: !d.Allowed,
	}), nil
}

func (h *handler) handleReady(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	if h.draining != nil && h.draining() {
		return answer{}, fail(http.StatusServiceUnavailable, "shutting down")
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	if err := s.Decider.Ping(ctx); err != nil {
		return answer{}, unavailable(err)
	}
	return ok(gin.H{"status": "ready"}), nil
}
