package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/gateway"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/pkg/limiter/policyfile"
	"github.com/tollgate/tollgate/tools/lab/internal/tracefile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

const whatifAbout = `Replay an access log through the routes, policies and gateway rules of a
Tollgate configuration file and say who would have been refused.

Each request goes where the service would count it: GET or HEAD /ping to the
ping route's policies, POST /rate/check to the check route's (the body is not
logged: a client's calls count as one endpoint; --seed-routes=false for a log
of the traffic behind a gateway, where those paths are the application's
own and only the gateway rules apply), anything else to the first
gateway rule that matches its method, host and path (the service's own
matching code, pkg/limiter/gateway). A rule keyed by client counts the log's
client address, global one key for all; header:NAME cannot be read from a
log, so the next matching rule is tried, as the service does when the header
is absent. A request no rule matches is not counted. Policies are evaluated
in order on the library's memory store, with the log's times as the clock;
the first refusal by an enforcing policy refuses the request and stops the
evaluation, a shadow policy's refusal is only logged (the shadow view).

--trace is a common or combined access log (a vhost_combined log gives the
host), or a CSV whose header names its columns: time (RFC 3339 or Unix
nanoseconds), method, path, key, and optionally host. Requests are replayed
in time order (sorted: logs are written as requests end). A malformed line is
counted and skipped, the first few quoted with their line numbers; a time
outside 1970..2260 or a line over 1 MiB stops the run.`

// whatifConfig is what runWhatif was asked.
type whatifConfig struct {
	config, trace, format string
	top                   int
	maxRequests           int
	ipv6Prefix            int  // bits of an IPv6 address that name one client
	seedRoutes            bool // /ping and /rate/check go to the seed routes
}

func runWhatif(_ context.Context, args []string, stdout, stderr io.Writer) error {
	c := whatifConfig{format: formatAuto, top: 10, maxRequests: 20_000_000, ipv6Prefix: 64, seedRoutes: true}
	var o outputFlags
	fs := newFlagSet("whatif", whatifAbout, stdout, stderr)
	fs.StringVar(&c.config, "config", "", "the Tollgate configuration file (YAML); its policies, routes and gateway are read")
	fs.StringVar(&c.trace, "trace", "", "the access log to replay")
	fs.StringVar(&c.format, "format", c.format, "format of --trace: auto, csv or clf")
	fs.IntVar(&c.top, "top", c.top, "how many refused clients to list")
	fs.BoolVar(&c.seedRoutes, "seed-routes", c.seedRoutes, "send GET /ping and POST /rate/check to the seed routes' policies (false: a gateway's log, where they are the application's paths)")
	fs.IntVar(&c.ipv6Prefix, "ipv6-prefix", c.ipv6Prefix, "leading bits of an IPv6 client address that name one client, as the service's --ipv6-prefix (1..128)")
	fs.IntVar(&c.maxRequests, "max-requests", c.maxRequests, "most requests held for sorting (24 bytes each); a longer log stops with an error")
	o.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case c.config == "" || c.trace == "":
		return usageError{"lab whatif: --config and --trace are required"}
	case c.format != formatAuto && c.format != formatCSV && c.format != formatCLF:
		return usageError{fmt.Sprintf("lab whatif: --format %q: want auto, csv or clf", c.format)}
	case c.top < 1 || c.maxRequests < 1:
		return usageError{"lab whatif: --top and --max-requests: want at least 1"}
	case c.ipv6Prefix < 1 || c.ipv6Prefix > 128:
		return usageError{fmt.Sprintf("lab whatif: --ipv6-prefix %d: want 1..128", c.ipv6Prefix)}
	}
	data, err := os.ReadFile(c.config)
	if err != nil {
		return fmt.Errorf("lab whatif: %w", err)
	}
	set, err := policyfile.Read(data)
	if err != nil {
		return fmt.Errorf("lab whatif: %s: %w", c.config, err)
	}
	f, err := os.Open(c.trace)
	if err != nil {
		return fmt.Errorf("lab whatif: %w", err)
	}
	defer f.Close()
	r, err := whatif(set, f, c)
	if err != nil {
		return err
	}
	r.Config, r.Trace = filepath.Base(c.config), filepath.Base(c.trace)
	if o.out != "" {
		if err := r.plot(o.out); err != nil {
			return err
		}
	}
	return o.emit(stdout, "whatif.md", r, r.writeMarkdown)
}

