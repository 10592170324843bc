// Command atk replays Tollgate's attack cases against a running service
// over HTTP and prints a PASS/FAIL table.
//
// It imports nothing of Tollgate: it is a hostile client of the contract
// in docs/design.md, nothing more. Exit status: 0 when every case passes (skips
// allowed), 1 when any fails, 2 for bad flags, an unreachable or unhealthy
// target, or a report file that cannot be written.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

// Exit statuses.
const (
	exitPass  = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usageHead = `usage: atk --target URL [flags]

atk replays the attack cases ATK-01..%s against a running Tollgate service
and prints a table: id, name, PASS/FAIL/SKIP, and for each failure what was
expected and what came back.

The suite CONSUMES RATE-LIMIT BUDGET on the target: every case uses fresh
random user ids and keys (from --seed), but /ping is limited per peer
address, so the /ping cases exhaust the budget of the address atk connects
from for the current window. Point it at a test instance. Reusing a --seed
against the same target within a window reuses its ids, so counts collide:
replay a seed only against a fresh service.

Exit status: 0 all passed (skips allowed), 1 a case failed, 2 bad flags,
target unreachable or unhealthy (GET /healthz is tried first), or a report
file that cannot be written.

flags:
`

// options are the parsed flags.
type options struct {
	target, closed, keyEnv, only, jsonPath, junitPath string
	strict, strictInternal, v1Policy, trustedProxy    string
	timeout                                           time.Duration
	seed                                              uint64
	list                                              bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("atk", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.target, "target", "", "base URL of the service under test, e.g. http://127.0.0.1:8080 (required)")
	fs.StringVar(&o.closed, "closed-target", "", "base URL of a second service started WITHOUT an admin key;\nthe fail-closed cases run against it, and are SKIP without it")
	fs.StringVar(&o.strict, "strict-target", "", "base URL of a third service that believes no client-asserted identity (X-Client-Key,\nX-User-Id) from untrusted peers and serves /v1/check, /json, /metrics and /admin/*\non an internal listener only; the cases that need it are SKIP without it")
	fs.StringVar(&o.strictInternal, "strict-internal-target", "", "base URL of the strict service's internal listener (optional)")
	fs.StringVar(&o.trustedProxy, "trusted-proxy", "", "a loopback address (not 127.0.0.1) that --target lists in its --trusted-proxies; the forwarding\ncases connect from it as a proxy and are SKIP without it")
	fs.StringVar(&o.v1Policy, "v1-policy", "api", "a policy of --target that /v1/check may charge (not one of the seed routes')")
	fs.StringVar(&o.keyEnv, "admin-key-env", "LIMITER_ADMIN_KEY", "name of the environment variable holding the target's admin key\n(never passed as a flag); cases that need it are SKIP when it is unset")
	fs.StringVar(&o.only, "only", "", "comma-separated case ids to run, e.g. ATK-01,ATK-18 (default: all)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.junitPath, "junit", "", "also write the results as JUnit XML to this file, for CI systems")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "timeout of each HTTP request")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the random user ids and keys (default 0: pick one); printed, so a run can be replayed")
	fs.BoolVar(&o.list, "list", false, "list the cases (id, name, description) and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, usageHead, Cases[len(Cases)-1].ID)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("atk: unexpected argument %q", fs.Arg(0))
	}
	if o.list {
		return o, nil
	}
	if o.timeout <= 0 {
		return o, fmt.Errorf("atk: --timeout must be positive, got %s", o.timeout)
	}
	var err error
	if o.target, err = baseURL("--target", o.target, true); err != nil {
		return o, err
	}
	if o.closed, err = baseURL("--closed-target", o.closed, false); err != nil {
		return o, err
	}
	if o.strict, err = baseURL("--strict-target", o.strict, false); err != nil {
		return o, err
	}
	if o.strictInternal, err = baseURL("--strict-internal-target", o.strictInternal, false); err != nil {
		return o, err
	}
	if o.trustedProxy != "" {
		if a, err := netip.ParseAddr(o.trustedProxy); err != nil || !a.Is4() || !a.IsLoopback() || a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
			return o, fmt.Errorf("atk: --trusted-proxy %q: want an IPv4 loopback address other than 127.0.0.1", o.trustedProxy)
		}
	}
	if o.strictInternal != "" && o.strict == "" {
		return o, errors.New("atk: --strict-internal-target needs --strict-target")
	}
	return o, nil
}

