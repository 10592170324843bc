package main

import (
	"bytes"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// flaws turns the reference service into a broken one, one defect per
// field; the zero value is the correct reference.
type flaws struct {
	all200             bool // answers 200 {} to everything
	trustForwarded     bool // /ping keys on X-Forwarded-For, X-Real-IP, Forwarded, True-Client-IP
	noAdminCheck       bool // reset never checks X-Admin-Key
	notFailClosed      bool // an empty configured key matches an empty or absent header
	resetBeforeCheck   bool // deletes first, then answers 403 for a wrong key
	foldKey            bool // compares admin keys case-insensitively
	pathBeforeKey      bool // validates the path id before the admin key
	uncheckedPathID    bool // any path id is used as is
	resetIgnoresUser   bool // reset deletes the endpoint's (or every) events of all users
	concatSQL          bool // builds SQL by pasting values between quotes
	noLengthCheck      bool // endpoints of any length
	strictLength       bool // off by one: rejects 128-character endpoints
	noEndpointCheck    bool // missing or empty endpoints accepted
	plainErrors        bool // errors as {"error": "..."} application/json
	anonymousUser      bool // no X-User-Id means user 1
	lenientUserID      bool // strconv.ParseInt(id, 0, 64) > 0: signs, hex, underscores
	phpUserID          bool // digits only, then a saturating parse, zero allowed
	unicodeUserID      bool // any Unicode decimal digits
	emptyBodyIs422     bool // no body is a missing endpoint (422), not 400
	typeErrors400      bool // a wrongly typed endpoint is 400, not 422
	lenientJSON        bool // trailing data after the object ignored
	noBodyLimit        bool // no 64 KiB bound on bodies
	anyMethod          bool // routes answer every method
	bigHeaders         bool // the server accepts 8 MiB of headers
	bare429            bool // 429 without Retry-After and RateLimit headers
	recordsDenied      bool // sliding log records refused attempts too
	chargesInvalid     bool // every check attempt with a user id is charged, malformed ones too
	defaultPolicy      bool // an unknown policy falls back to "check"
	uncheckedCost      bool // any cost accepted
	sharedNamespace    bool // X-Client-Key values and peer addresses are one key space
	v1SeedPolicies     bool // /v1/check charges the seed routes' policies
	trustClientKey     bool // a strict reference still believes X-Client-Key from anyone
	decisionAPIsPublic bool // a strict reference serves its decision APIs publicly too
	ipv6Apart          bool // every IPv6 address is its own client, no /64 grouping
	forwardedFallback  bool // a forwarded entry with a port, or malformed, keys by the proxy (Gin's ClientIP)
	noAdminThrottle    bool // wrong admin keys are never throttled
	throttleLocksOut   bool // a throttled address is refused before its key is compared, the right key too
	resetPublic        bool // a strict reference serves DELETE /rate/reset on its public listener
	quarterPerClient   bool // a strict reference lets one address hold a quarter of its connections
	gwKeepsParams      bool // forward-auth matches paths with their ';' segment parameters
	gwLiteralPath      bool // forward-auth matches paths case-sensitively, a backslash as a letter
	gwOriginOnly       bool // forward-auth refuses an absolute-form URI (400)
	gwHostExact        bool // forward-auth compares hosts as sent: a trailing dot or a port is another host
}

const (
	refWindow     = 60 * time.Second
	refPingLimit  = 3
	refCheckLimit = 10
	refAPILimit   = 10
	maxBody       = 64 << 10
	// refAdminFailures wrong admin keys from one address are answered 403,
	// the next ones 429 (the reference's clock never moves to a new minute).
	refAdminFailures = 20
)

// refNow is the reference's fixed clock: time never moves during a test.
var refNow = time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)

// reference is a small implementation of docs/design.md's routes over a real
// SQLite file, against which the whole suite must pass. A strict one
// believes no X-Client-Key and serves its decision APIs (internal routes)
// on a second listener only.
type reference struct {
	db       *sql.DB
	adminKey string
	f        flaws
	strict   bool
	proxy    netip.Addr // the trusted proxy, whose X-Forwarded-For is read

	mu       sync.Mutex
	failures map[string]int // wrong admin keys by peer address
}

// refProxy is the address the test references trust as a proxy.
var refProxy = netip.MustParseAddr("127.0.0.2")