// whatifPlan is one place a request can be counted: a seed route or a
// gateway rule, and its policies in evaluation order.
type whatifPlan struct {
	name     string
	key      string // what the policies count
	policies []limiter.Policy
}

// whatifRequest is one parsed request, matched: its time, the plan that
// counts it and its key and client (indexes into whatifRun's names).
type whatifRequest struct {
	at          int64
	plan        int32
	key, client uint32
}

// globalKey is whatifRequest.key for a rule keyed `global`: one counter for
// every client.
const globalKey = ^uint32(0)

// whatifRun reads a log into matched requests.
type whatifRun struct {
	plans    []whatifPlan
	rules    *gateway.Rules
	rulePlan []int32 // plan of each gateway rule
	clients  *httplimit.Clients
	// seedRoutes: /ping and /rate/check are the seed routes' (else only
	// the gateway rules count them).
	seedRoutes bool
	names      []string
	ids        map[string]uint32
	reqs       []whatifRequest
	// What the parse met.
	lines, parsed, unmatched, headerOnly, badPath, bad int64
	examples                                           []string
}

func (w *whatifRun) intern(s string) uint32 {
	id, ok := w.ids[s]
	if !ok {
		id = uint32(len(w.names))
		w.ids[s] = id
		w.names = append(w.names, s)
	}
	return id
}

// newWhatifRun resolves the set's routes and rules into plans.
func newWhatifRun(set *policyfile.Set, ipv6Prefix int, seedRoutes bool) (*whatifRun, error) {
	rules, err := gateway.New(set.Gateway)
	if err != nil {
		return nil, fmt.Errorf("lab whatif: %w", err)
	}
	clients, err := httplimit.NewClients(httplimit.IPv6Prefix(ipv6Prefix))
	if err != nil {
		return nil, fmt.Errorf("lab whatif: %w", err)
	}
	w := &whatifRun{rules: rules, clients: clients, seedRoutes: seedRoutes, ids: map[string]uint32{}}
	resolve := func(names []string) []limiter.Policy {
		ps := make([]limiter.Policy, len(names))
		for i, n := range names {
			ps[i] = set.Policies[n]
		}
		return ps
	}
	w.plans = append(w.plans,
		whatifPlan{name: "GET /ping (route ping)", key: "client", policies: resolve(set.RoutePolicies[policyfile.RoutePing])},
		whatifPlan{name: "POST /rate/check (route check)", key: "client", policies: resolve(set.RoutePolicies[policyfile.RouteCheck])})
	for i := range rules.Len() {
		r := rules.Rule(i)
		w.rulePlan = append(w.rulePlan, int32(len(w.plans)))
		w.plans = append(w.plans, whatifPlan{name: fmt.Sprintf("gateway[%d] %s", i, matchText(r.Match)), key: r.Key.String(), policies: resolve(r.Policies)})
	}
	return w, nil
}

// matchText describes a rule's match as a person reads it.
func matchText(m gateway.Match) string {
	parts := []string{cmp.Or(m.Method, "any method")}
	if m.Host != "" {
		parts = append(parts, "host "+m.Host)
	}
	switch {
	case m.Path != "":
		parts = append(parts, m.Path)
	case m.PathPrefix != "":
		parts = append(parts, m.PathPrefix+"*")
	default:
		parts = append(parts, "any path")
	}
	return strings.Join(parts, " ")
}