// baseURL checks that s is an absolute http(s) URL and drops a trailing
// slash.
func baseURL(flagName, s string, required bool) (string, error) {
	if s == "" {
		if required {
			return "", fmt.Errorf("atk: %s is required", flagName)
		}
		return "", nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return "", fmt.Errorf("atk: %s %q: want an http(s) base URL like http://127.0.0.1:8080", flagName, s)
	}
	return strings.TrimSuffix(s, "/"), nil
}

// selectCases returns the cases named in only (all when empty), in table
// order, or an error naming an unknown id.
func selectCases(only string) ([]Case, error) {
	if strings.TrimSpace(only) == "" {
		return Cases, nil
	}
	want := map[string]bool{}
	for id := range strings.SplitSeq(only, ",") {
		id = strings.ToUpper(strings.TrimSpace(id))
		if !slices.ContainsFunc(Cases, func(c Case) bool { return c.ID == id }) {
			return nil, fmt.Errorf("atk: --only: unknown case %q", id)
		}
		want[id] = true
	}
	var out []Case
	for _, c := range Cases {
		if want[c.ID] {
			out = append(out, c)
		}
	}
	return out, nil
}

// run is the whole command; it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitPass
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if o.list {
		for _, c := range Cases {
			fmt.Fprintf(stdout, "%s — %s — %s\n", c.ID, c.Name, c.Desc)
		}
		return exitPass
	}
	cases, err := selectCases(o.only)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if o.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		o.seed = binary.LittleEndian.Uint64(b[:])>>1 | 1
	}
	proxy, _ := netip.ParseAddr(o.trustedProxy) // checked by parseFlags; "" is the zero Addr
	cfg := &Config{
		Target: o.target, Closed: o.closed, Strict: o.strict, StrictInternal: o.strictInternal,
		AdminKey: getenv(o.keyEnv), V1Policy: o.v1Policy, Seed: o.seed,
		Client: &http.Client{Timeout: o.timeout}, TrustedProxy: proxy,
	}
	for _, base := range []string{cfg.Target, cfg.Closed, cfg.Strict, cfg.StrictInternal} {
		if base == "" {
			continue
		}
		if err := healthy(ctx, cfg.Client, base); err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
	}
	keyState := "unset"
	if cfg.AdminKey != "" {
		keyState = "set"
	}
	fmt.Fprintf(stdout, "atk: target %s, closed target %s, strict target %s, admin key $%s %s, seed %d\n\n",
		cfg.Target, orNone(cfg.Closed), orNone(cfg.Strict), o.keyEnv, keyState, cfg.Seed)

	started := time.Now()
	rep := NewReport(cfg, started, Run(ctx, cfg, cases))
	if err := rep.WriteTable(stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	for _, out := range []struct {
		path  string
		write func(io.Writer) error
	}{{o.jsonPath, rep.WriteJSON}, {o.junitPath, rep.WriteJUnit}} {
		if out.path == "" {
			continue
		}
		if err := writeFile(out.path, out.write); err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
	}
	if rep.Failed > 0 {
		return exitFail
	}
	return exitPass
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// healthy asks base/healthz and wants 200.
func healthy(ctx context.Context, c *http.Client, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("atk: %s: %w", base, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("atk: target %s unreachable: %w", base, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("atk: target %s not healthy: GET /healthz answered %s", base, resp.Status)
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("atk: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("atk: %w", err)
	}
	return nil
}
