package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/canon"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
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
	// checkBody and rateStatusBody name the client by user_id (source
	// user, always positive) or by key (the other sources), never both.
	checkBody struct {
		Result     string  `json:"result"`
		UserID     int64   `json:"user_id,omitempty"`
		Key        string  `json:"key,omitempty"`
		Endpoint   string  `json:"endpoint"`
		Count      int64   `json:"count"`
		Limit      int64   `json:"limit"`
		Remaining  int64   `json:"remaining"`
		ResetAfter float64 `json:"reset_after"`
	}
	rateStatusBody struct {
		UserID        int64   `json:"user_id,omitempty"`
		Key           string  `json:"key,omitempty"`
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
	v.Header.Fields.Set(c.Writer.Header())
	if v.Allowed() {
		return nil
	}
	return limited(plan.Policies()[v.Refused], v.Results[v.Refused].Decision)
}

// clientIdentity resolves /ping's identity from the configured key
// sources: 400 for a repeated or invalid header, 401 for an unknown API key.
func (h *handler) clientIdentity(c *gin.Context, s *snapshot.Snapshot) (identity.Identity, *problem) {
	id, err := s.Identity.Resolve(c.Request, h.pingSources)
	return id, identityProblem(id, err)
}

// identityProblem is the problem of a resolved identity: 400 for a repeated
// or invalid header, 401 for an unknown API key, nil when id is usable.
func identityProblem(id identity.Identity, err error) *problem {
	switch {
	case errors.Is(err, identity.ErrUnknownAPIKey):
		return fail(http.StatusUnauthorized, "X-Api-Key is not one of the operator's keys")
	case errors.Is(err, identity.ErrNoIdentity):
		return fail(http.StatusBadRequest, "no key source applies to this request")
	case err != nil:
		return fail(http.StatusBadRequest, detail(err))
	}
	// The bound is the store's on the whole key, counted on what the client
	// sent: the namespace the service adds is not the client's to know.
	if err := ValidateText(id.Source.Input(), id.Key, limiter.MaxKeyLen-len(id.Source.Namespace()), 0); err != nil {
		return fail(http.StatusBadRequest, detail(err))
	}
	return nil
}

// rateClient is whose budget a /rate/* request spends: a user id (source
// user) or another source's key.
type rateClient struct {
	userID  int64  // > 0 for source user
	key     string // what answers show for the other sources
	subject string // the store key, in its source's namespace
}

// rateIdentity resolves the /rate/* client from the route's key sources,
// first that applies wins. user keeps seed 001's rules (docs/seeds.md):
// X-User-Id must be one positive decimal integer, believed from this
// client, else 400; it is skipped for a later source when absent or not
// believed, and as the last source its absence is that 400 (ATK-01).
func (h *handler) rateIdentity(c *gin.Context, s *snapshot.Snapshot) (rateClient, *problem) {
	r := c.Request
	for i, src := range h.rateSources {
		if src == identity.User {
			if i < len(h.rateSources)-1 && (c.GetHeader(identity.UserIDHeader) == "" || !s.Identity.HeadersBelieved(r)) {
				continue
			}
			uid, subject, p := userIdentity(c, s)
			return rateClient{userID: uid, subject: subject}, p
		}
		id, err := s.Identity.Resolve(r, []identity.Source{src})
		if errors.Is(err, identity.ErrNoIdentity) {
			continue
		}
		if p := identityProblem(id, err); p != nil {
			return rateClient{}, p
		}
		return rateClient{key: id.Key, subject: id.Subject}, nil
	}
	return rateClient{}, fail(http.StatusBadRequest, "no key source applies to this request")
}

func (h *handler) handlePing(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	id, p := h.clientIdentity(c, s)
	if p != nil {
		return answer{}, p
	}
	h.setClient(c, id.Subject)
	v, err := s.Decider.Route(c.Request.Context(), s.Ping, limiter.Key{Subject: id.Subject}, 1, "/ping")
	if err != nil {
		return answer{}, unavailable(err)
	}
	if p := decided(c, s.Ping, v); p != nil {
		return answer{}, p
	}
	d := v.Results[0]
	return jsonOK(pingBody{Key: id.Key, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining, ResetAfter: httplimit.Seconds(d.ResetAfter)}.appendJSON), nil
}

// statusSubject is the store key /status?key=K[&source=S] reads: K in the
// namespace of source S (peer, header, api_key, user); without a source, an
// address or a CIDR prefix is a peer's and anything else a header key. A
// peer's address is folded as /ping folds it (IPv4-mapped, the IPv6 prefix
// of --ipv6-prefix), so that /status reads the counter /ping spends.
func statusSubject(c *gin.Context, s *snapshot.Snapshot, key string) (string, *problem) {
	addr, addrErr := netip.ParseAddr(key)
	src, given := c.GetQuery("source")
	if !given {
		src = string(identity.Header)
		if _, err := netip.ParsePrefix(key); err == nil || addrErr == nil {
			src = string(identity.Peer)
		}
	}
	sources, err := identity.ParseSources([]string{src})
	if err != nil {
		return "", fail(http.StatusUnprocessableEntity, "query parameter source must be peer, header, api_key or user")
	}
	if sources[0] == identity.Peer && addrErr == nil {
		key = s.Identity.ClientRules().AddrKey(addr)
	}
	return sources[0].Namespace() + key, nil
}