// add matches one request and keeps it when a route or rule counts it.
func (w *whatifRun) add(r tracefile.Request) {
	method := strings.ToUpper(r.Method)
	// As /v1/forward-auth reads it: an absolute-form target's host wins.
	host, path, err := gateway.ParseTarget(r.Target)
	if err != nil {
		w.badPath++
		return
	}
	if host == "" {
		host = r.Host
	}
	// A client address is named as the service keys it (httplimit.Clients:
	// IPv6 by its prefix, IPv4-mapped folded); a CSV key as written. A key
	// the store would refuse is a bad line, not the end of the run.
	name := r.Client
	if a, err := netip.ParseAddr(name); err == nil {
		name = w.clients.AddrKey(a)
	}
	if len(name) > limiter.MaxKeyLen {
		w.bad++
		return
	}
	// Clients are interned only when counted: unmatched lines cost nothing.
	keep := func(plan int32, global bool) {
		client := w.intern(name)
		key := client
		if global {
			key = globalKey
		}
		w.reqs = append(w.reqs, whatifRequest{at: r.At, plan: plan, key: key, client: client})
	}
	switch {
	case !w.seedRoutes:
	case (method == "GET" || method == "HEAD") && path == "/ping":
		keep(0, false)
		return
	case method == "POST" && path == "/rate/check":
		keep(1, false)
		return
	}
	for i := w.rules.Match(method, host, path, 0); i >= 0; i = w.rules.Match(method, host, path, i+1) {
		switch w.rules.Rule(i).Key.Kind {
		case gateway.KeyClient:
			keep(w.rulePlan[i], false)
		case gateway.KeyGlobal:
			keep(w.rulePlan[i], true)
		default: // a header: no log holds it
			w.headerOnly++
			continue
		}
		return
	}
	w.unmatched++
}

// read parses the log, keeping every request a route or rule counts.
func (w *whatifRun) read(in io.Reader, format string, maxRequests int) error {
	lines := &fileSource{r: bufio.NewReaderSize(in, 1<<16)} // its line reader: numbered, bounded by maxLine
	var csv *tracefile.RequestCSV
	for {
		line, err := lines.readLine()
		if line == nil {
			if err != nil {
				return fmt.Errorf("lab whatif: %w", err)
			}
			break
		}
		if format == formatAuto {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			format = formatCSV
			if tracefile.LooksLikeCLF(line) {
				format = formatCLF
			}
		}
		var r tracefile.Request
		switch {
		case format == formatCSV && csv == nil:
			if csv, err = tracefile.NewRequestCSV(line); err != nil {
				return fmt.Errorf("lab whatif: trace: line %d: %w", lines.line, err)
			}
			continue
		case format == formatCSV:
			err = csv.Parse(line, &r)
		default:
			err = tracefile.ParseAccess(line, &r)
		}
		switch {
		case errors.Is(err, tracefile.ErrSkip):
			continue
		case errors.Is(err, tracefile.ErrOutOfRange):
			return fmt.Errorf("lab whatif: trace: line %d: %w", lines.line, err)
		case err != nil:
			w.bad++
			if len(w.examples) < maxBadExamples {
				w.examples = append(w.examples, fmt.Sprintf("line %d: %v", lines.line, err))
			}
			continue
		}
		w.parsed++
		w.add(r)
		if len(w.reqs) > maxRequests {
			return fmt.Errorf("lab whatif: trace: line %d: more than %d requests to replay (--max-requests)", lines.line, maxRequests)
		}
	}
	w.lines = lines.line
	if w.parsed == 0 {
		msg := "no request in the log"
		if w.bad > 0 {
			msg = fmt.Sprintf("no readable request in the log: %d malformed lines (%s)", w.bad, strings.Join(w.examples, "; "))
		}
		return fmt.Errorf("lab whatif: trace: %s", msg)
	}
	return nil
}

// peakSpan is the span over which a client's peak rate is measured.
const peakSpan = time.Minute

// timelineBins is about how many bins the timeline has.
const timelineBins = 100