// openReference opens (creating) the SQLite file at path and returns the
// reference handler over it.
func openReference(path, adminKey string, f flaws) (*reference, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`
		CREATE TABLE IF NOT EXISTS rate_limit_windows (key TEXT NOT NULL, window_start TEXT NOT NULL, count INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key, window_start));
		CREATE TABLE IF NOT EXISTS rate_events (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER NOT NULL, endpoint TEXT NOT NULL, created_at TEXT NOT NULL);
		CREATE INDEX IF NOT EXISTS idx_rate_events_user_endpoint ON rate_events (user_id, endpoint, created_at);`)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &reference{db: db, adminKey: adminKey, f: f, failures: map[string]int{}}, nil
}

// newReference starts a reference service (with flaws f) on loopback and
// returns its base URL; everything is closed when the test ends.
func newReference(t testing.TB, adminKey string, f flaws) string {
	t.Helper()
	ref := startReference(t, adminKey, f, false)
	return serveReference(t, ref.listener(true), f, nil)
}

// newStrictReference starts a strict reference and returns the base URLs
// of its public and internal listeners.
// Its public listener holds at most refMaxConns connections, a sixteenth of
// them per client address (a quarter with the quarterPerClient flaw).
func newStrictReference(t testing.TB, adminKey string, f flaws) (public, internal string) {
	t.Helper()
	ref := startReference(t, adminKey, f, true)
	perClient := refMaxConns / 16
	if f.quarterPerClient {
		perClient = refMaxConns / 4
	}
	bound := func(ln net.Listener) net.Listener {
		return &boundedListener{Listener: ln, perClient: perClient, byHost: map[string]int{}}
	}
	return serveReference(t, ref.listener(true), f, bound), serveReference(t, ref.listener(false), f, nil)
}

// refMaxConns bounds the open connections of a strict reference's public
// listener.
const refMaxConns = 128

// boundedListener closes, as soon as accepted, a connection over
// refMaxConns open or over perClient from one address.
type boundedListener struct {
	net.Listener
	perClient int
	mu        sync.Mutex
	open      int
	byHost    map[string]int
}

func (l *boundedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		l.mu.Lock()
		ok := l.open < refMaxConns && l.byHost[host] < l.perClient
		if ok {
			l.open++
			l.byHost[host]++
		}
		l.mu.Unlock()
		if ok {
			return &boundedConn{Conn: c, l: l, host: host}, nil
		}
		c.Close()
	}
}

// boundedConn gives its place back on its first Close.
type boundedConn struct {
	net.Conn
	l    *boundedListener
	host string
	once sync.Once
}

func (c *boundedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.byHost[c.host]--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func startReference(t testing.TB, adminKey string, f flaws, strict bool) *reference {
	t.Helper()
	ref, err := openReference(filepath.Join(t.TempDir(), "ref.db"), adminKey, f)
	require.NoError(t, err)
	ref.strict, ref.proxy = strict, refProxy
	t.Cleanup(func() { ref.db.Close() })
	return ref
}

// serveReference serves h on loopback until the test ends; bound, when not
// nil, wraps the listener.
func serveReference(t testing.TB, h http.Handler, f flaws, bound func(net.Listener) net.Listener) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if bound != nil {
		srv.Listener = bound(srv.Listener)
	}
	if f.bigHeaders {
		srv.Config.MaxHeaderBytes = 8 << 20
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

type route struct {
	method, path string
	prefix       bool
	handle       func(*reference, http.ResponseWriter, *http.Request)
	internal     bool // a decision API: on a strict reference's internal listener only
}

var routes = []route{
	{http.MethodGet, "/healthz", false, (*reference).healthz, false},
	{http.MethodGet, "/ping", false, (*reference).ping, false},
	{http.MethodGet, "/status", false, (*reference).status, false},
	{http.MethodPost, "/rate/check", false, (*reference).check, false},
	{http.MethodGet, "/rate/status", false, (*reference).rateStatus, false},
	{http.MethodDelete, "/rate/reset/", true, (*reference).reset, true},
	{http.MethodPost, "/v1/check", false, (*reference).v1Check, true},
	{http.MethodPost, "/json", false, (*reference).envoyJSON, true},
	{http.MethodGet, "/metrics", false, (*reference).metrics, true},
	{http.MethodGet, "/admin/offenders", false, (*reference).offenders, true},
	{http.MethodGet, "/v1/forward-auth", false, (*reference).forwardAuth, true},
}

// listener returns the handler of the public or the internal listener.
func (s *reference) listener(public bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, public) })
}