func (h *handler) handleStatus(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	key := c.Query("key")
	if err := ValidateText("key", key, limiter.MaxKeyLen-8, 0); err != nil {
		return answer{}, fail(http.StatusUnprocessableEntity, "query parameter "+detail(err))
	}
	subject, p := statusSubject(c, s, key)
	if p != nil {
		return answer{}, p
	}
	h.setClient(c, subject)
	d, err := s.Decider.Peek(c.Request.Context(), s.Ping.Policies()[0], limiter.Key{Subject: subject})
	if err != nil {
		return answer{}, unavailable(err)
	}
	return ok(statusBody{
		Key: key, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining,
		WindowStart: d.WindowStart.UTC().Format(time.RFC3339),
		ResetAfter:  httplimit.Seconds(d.ResetAfter),
	}), nil
}

func (h *handler) handleCheck(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	client, p := h.rateIdentity(c, s)
	if p != nil {
		return answer{}, p
	}
	h.setClient(c, client.subject)
	var endpoint string
	if p := withObject(c, func(obj canon.Members) (p *problem) {
		endpoint, p = stringMember(obj, "endpoint", nil)
		return p
	}); p != nil {
		return answer{}, p
	}
	if endpoint, p = h.endpoint(endpoint); p != nil {
		return answer{}, p
	}
	v, err := s.Decider.Route(c.Request.Context(), s.Check, limiter.Key{Subject: client.subject, Scope: endpoint}, 1, "")
	if err != nil {
		return answer{}, unavailable(err)
	}
	if p := decided(c, s.Check, v); p != nil {
		return answer{}, p
	}
	d := v.Results[0]
	return jsonOK(checkBody{Result: "ok", UserID: client.userID, Key: client.key, Endpoint: endpoint, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining, ResetAfter: httplimit.Seconds(d.ResetAfter)}.appendJSON), nil
}

// endpoint puts an endpoint in its canonical form: 422 for a control
// character or invalid UTF-8, or when the result is empty or longer than
// MaxEndpointRunes (seed 001's 128 characters, docs/seeds.md).
func (h *handler) endpoint(ep string) (string, *problem) {
	ep, err := canon.Endpoint(ep, h.fold)
	if err == nil {
		err = ValidateEndpoint(ep)
	} else {
		err = inputError("endpoint", "%s", strings.TrimPrefix(err.Error(), "canon: "))
	}
	if err != nil {
		return "", fail(http.StatusUnprocessableEntity, detail(err))
	}
	return ep, nil
}

// endpointQuery reads the endpoint query parameter, canonical: 422 when it
// is missing or invalid.
func (h *handler) endpointQuery(c *gin.Context) (string, *problem) {
	ep, present := c.GetQuery("endpoint")
	if !present {
		return "", fail(http.StatusUnprocessableEntity, detail(inputError("endpoint", "query parameter is required")))
	}
	return h.endpoint(ep)
}

func (h *handler) handleRateStatus(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	client, p := h.rateIdentity(c, s)
	if p != nil {
		return answer{}, p
	}
	h.setClient(c, client.subject)
	endpoint, p := h.endpointQuery(c)
	if p != nil {
		return answer{}, p
	}
	policy := s.Check.Policies()[0]
	d, err := s.Decider.Peek(c.Request.Context(), policy, limiter.Key{Subject: client.subject, Scope: endpoint})
	if err != nil {
		return answer{}, unavailable(err)
	}
	return ok(rateStatusBody{
		UserID: client.userID, Key: client.key, Endpoint: endpoint, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining,
		WindowSeconds: int64(policy.Window / time.Second), ResetAfter: httplimit.Seconds(d.ResetAfter),
	}), nil
}