// whatifReport is what lab whatif prints.
type whatifReport struct {
	Config string `json:"config"`
	Trace  string `json:"trace"`
	// Lines read, requests parsed from them, and what became of those:
	// replayed (a route or a rule counts them), matched by no rule, or
	// with a path the service refuses; HeaderOnly counts the times a
	// matching rule keyed by a header was passed over.
	Lines      int64     `json:"lines"`
	Requests   int64     `json:"requests"`
	Replayed   int64     `json:"replayed"`
	Unmatched  int64     `json:"unmatched"`
	HeaderOnly int64     `json:"header_only"`
	BadPath    int64     `json:"bad_path"`
	Malformed  int64     `json:"malformed"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	// Refused requests: refused by an enforcing policy.
	Refused    int64             `json:"refused"`
	Policies   []whatifPolicyRow `json:"policies"`
	Routes     []whatifRouteRow  `json:"routes"`
	TopClients []whatifClientRow `json:"top_refused_clients"`
	Shadow     []whatifShadowRow `json:"shadow"`
	Timeline   whatifTimeline    `json:"timeline"`
	Notes      []string          `json:"notes,omitempty"`
	Plots      []string          `json:"plots,omitempty"`
}

// whatifPolicyRow is one policy's decisions: requests it was asked about
// (a policy after an enforcing refusal is not), the ones it refused
// (enforced) and, for a shadow policy, the ones it would have refused.
type whatifPolicyRow struct {
	Policy        string  `json:"policy"`
	Algorithm     string  `json:"algorithm"`
	Limit         int64   `json:"limit"`
	WindowSeconds float64 `json:"window_seconds"`
	Shadow        bool    `json:"shadow"`
	Evaluated     int64   `json:"evaluated"`
	Refused       int64   `json:"refused"`
	ShadowRefused int64   `json:"shadow_refused"`
}

// whatifRouteRow is one seed route or gateway rule.
type whatifRouteRow struct {
	Route    string   `json:"route"`
	Key      string   `json:"key"`
	Policies []string `json:"policies"`
	Requests int64    `json:"requests"`
	Refused  int64    `json:"refused"`
}

// whatifClientRow is one client: its requests, its refusals (by a shadow
// policy in the shadow view: the ones it would have refused) and the first
// of them, and its peak rate, the most requests it sent within one minute.
type whatifClientRow struct {
	Client        string    `json:"client"`
	Requests      int64     `json:"requests"`
	Refused       int64     `json:"refused"`
	PeakPerMinute int64     `json:"peak_per_minute"`
	FirstRefused  time.Time `json:"first_refused"`
}

// whatifShadowRow is what one shadow policy would have logged: the
// decisions the service counts as shadow_limited (let through).
type whatifShadowRow struct {
	Policy     string            `json:"policy"`
	Refusals   int64             `json:"would_refuse"`
	Clients    int               `json:"clients"`
	First      time.Time         `json:"first"`
	Last       time.Time         `json:"last"`
	TopClients []whatifClientRow `json:"top_clients"`
}

// whatifTimeline counts refusals per bin of BinSeconds from From: enforced
// ones per policy, and a shadow policy's would-be ones.
type whatifTimeline struct {
	BinSeconds int64              `json:"bin_seconds"`
	Refused    map[string][]int64 `json:"refused"`
}

// clientState is a client's figures during the replay.
type clientState struct {
	requests, peak int64
	refused        refusals
	recent         []int64 // its request times in the last peakSpan
}

// refusals counts a client's refusals and keeps the time of the first.
type refusals struct{ n, first int64 }

func (r refusals) add(at int64) refusals {
	if r.n == 0 {
		r.first = at
	}
	r.n++
	return r
}

func whatif(set *policyfile.Set, in io.Reader, c whatifConfig) (whatifReport, error) {
	w, err := newWhatifRun(set, c.ipv6Prefix, c.seedRoutes)
	if err != nil {
		return whatifReport{}, err
	}
	if err := w.read(in, c.format, c.maxRequests); err != nil {
		return whatifReport{}, err
	}
	return w.replay(c.top)
}

// replay decides every kept request in time order and builds the report.
func (w *whatifRun) replay(top int) (whatifReport, error) {
	slices.SortStableFunc(w.reqs, func(a, b whatifRequest) int { return cmp.Compare(a.at, b.at) })
	r := whatifReport{Lines: w.lines, Requests: w.parsed, Replayed: int64(len(w.reqs)), Unmatched: w.unmatched,
		HeaderOnly: w.headerOnly, BadPath: w.badPath, Malformed: w.bad}
	r.Timeline.Refused = map[string][]int64{}
	if len(w.reqs) > 0 {
		first, last := w.reqs[0].at, w.reqs[len(w.reqs)-1].at
		r.From, r.To = time.Unix(0, first).UTC(), time.Unix(0, last).UTC()
		r.Timeline.BinSeconds = binSeconds(time.Duration(last - first))
	}
	bin := func(at int64) int {
		return int((at - r.From.UnixNano()) / (r.Timeline.BinSeconds * int64(time.Second)))
	}
	nbins := 0
	if len(w.reqs) > 0 {
		nbins = bin(r.To.UnixNano()) + 1
	}

	policies := map[string]*whatifPolicyRow{}
	for _, p := range w.plans {
		r.Routes = append(r.Routes, whatifRouteRow{Route: p.name, Key: p.key, Policies: names(p.policies)})
		for _, q := range p.policies {
			if policies[q.Name] == nil {
				policies[q.Name] = &whatifPolicyRow{Policy: q.Name, Algorithm: string(q.Algorithm), Limit: q.Limit, WindowSeconds: q.Window.Seconds(), Shadow: q.Shadow}
			}
		}
	}
	clients := make([]clientState, len(w.names))
	shadowBy := map[string]map[uint32]refusals{} // shadow policy -> client -> its would-be refusals
	shadows := map[string]*whatifShadowRow{}
	series := func(name string) []int64 {
		s, ok := r.Timeline.Refused[name]
		if !ok {
			s = make([]int64, nbins)
			r.Timeline.Refused[name] = s
		}
		return s
	}

	store := memstore.New(memstore.WithMaxKeys(memoryMaxKeys))
	defer store.Close()
	ctx := context.Background()
	var decisions []limiter.Decision // of one request, reused
	for _, q := range w.reqs {
		cs := &clients[q.client]
		cs.requests++
		cs.recent = append(cs.recent, q.at)
		drop := 0
		for drop < len(cs.recent) && cs.recent[drop] <= q.at-int64(peakSpan) {
			drop++
		}
		cs.recent = cs.recent[drop:]
		cs.peak = max(cs.peak, int64(len(cs.recent)))

		plan := &w.plans[q.plan]
		route := &r.Routes[q.plan]
		route.Requests++
		key := limiter.Key{Subject: "global", Scope: "global"} // no client's: their scope is empty
		if q.key != globalKey {
			key = limiter.Key{Subject: w.names[q.key]}
		}
		now := time.Unix(0, q.at).UTC()
		ds, e, err := charge(ctx, store, plan.policies, key, 1, now, decisions[:0])
		if err != nil {
			return whatifReport{}, err
		}
		decisions = ds
		for i, d := range ds {
			p := plan.policies[i]
			policies[p.Name].Evaluated++
			if d.Allowed {
				continue
			}
			series(p.Name)[bin(q.at)]++
			if !p.Shadow {
				continue // the request's refusal: counted below
			}
			policies[p.Name].ShadowRefused++
			s := shadows[p.Name]
			if s == nil {
				s = &whatifShadowRow{Policy: p.Name, First: now}
				shadows[p.Name], shadowBy[p.Name] = s, map[uint32]refusals{}
			}
			s.Refusals++
			s.Last = now
			shadowBy[p.Name][q.client] = shadowBy[p.Name][q.client].add(q.at)
		}
		if i := e.Refused(); i >= 0 {
			policies[plan.policies[i].Name].Refused++
			route.Refused++
			r.Refused++
			cs.refused = cs.refused.add(q.at)
		}
	}
	if n := store.Evictions(); n > 0 {
		return whatifReport{}, fmt.Errorf("lab whatif: the memory store evicted %d keys: the figures would be wrong", n)
	}

	for _, name := range slices.Sorted(maps.Keys(policies)) {
		r.Policies = append(r.Policies, *policies[name])
	}
	row := func(id uint32, refused refusals) whatifClientRow {
		cs := clients[id]
		return whatifClientRow{Client: w.names[id], Requests: cs.requests, Refused: refused.n, PeakPerMinute: cs.peak,
			FirstRefused: time.Unix(0, refused.first).UTC()}
	}
	refusedBy := map[uint32]refusals{}
	for id, cs := range clients {
		if cs.refused.n > 0 {
			refusedBy[uint32(id)] = cs.refused
		}
	}
	r.TopClients = topClients(refusedBy, top, row)
	for _, name := range slices.Sorted(maps.Keys(shadows)) {
		s := shadows[name]
		s.Clients = len(shadowBy[name])
		s.TopClients = topClients(shadowBy[name], top, row)
		r.Shadow = append(r.Shadow, *s)
	}
	if w.bad > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d malformed lines skipped (%s)", w.bad, strings.Join(w.examples, "; ")))
	}
	if w.headerOnly > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d times a rule keyed by a header matched: a log holds no header, so the next rule was tried", w.headerOnly))
	}
	if w.badPath > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d requests with a target the service would answer 400 (not an absolute path, a bad %%-escape, a control character): not counted", w.badPath))
	}
	return r, nil
}

// charge decides one request as the service would: key charged with cost
// against ps in order at now on store, by the rule the service and the
// middleware follow (limiter.Evaluation), its decisions appended to ds.
func charge(ctx context.Context, store limiter.Store, ps []limiter.Policy, key limiter.Key, cost int64, now time.Time, ds []limiter.Decision) ([]limiter.Decision, limiter.Evaluation, error) {
	ds, e, err := limiter.AllowInOrder(ctx, store, ps, limiter.Request{Key: key, Cost: cost, Now: now}, ds)
	if err != nil {
		return ds, e, fmt.Errorf("lab whatif: policy %s: %w", ps[len(ds)].Name, err)
	}
	return ds, e, nil
}

// topClients returns the n clients with the most refusals in by (ties by
// name), as rows.
func topClients(by map[uint32]refusals, n int, row func(uint32, refusals) whatifClientRow) []whatifClientRow {
	out := make([]whatifClientRow, 0, len(by))
	for id, refused := range by {
		out = append(out, row(id, refused))
	}
	slices.SortFunc(out, func(a, b whatifClientRow) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(a.Client, b.Client))
	})
	return out[:min(n, len(out))]
}

// names returns the policies' names.
func names(ps []limiter.Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// binSeconds is the timeline's bin for a log spanning span: a round
// length that gives at most about timelineBins bins.
func binSeconds(span time.Duration) int64 {
	for _, b := range []int64{1, 5, 10, 30, 60, 300, 600, 1800, 3600, 6 * 3600, 24 * 3600} {
		if span <= time.Duration(b*timelineBins)*time.Second {
			return b
		}
	}
	return int64(span/time.Second)/timelineBins + 1
}

// writeMarkdown prints the report for a person.
func (r whatifReport) writeMarkdown(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("# What if %s had been in front of %s?\n\n", r.Config, r.Trace)
	ew.printf("%d lines, %d requests from %s to %s; %d counted by a route or a gateway rule (%d matched none).\n",
		r.Lines, r.Requests, r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), r.Replayed, r.Unmatched)
	ew.printf("**%d refused** (%s of the requests counted).\n\n", r.Refused, percent(share(r.Refused, r.Replayed)))
	ew.printf("## Per policy\n\n| policy | algorithm | limit | window | evaluated | refused | shadow: would refuse |\n|---|---|--:|--:|--:|--:|--:|\n")
	for _, p := range r.Policies {
		shadow := "-"
		if p.Shadow {
			shadow = fmt.Sprint(p.ShadowRefused)
		}
		ew.printf("| %s | %s | %d | %s | %d | %d | %s |\n", p.Policy, p.Algorithm, p.Limit, time.Duration(p.WindowSeconds*float64(time.Second)), p.Evaluated, p.Refused, shadow)
	}
	ew.printf("\n## Per route\n\n| route or rule | key | policies | requests | refused |\n|---|---|---|--:|--:|\n")
	for _, rt := range r.Routes {
		ew.printf("| %s | %s | %s | %d | %d |\n", rt.Route, rt.Key, strings.Join(rt.Policies, ", "), rt.Requests, rt.Refused)
	}
	ew.printf("\n## Top refused clients\n\n")
	writeClients(ew, r.TopClients, "refused")
	ew.printf("\n## Shadow view\n\n")
	if len(r.Shadow) == 0 {
		ew.printf("No shadow policy refused anything (or none is configured).\n")
	}
	for _, s := range r.Shadow {
		ew.printf("`%s` would have refused %d requests of %d clients, from %s to %s (logged as shadow_limited, let through):\n\n",
			s.Policy, s.Refusals, s.Clients, s.First.Format(time.RFC3339), s.Last.Format(time.RFC3339))
		writeClients(ew, s.TopClients, "would refuse")
		ew.printf("\n")
	}
	for _, n := range r.Notes {
		ew.printf("\nNote: %s.\n", n)
	}
	for _, p := range r.Plots {
		ew.printf("\n![%s](%s)\n", p, p)
	}
	return ew.err
}

// writeClients prints client rows; refused names their refusals.
func writeClients(ew *errWriter, rows []whatifClientRow, refused string) {
	if len(rows) == 0 {
		ew.printf("None.\n")
		return
	}
	ew.printf("| client | requests | %[1]s | peak per minute | first %[1]s |\n|---|--:|--:|--:|---|\n", refused)
	for _, c := range rows {
		ew.printf("| %s | %d | %d | %d | %s |\n", c.Client, c.Requests, c.Refused, c.PeakPerMinute, c.FirstRefused.Format(time.RFC3339))
	}
}

// share is n/of, 0 when of is 0.
func share(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// plot writes the timeline of refusals into dir as whatif-timeline.png.
func (r *whatifReport) plot(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	p := plot.New()
	p.Add(plotter.NewGrid())
	p.Title.Text = fmt.Sprintf("%s on %s: %d of %d requests refused (%s)", r.Config, r.Trace, r.Refused, r.Replayed, percent(share(r.Refused, r.Replayed)))
	if len(r.Shadow) > 0 {
		var would []string
		for _, s := range r.Shadow {
			would = append(would, fmt.Sprintf("%s %d", s.Policy, s.Refusals))
		}
		p.Title.Text += "\nshadow policies would have refused: " + strings.Join(would, ", ")
	}
	p.X.Label.Text = "minutes since " + r.From.Format(time.RFC3339)
	p.Y.Label.Text = fmt.Sprintf("refusals per %s", time.Duration(r.Timeline.BinSeconds)*time.Second)
	top := 1.0
	for i, row := range r.Policies {
		counts, ok := r.Timeline.Refused[row.Policy]
		if !ok {
			continue
		}
		xy := make(plotter.XYs, len(counts))
		for j, n := range counts {
			xy[j] = plotter.XY{X: float64(int64(j)*r.Timeline.BinSeconds) / 60, Y: float64(n)}
			top = max(top, float64(n))
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		l.Color, l.Width = plotutil.Color(i), vg.Points(1.5)
		label := row.Policy + " (refused)"
		if row.Shadow {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			label = row.Policy + " (shadow: would refuse)"
		}
		p.Add(l)
		p.Legend.Add(label, l)
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, 1.3*top // headroom for the legend
	name := "whatif-timeline.png"
	if err := save(p, filepath.Join(dir, name)); err != nil {
		return err
	}
	r.Plots = append(r.Plots, name)
	return nil
}