func (s *reference) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r, true) }

// serves reports whether the listener (public or not) serves rt.
func (s *reference) serves(rt route, public bool) bool {
	switch {
	case !s.strict || rt.path == "/healthz":
		return true
	case public:
		return !rt.internal || s.f.decisionAPIsPublic || s.f.resetPublic && rt.path == "/rate/reset/"
	}
	return rt.internal
}

func (s *reference) serve(w http.ResponseWriter, r *http.Request, public bool) {
	if s.f.all200 {
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	var allow []string
	for _, rt := range routes {
		if r.URL.Path != rt.path && (!rt.prefix || !strings.HasPrefix(r.URL.Path, rt.path)) || !s.serves(rt, public) {
			continue
		}
		if rt.method == r.Method || s.f.anyMethod {
			rt.handle(s, w, r)
			return
		}
		allow = append(allow, rt.method)
	}
	if len(allow) == 0 {
		s.problem(w, http.StatusNotFound, "no such route")
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.problem(w, http.StatusMethodNotAllowed, r.Method+" not allowed")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

func (s *reference) problem(w http.ResponseWriter, status int, detail string) {
	s.problemOf(w, status, "about:blank", http.StatusText(status), detail)
}

func (s *reference) problemOf(w http.ResponseWriter, status int, typ, title, detail string) {
	if s.f.plainErrors {
		writeJSON(w, status, map[string]any{"error": detail})
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": typ, "title": title, "status": status, "detail": detail})
}

// limited writes the RateLimit fields and, when denied, the 429 problem.
func (s *reference) limited(w http.ResponseWriter, policy string, limit, remaining int64, retryAfter time.Duration, body map[string]any) {
	if body != nil || !s.f.bare429 {
		w.Header().Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=%d", policy, limit, int(refWindow.Seconds())))
		w.Header().Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", policy, max(remaining, 0), int(retryAfter.Seconds())))
	}
	if body != nil {
		writeJSON(w, http.StatusOK, body)
		return
	}
	if !s.f.bare429 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	s.problemOf(w, http.StatusTooManyRequests, "https://tollgate.example/problems/rate-limit-exceeded", "Too Many Requests",
		fmt.Sprintf("rate limit of %d per %s exceeded", limit, refWindow))
}

// sqlText returns the query and its arguments, or with concatSQL the
// values pasted into the text between quotes.
func (s *reference) sqlText(query string, args ...any) (string, []any) {
	if !s.f.concatSQL {
		return query, args
	}
	for _, a := range args {
		query = strings.Replace(query, "?", fmt.Sprintf("'%v'", a), 1)
	}
	return query, nil
}

func (s *reference) exec(query string, args ...any) (int64, error) {
	q, a := s.sqlText(query, args...)
	res, err := s.db.Exec(q, a...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s *reference) scalar(query string, args ...any) (int64, error) {
	q, a := s.sqlText(query, args...)
	var n int64
	err := s.db.QueryRow(q, a...).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

func windowStart() string { return refNow.Truncate(refWindow).Format(time.RFC3339) }

func (s *reference) failed(w http.ResponseWriter, err error) {
	s.problem(w, http.StatusInternalServerError, "store: "+err.Error())
}

func (s *reference) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
}

// fixedHit adds cost to key's current fixed window and returns the count.
func (s *reference) fixedHit(key string, cost int64) (int64, error) {
	return s.scalar(`INSERT INTO rate_limit_windows (key, window_start, count) VALUES (?, ?, ?)
		ON CONFLICT (key, window_start) DO UPDATE SET count = count + excluded.count RETURNING count`, key, windowStart(), cost)
}

// peer returns /ping's identity and its namespace: X-Client-Key ("key:";
// never on a strict reference), else the peer address ("peer:"); ok is
// false when the client address cannot be told (see peerAddr).
func (s *reference) peer(r *http.Request) (key, namespace string, ok bool) {
	if k := r.Header.Get("X-Client-Key"); k != "" && (!s.strict || s.f.trustClientKey) {
		key, namespace, ok = k, "key:", true
	} else {
		key, ok = s.peerAddr(r)
		namespace = "peer:"
	}
	if s.f.sharedNamespace {
		namespace = ""
	}
	return key, namespace, ok
}

// peerAddr returns /ping's client address key: the peer, or from the
// trusted proxy the right-most X-Forwarded-For entry (ports allowed) that is
// not the proxy; an IPv6 address by its /64. ok is false for a malformed
// forwarded entry.
func (s *reference) peerAddr(r *http.Request) (key string, ok bool) {
	if s.f.trustForwarded {
		for _, h := range []string{"X-Forwarded-For", "X-Real-IP", "True-Client-IP", "Forwarded"} {
			if v := r.Header.Get(h); v != "" {
				return strings.TrimPrefix(strings.TrimSpace(strings.Split(v, ",")[0]), "for="), true
			}
		}
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr, true
	}
	client := peer.Addr().Unmap()
	if xff := r.Header.Get("X-Forwarded-For"); client == s.proxy && xff != "" {
		entries := strings.Split(xff, ",")
		for i := len(entries) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(entries[i]))
			if ap, perr := netip.ParseAddrPort(strings.TrimSpace(entries[i])); err != nil && perr == nil && !s.f.forwardedFallback {
				a, err = ap.Addr(), nil
			}
			if err != nil {
				if s.f.forwardedFallback {
					break
				}
				return "", false
			}
			if client = a.Unmap(); client != s.proxy {
				break
			}
		}
	}
	return s.addrKey(client), true
}

// addrKey is the key of an address: IPv4 as is, IPv6 by its /64.
func (s *reference) addrKey(a netip.Addr) string {
	if a.Is4() || s.f.ipv6Apart {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

func (s *reference) ping(w http.ResponseWriter, r *http.Request) {
	key, namespace, ok := s.peer(r)
	if !ok {
		s.problem(w, http.StatusBadRequest, "X-Forwarded-For from a trusted proxy holds an entry that is not an address")
		return
	}
	n, err := s.fixedHit(namespace+key, 1)
	if err != nil {
		s.failed(w, err)
		return
	}
	reset := refNow.Truncate(refWindow).Add(refWindow).Sub(refNow)
	var body map[string]any
	if n <= refPingLimit {
		body = map[string]any{"key": key, "count": n, "limit": refPingLimit, "remaining": refPingLimit - n, "reset_after": reset.Seconds()}
	}
	s.limited(w, "ping", refPingLimit, refPingLimit-n, reset, body)
}

func (s *reference) status(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		s.problem(w, http.StatusUnprocessableEntity, "query parameter key is required")
		return
	}
	subject := "key:" + key
	if a, err := netip.ParseAddr(key); err == nil {
		subject = "peer:" + s.addrKey(a.Unmap()) // an address: its client's counter
	} else if _, err := netip.ParsePrefix(key); err == nil {
		subject = "peer:" + key
	}
	if s.f.sharedNamespace {
		subject = subject[strings.IndexByte(subject, ':')+1:]
	}
	n, err := s.scalar(`SELECT count FROM rate_limit_windows WHERE key = ? AND window_start = ?`, subject, windowStart())
	if err != nil {
		s.failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "count": n, "limit": refPingLimit, "remaining": max(refPingLimit-n, 0),
		"window_start": windowStart(), "reset_after": refNow.Truncate(refWindow).Add(refWindow).Sub(refNow).Seconds()})
}

// userID parses an id the strict way (ASCII digits, positive, fits in
// int64) unless a flaw loosens it.
func (s *reference) userID(raw string) (int64, bool) {
	switch {
	case s.f.anonymousUser && raw == "":
		return 1, true
	case s.f.lenientUserID:
		n, err := strconv.ParseInt(raw, 0, 64)
		return n, err == nil && n > 0
	case s.f.phpUserID:
		n := int64(0)
		for _, c := range raw {
			if c < '0' || c > '9' {
				return 0, false
			}
			if n > (1<<63-1-int64(c-'0'))/10 {
				return 1<<63 - 1, true
			}
			n = n*10 + int64(c-'0')
		}
		return n, raw != ""
	case s.f.unicodeUserID:
		n := int64(0)
		for _, c := range raw {
			if !unicode.IsDigit(c) {
				return 0, false
			}
			zero := c
			for unicode.IsDigit(zero-1) && c-zero < 9 {
				zero--
			}
			n = n*10 + int64(c-zero)
		}
		return n, n > 0
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	return n, err == nil && n > 0
}

// endpointOK validates an endpoint and answers 422 when it is not.
func (s *reference) endpointOK(w http.ResponseWriter, ep *string) bool {
	n := 0
	if ep != nil {
		n = utf8.RuneCountInString(*ep)
	}
	switch {
	case n == 0 && !s.f.noEndpointCheck:
		s.problem(w, http.StatusUnprocessableEntity, "endpoint is required")
	case n > 128 && !s.f.noLengthCheck, n == 128 && s.f.strictLength:
		s.problem(w, http.StatusUnprocessableEntity, "endpoint is longer than 128 characters")
	default:
		return true
	}
	return false
}

// readJSON decodes one JSON object from the body into dst, answering 413,
// 400 or 422 when it cannot.
func (s *reference) readJSON(w http.ResponseWriter, r *http.Request, dst any) bool {
	body := r.Body
	if !s.f.noBodyLimit {
		body = http.MaxBytesReader(w, r.Body, maxBody)
	}
	b, err := io.ReadAll(body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.problem(w, http.StatusRequestEntityTooLarge, "body over 64 KiB")
		return false
	case err != nil:
		s.problem(w, http.StatusBadRequest, "unreadable body")
		return false
	case len(b) == 0 && s.f.emptyBodyIs422:
		s.problem(w, http.StatusUnprocessableEntity, "endpoint is required")
		return false
	case len(b) == 0:
		s.problem(w, http.StatusBadRequest, "a JSON body is required")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var typeErr *json.UnmarshalTypeError
	if err := dec.Decode(dst); errors.As(err, &typeErr) && !s.f.typeErrors400 {
		s.problem(w, http.StatusUnprocessableEntity, "wrong type: "+err.Error())
		return false
	} else if err != nil {
		s.problem(w, http.StatusBadRequest, "unparsable JSON: "+err.Error())
		return false
	}
	if err := dec.Decode(&struct{}{}); !s.f.lenientJSON && !errors.Is(err, io.EOF) {
		s.problem(w, http.StatusBadRequest, "data after the JSON object")
		return false
	}
	return true
}

func (s *reference) user(w http.ResponseWriter, r *http.Request) (int64, bool) {
	uid, ok := s.userID(r.Header.Get("X-User-Id"))
	if !ok {
		s.problem(w, http.StatusBadRequest, "X-User-Id must be a positive decimal integer")
	}
	return uid, ok
}

func cutoff() string { return refNow.Add(-refWindow).Format(time.RFC3339Nano) }

func (s *reference) check(w http.ResponseWriter, r *http.Request) {
	uid, ok := s.user(w, r)
	if !ok {
		return
	}
	if s.f.chargesInvalid {
		n, err := s.fixedHit("attempts:"+strconv.FormatInt(uid, 10), 1)
		if err != nil {
			s.failed(w, err)
			return
		}
		if n > refCheckLimit {
			s.limited(w, "check", refCheckLimit, 0, refWindow, nil)
			return
		}
	}
	var in struct {
		Endpoint *string `json:"endpoint"`
	}
	if !s.readJSON(w, r, &in) || !s.endpointOK(w, in.Endpoint) {
		return
	}
	ep := ""
	if in.Endpoint != nil {
		ep = *in.Endpoint
	}
	n, err := s.scalar(`SELECT COUNT(*) FROM rate_events WHERE user_id = ? AND endpoint = ? AND created_at > ?`, uid, ep, cutoff())
	if err != nil {
		s.failed(w, err)
		return
	}
	allowed := n < refCheckLimit
	if allowed || s.f.recordsDenied {
		if _, err := s.exec(`INSERT INTO rate_events (user_id, endpoint, created_at) VALUES (?, ?, ?)`, uid, ep, refNow.Format(time.RFC3339Nano)); err != nil {
			s.failed(w, err)
			return
		}
	}
	var body map[string]any
	if allowed {
		body = map[string]any{"result": "ok", "user_id": uid, "endpoint": ep, "count": n + 1, "limit": refCheckLimit, "remaining": refCheckLimit - n - 1}
	}
	s.limited(w, "check", refCheckLimit, refCheckLimit-n-1, refWindow, body)
}

func (s *reference) rateStatus(w http.ResponseWriter, r *http.Request) {
	uid, ok := s.user(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	ep := q.Get("endpoint")
	if !s.endpointOK(w, &ep) {
		return
	}
	n, err := s.scalar(`SELECT COUNT(*) FROM rate_events WHERE user_id = ? AND endpoint = ? AND created_at > ?`, uid, ep, cutoff())
	if err != nil {
		s.failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"user_id": uid, "endpoint": ep, "count": n, "limit": refCheckLimit,
		"remaining": max(refCheckLimit-n, 0), "window_seconds": refWindow.Seconds()})
}

func (s *reference) isAdmin(given string) bool {
	switch {
	case s.f.noAdminCheck:
		return true
	case s.adminKey == "" && !s.f.notFailClosed:
		return false
	case s.f.foldKey:
		return strings.EqualFold(given, s.adminKey)
	}
	return subtle.ConstantTimeCompare([]byte(given), []byte(s.adminKey)) == 1
}

// adminStatus is 0 when r carries the admin key, else its refusal: 403, or
// 429 for a wrong key once its peer has sent refAdminFailures of them.
func (s *reference) adminStatus(r *http.Request) int {
	peer, _ := s.peerAddr(r) // a malformed forwarded entry keys by what was read: the reference only counts guesses
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f.throttleLocksOut && s.failures[peer] >= refAdminFailures {
		return http.StatusTooManyRequests
	}
	given := r.Header.Get("X-Admin-Key")
	switch {
	case s.isAdmin(given):
		return 0
	case given == "" || s.adminKey == "" || s.f.noAdminThrottle:
		return http.StatusForbidden
	}
	s.failures[peer]++
	if s.failures[peer] > refAdminFailures {
		return http.StatusTooManyRequests
	}
	return http.StatusForbidden
}

// refuseAdmin answers an admin refusal of adminStatus.
func (s *reference) refuseAdmin(w http.ResponseWriter, status int) {
	if status == http.StatusTooManyRequests {
		if !s.f.bare429 {
			w.Header().Set("Retry-After", strconv.Itoa(int(refWindow.Seconds())))
		}
		s.problemOf(w, status, "https://tollgate.example/problems/rate-limit-exceeded", "Too Many Requests", "too many wrong admin keys")
		return
	}
	s.problem(w, http.StatusForbidden, "admin key missing or wrong")
}

func (s *reference) reset(w http.ResponseWriter, r *http.Request) {
	raw := strings.TrimPrefix(r.URL.Path, "/rate/reset/")
	uid, valid := s.userID(raw)
	var id any = uid
	if s.f.uncheckedPathID {
		id, valid = raw, true
	}
	refusal := s.adminStatus(r)
	if s.f.resetBeforeCheck && valid {
		if _, err := s.deleteEvents(id, r); err != nil {
			s.failed(w, err)
			return
		}
	}
	if s.f.pathBeforeKey && !valid {
		s.problem(w, http.StatusNotFound, "no such user")
		return
	}
	if refusal != 0 {
		s.refuseAdmin(w, refusal)
		return
	}
	if !valid {
		s.problem(w, http.StatusNotFound, "no such user")
		return
	}
	n, err := s.deleteEvents(id, r)
	if err != nil {
		s.failed(w, err)
		return
	}
	var ep any
	if q := r.URL.Query(); q.Has("endpoint") {
		ep = q.Get("endpoint")
	}
	writeJSON(w, http.StatusOK, map[string]any{"user_id": id, "endpoint": ep, "deleted": n})
}

func (s *reference) deleteEvents(id any, r *http.Request) (int64, error) {
	q := r.URL.Query()
	switch {
	case s.f.resetIgnoresUser && q.Has("endpoint"):
		return s.exec(`DELETE FROM rate_events WHERE endpoint = ?`, q.Get("endpoint"))
	case s.f.resetIgnoresUser:
		return s.exec(`DELETE FROM rate_events`)
	case q.Has("endpoint"):
		return s.exec(`DELETE FROM rate_events WHERE user_id = ? AND endpoint = ?`, id, q.Get("endpoint"))
	}
	return s.exec(`DELETE FROM rate_events WHERE user_id = ?`, id)
}

func (s *reference) v1Check(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Policy string `json:"policy"`
		Key    string `json:"key"`
		Cost   *int64 `json:"cost"`
	}
	if !s.readJSON(w, r, &in) {
		return
	}
	limits := map[string]int64{"ping": refPingLimit, "check": refCheckLimit, "api": refAPILimit}
	limit, known := limits[in.Policy]
	if !known && s.f.defaultPolicy {
		in.Policy, limit, known = "api", refAPILimit, true
	}
	if (in.Policy == "ping" || in.Policy == "check") && !s.f.v1SeedPolicies {
		s.problem(w, http.StatusForbidden, "policy "+in.Policy+" is a seed route's: /v1/check may not charge it")
		return
	}
	cost := int64(1)
	if in.Cost != nil {
		cost = *in.Cost
	}
	switch {
	case !known:
		s.problem(w, http.StatusNotFound, "unknown policy")
		return
	case in.Key == "":
		s.problem(w, http.StatusUnprocessableEntity, "key is required")
		return
	case (cost < 1 || cost > limit) && !s.f.uncheckedCost:
		s.problem(w, http.StatusUnprocessableEntity, "cost must be 1..limit")
		return
	}
	key := in.Key
	if in.Policy != "ping" {
		key = "v1:" + in.Policy + ":" + key
	}
	n, err := s.fixedHit(key, cost) // as is on ping: shares the seed route's counters
	if err != nil {
		s.failed(w, err)
		return
	}
	reset := refNow.Truncate(refWindow).Add(refWindow).Sub(refNow)
	var body map[string]any
	if n <= limit {
		body = map[string]any{"allowed": true, "limit": limit, "remaining": limit - n, "reset_after": reset.Seconds(), "retry_after": 0}
	}
	s.limited(w, in.Policy, limit, limit-n, reset, body)
}

// forwardAuth answers /v1/forward-auth with the gateway rules scripts/atk.sh
// gives the strict target: paths under gwPrefix, and under gwHostPrefix for
// host gwHost, gwLimit per value of header gwKeyHeader. The original URI
// is read as Tollgate does (an absolute form's host first; ';' parameters
// dropped, %-escapes decoded, a backslash a slash, dot segments resolved,
// case ignored), the host without case, port or trailing dot.
func (s *reference) forwardAuth(w http.ResponseWriter, r *http.Request) {
	uri, host := r.Header.Get("X-Forwarded-Uri"), r.Header.Get("X-Forwarded-Host")
	if rest, ok := strings.CutPrefix(uri, "http://"); ok && !s.f.gwOriginOnly {
		end := strings.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		host, uri = rest[:end], "/"+strings.TrimPrefix(rest[end:], "/")
	}
	if !strings.HasPrefix(uri, "/") {
		s.problem(w, http.StatusBadRequest, "X-Forwarded-Uri is not an absolute path")
		return
	}
	p, _, _ := strings.Cut(uri, "?")
	if !s.f.gwKeepsParams {
		segs := strings.Split(p, "/")
		for i := range segs {
			segs[i], _, _ = strings.Cut(segs[i], ";")
		}
		p = strings.Join(segs, "/")
	}
	dec, err := url.PathUnescape(p)
	if err != nil {
		s.problem(w, http.StatusBadRequest, "X-Forwarded-Uri has a bad escape")
		return
	}
	if !s.f.gwLiteralPath {
		dec = strings.ToLower(strings.ReplaceAll(dec, `\`, "/"))
	}
	clean := path.Clean(dec)
	if strings.HasSuffix(dec, "/") {
		clean += "/"
	}
	if !s.f.gwHostExact {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
	}
	rule := -1
	switch {
	case strings.HasPrefix(clean, gwPrefix):
		rule = 0
	case host == gwHost && strings.HasPrefix(clean, gwHostPrefix):
		rule = 1
	}
	key := r.Header.Get(gwKeyHeader)
	if rule < 0 || key == "" {
		writeJSON(w, http.StatusOK, map[string]any{"allowed": true})
		return
	}
	n, err := s.fixedHit(fmt.Sprintf("gw:%d:%s", rule, key), 1)
	if err != nil {
		s.failed(w, err)
		return
	}
	var body map[string]any
	if n <= gwLimit {
		body = map[string]any{"allowed": true, "rule": rule, "key": "header:" + strings.ToLower(gwKeyHeader) + ":" + key}
	}
	s.limited(w, "atk_gw", gwLimit, gwLimit-n, time.Hour, body)
}

func (s *reference) envoyJSON(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"overallCode": "OK"})
}

func (s *reference) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "# reference\n")
}

func (s *reference) offenders(w http.ResponseWriter, r *http.Request) {
	if refusal := s.adminStatus(r); refusal != 0 {
		s.refuseAdmin(w, refusal)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"offenders": []any{}})
}