func adminDigest(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// admin compares X-Admin-Key with the configured key in constant time, on
// SHA-256 digests so that the length does not leak either: 403 unless they
// match. Without a configured key nobody is admin (fail-closed). A valid
// key always passes; a wrong one is counted against its client, logged,
// and answered 429 instead of 403 once the client has sent too many this
// minute (no log line then: the throttle bounds them).
func (h *handler) admin(c *gin.Context, s *snapshot.Snapshot) *problem {
	denied := fail(http.StatusForbidden, "a valid X-Admin-Key is required")
	if h.adminKey == nil {
		return denied
	}
	given, err := singleHeader(c, "X-Admin-Key")
	if err != nil || given == "" {
		return denied // no key is no guess
	}
	sum := adminDigest(given)
	if subtle.ConstantTimeCompare(sum[:], h.adminKey[:]) == 1 {
		return nil
	}
	ctx, client := c.Request.Context(), adminClient(c, s)
	if p := h.guard.failed(ctx, client, s.Decider.Now()); p != nil {
		return p
	}
	h.log.LogAttrs(ctx, slog.LevelWarn, "admin key refused",
		slog.String("request_id", requestIDOf(c)),
		slog.String("route", c.FullPath()),
		slog.String("client", clientHash(s, "peer:"+client)))
	return denied
}

func (h *handler) handleReset(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	if p := h.admin(c, s); p != nil {
		return answer{}, p
	}
	uid, subject, err := ParseUserID(c.Param("userId"))
	if err != nil {
		return answer{}, fail(http.StatusNotFound, "no such user: "+detail(err))
	}
	subject = identity.User.Namespace() + subject // never another source's key
	h.setClient(c, subject)
	var endpoint *string
	if _, given := c.GetQuery("endpoint"); given {
		ep, p := h.endpointQuery(c)
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
	r := v1Request{cost: 1}
	p := withObject(c, func(obj canon.Members) (p *problem) {
		if r.policy, p = stringMember(obj, "policy", validPolicyName); p != nil {
			return p
		}
		if r.key, p = stringMember(obj, "key", validKey); p != nil {
			return p
		}
		if raw, given := obj.Get("cost"); given {
			var ok bool
			if r.cost, ok = readCost(raw, r.cost); !ok {
				return fail(http.StatusUnprocessableEntity, "cost must be an integer of at least 1")
			}
		}
		return nil
	})
	return r, p
}

// readCost reads a member's JSON value (valid JSON) as json.Unmarshal reads
// it into an int64 holding def, without reflection: null leaves def, a
// number must be an integer in range (no fraction, no exponent), anything
// else is refused. ok is false unless the result is at least 1.
func readCost(raw []byte, def int64) (cost int64, ok bool) {
	if string(raw) == "null" {
		return def, def >= 1
	}
	cost, err := strconv.ParseInt(string(raw), 10, 64)
	return cost, err == nil && cost >= 1
}

func validPolicyName(s string) error { return ValidateText("policy", s, 128, 0) }
func validKey(s string) error        { return ValidateText("key", s, limiter.MaxKeyLen, 0) }

func (h *handler) handleV1Check(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	req, p := parseV1(c)
	if p != nil {
		return answer{}, p
	}
	h.setClient(c, req.key)
	plan, found := s.Single(req.policy)
	if !found {
		return answer{}, fail(http.StatusNotFound, "unknown policy "+strconv.Quote(req.policy))
	}
	if s.Seed(req.policy) {
		return answer{}, fail(http.StatusForbidden, "policy "+strconv.Quote(req.policy)+" is a seed route's: /v1/check may not charge it (decision_api: true opts a policy in)")
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
	return jsonOK(v1Body{
		Allowed: true, Limit: d.Limit, Remaining: d.Remaining, Count: d.Count,
		ResetAfter: httplimit.Seconds(d.ResetAfter), RetryAfter: httplimit.Seconds(d.RetryAfter),
		Policy: policy.Name, Key: req.key, ShadowDenied: !d.Allowed,
	}.appendJSON), nil
}

// notReadyPublic is /readyz's 503 detail on the public listener, which
// keeps the store's error (addresses, error text) to the internal one.
const notReadyPublic = "not ready: the store cannot decide; the internal listener's /readyz and the log say why"

// ErrDraining is Ready's answer once a graceful shutdown has begun.
var ErrDraining = errors.New("httpapi: shutting down")

// Ready reports whether the service can take requests on s, as GET /readyz
// answers it (nil: 200; an error: 503): ErrDraining when draining (nil:
// never) says a graceful shutdown has begun, else the error of the store's
// ping, bounded by two seconds (see decide.Decider.Ping). The gRPC health
// service follows it too.
func Ready(ctx context.Context, s *snapshot.Snapshot, draining func() bool) error {
	if draining != nil && draining() {
		return ErrDraining
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return s.Decider.Ping(ctx)
}

func (h *handler) handleReady(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	switch err := Ready(c.Request.Context(), s, h.draining); {
	case errors.Is(err, ErrDraining):
		return answer{}, fail(http.StatusServiceUnavailable, "shutting down")
	case err != nil:
		p := unavailable(err)
		p.detail = "not ready: " + err.Error()
		if h.listener == PublicRoutes {
			// The store's error names its nodes' addresses: for operators,
			// on the internal listener and in the log (p.cause), not for
			// every client.
			p.detail = notReadyPublic
		}
		return answer{}, p
	}
	return ok(gin.H{"status": "ready"}), nil
}
