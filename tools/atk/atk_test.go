package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testKey = "Test-Admin-Key-7f3a"

// TestMain lets the test binary stand in for bin/limiter and bin/atk when
// it is started under those names (by TestScript through atk.sh).
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "limiter":
		os.Exit(fakeLimiter(os.Args[1:]))
	case "atk":
		os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// fakeLimiter serves the reference on --addr with the SQLite file
// --sqlite-path and the admin key from LIMITER_ADMIN_KEY, until SIGTERM;
// with --internal-addr, a strict reference on both addresses.
// ATK_FAKE_MODE=exit makes it fail at start, =all200 serves a broken one.
func fakeLimiter(args []string) int {
	mode := os.Getenv("ATK_FAKE_MODE")
	if mode == "exit" {
		fmt.Fprintln(os.Stderr, "fake limiter: refusing to start")
		return 1
	}
	fs := flag.NewFlagSet("limiter", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "")
	path := fs.String("sqlite-path", "limiter.db", "")
	internal := fs.String("internal-addr", "", "")
	fs.String("store", "sqlite", "")
	fs.String("identity-headers", "any", "")
	fs.String("envoy-config", "", "")
	fs.String("config", "", "") // the gateway rules of ATK-45..47: the reference has them built in
	proxy := fs.String("trusted-proxies", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ref, err := openReference(*path, os.Getenv("LIMITER_ADMIN_KEY"), flaws{all200: mode == "all200"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ref.strict = *internal != ""
	ref.proxy, _ = netip.ParseAddr(*proxy) // the script's address, or none
	var servers []*http.Server
	for _, l := range []struct {
		addr   string
		public bool
	}{{*addr, true}, {*internal, false}} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "fake limiter listening on %s\n", l.addr)
		srv := &http.Server{Handler: ref.listener(l.public), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // Serve returns when Close is called
		servers = append(servers, srv)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	<-ctx.Done()
	stop()
	for _, srv := range servers {
		srv.Close()
	}
	return 0
}

// testConfig returns a run against a reference with flaws f; all adds the
// closed and the strict targets.
func testConfig(t *testing.T, key string, f flaws, all bool) *Config {
	cfg := &Config{Target: newReference(t, key, f), AdminKey: key, V1Policy: "api", Seed: 7, Client: &http.Client{Timeout: 5 * time.Second}}
	if all {
		cfg.TrustedProxy = refProxy
		cfg.Closed = newReference(t, "", f)
		cfg.Strict, cfg.StrictInternal = newStrictReference(t, key, f)
	}
	return cfg
}

func byOutcome(results []Result, o Outcome) []string {
	var ids []string
	for _, r := range results {
		if r.Outcome == o {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

func failureText(results []Result) string {
	var b strings.Builder
	for _, r := range results {
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "%s: %s\n", r.ID, f)
		}
	}
	return b.String()
}

func TestCasesTableIsWellFormed(t *testing.T) {
	require.GreaterOrEqual(t, len(Cases), 24)
	seen := map[string]bool{}
	for i, c := range Cases {
		assert.Equal(t, fmt.Sprintf("ATK-%02d", i+1), c.ID, "ids are numbered in table order")
		assert.False(t, seen[c.ID], "%s appears twice", c.ID)
		seen[c.ID] = true
		assert.NotEmpty(t, c.Name, c.ID)
		assert.NotEmpty(t, c.Desc, c.ID)
		assert.NotContains(t, c.Desc, "\n", "%s: a description is one line", c.ID)
		assert.True(t, c.Steps != nil || c.Then != nil, "%s sends nothing", c.ID)
	}
}

func TestSuitePassesAgainstReference(t *testing.T) {
	results := Run(t.Context(), testConfig(t, testKey, flaws{}, true), Cases)
	require.Len(t, results, len(Cases))
	assert.Equal(t, len(Cases), len(byOutcome(results, Pass)), failureText(results))
	for _, r := range results {
		assert.Empty(t, r.Notes, "%s: a run with the key and a closed target needs no notes", r.ID)
	}
}

func TestSkipsAndNotesWithoutKeyOrClosedTarget(t *testing.T) {
	results := Run(t.Context(), testConfig(t, "", flaws{}, false), Cases)
	assert.Equal(t, []string{"ATK-24", "ATK-32", "ATK-34", "ATK-36", "ATK-39", "ATK-40", "ATK-41", "ATK-42", "ATK-43", "ATK-44", "ATK-45", "ATK-46", "ATK-47"}, byOutcome(results, Skip))
	assert.Empty(t, byOutcome(results, Fail), failureText(results))
	notes := map[string][]string{}
	for _, r := range results {
		if len(r.Notes) > 0 {
			notes[r.ID] = r.Notes
		}
	}
	assert.Contains(t, notes["ATK-24"][0], "admin key is unset")
	assert.Contains(t, notes["ATK-32"][0], "no --closed-target")
	assert.Contains(t, notes["ATK-36"][0], "no --strict-target")
	assert.Contains(t, notes["ATK-41"][0], "no --trusted-proxy")
	for _, id := range []string{"ATK-07", "ATK-08", "ATK-09", "ATK-27"} {
		require.NotEmpty(t, notes[id], id)
		assert.Contains(t, notes[id][0], "expected 403 (the key is checked before the path)", id)
	}
}

// variants are broken services and exactly the cases each must fail.
var variants = []struct {
	name string
	f    flaws
	fail []string
}{
	{"answers 200 to everything", flaws{all200: true}, allExcept("ATK-28")},
	{"trusts forwarding headers", flaws{trustForwarded: true}, []string{"ATK-18", "ATK-19", "ATK-40", "ATK-41"}},
	{"no admin check", flaws{noAdminCheck: true}, []string{"ATK-05", "ATK-06", "ATK-24", "ATK-32", "ATK-42"}},
	{"not fail-closed without a key", flaws{notFailClosed: true}, []string{"ATK-32"}},
	{"resets before checking the key", flaws{resetBeforeCheck: true}, []string{"ATK-05", "ATK-06", "ATK-24", "ATK-34", "ATK-42"}},
	{"case-insensitive admin key", flaws{foldKey: true}, []string{"ATK-24"}},
	{"path checked before the key", flaws{pathBeforeKey: true}, []string{"ATK-06", "ATK-32"}},
	{"path id not validated", flaws{uncheckedPathID: true}, []string{"ATK-07", "ATK-08", "ATK-09", "ATK-27"}},
	{"reset ignores the user", flaws{resetIgnoresUser: true}, []string{"ATK-34", "ATK-42"}},
	{"concatenates SQL", flaws{concatSQL: true}, []string{"ATK-04", "ATK-25", "ATK-26", "ATK-27"}},
	{"endpoint length not validated", flaws{noLengthCheck: true}, []string{"ATK-03"}},
	{"rejects 128-character endpoints", flaws{strictLength: true}, []string{"ATK-03", "ATK-35"}},
	{"empty endpoint accepted", flaws{noEndpointCheck: true}, []string{"ATK-02", "ATK-10", "ATK-12", "ATK-22"}},
	{"non-problem JSON errors", flaws{plainErrors: true}, allExcept("ATK-04", "ATK-25", "ATK-26", "ATK-28", "ATK-34", "ATK-35", "ATK-37", "ATK-44")},
	{"anonymous user without X-User-Id", flaws{anonymousUser: true}, []string{"ATK-01"}},
	{"ParseInt base 0 for user ids", flaws{lenientUserID: true}, []string{"ATK-14", "ATK-15"}},
	{"PHP-style saturating user ids", flaws{phpUserID: true}, []string{"ATK-08", "ATK-13", "ATK-17"}},
	{"unicode digits in user ids", flaws{unicodeUserID: true}, []string{"ATK-13", "ATK-16"}},
	{"no body is 422", flaws{emptyBodyIs422: true}, []string{"ATK-11"}},
	{"type errors are 400", flaws{typeErrors400: true}, []string{"ATK-22"}},
	{"trailing JSON ignored", flaws{lenientJSON: true}, []string{"ATK-21"}},
	{"no body limit", flaws{noBodyLimit: true}, []string{"ATK-20"}},
	{"every method accepted", flaws{anyMethod: true}, []string{"ATK-23"}},
	{"8 MiB headers accepted", flaws{bigHeaders: true}, []string{"ATK-28"}},
	{"bare 429", flaws{bare429: true}, []string{"ATK-18", "ATK-19", "ATK-33", "ATK-36", "ATK-40", "ATK-42"}},
	{"records refused attempts", flaws{recordsDenied: true}, []string{"ATK-33"}},
	{"charges malformed requests", flaws{chargesInvalid: true}, []string{"ATK-29"}},
	{"unknown policy falls back", flaws{defaultPolicy: true}, []string{"ATK-30"}},
	{"cost not validated", flaws{uncheckedCost: true}, []string{"ATK-31"}},
	{"header keys share the peers' namespace", flaws{sharedNamespace: true}, []string{"ATK-37"}},
	{"/v1/check charges seed policies", flaws{v1SeedPolicies: true}, []string{"ATK-38"}},
	{"believes X-Client-Key from anyone", flaws{trustClientKey: true}, []string{"ATK-36"}},
	{"decision APIs on the public listener", flaws{decisionAPIsPublic: true}, []string{"ATK-39", "ATK-43"}},
	{"IPv6 addresses keyed apart", flaws{ipv6Apart: true}, []string{"ATK-40", "ATK-41"}},
	{"forwarded ports and bad entries key by the proxy", flaws{forwardedFallback: true}, []string{"ATK-41"}},
	{"wrong admin keys never throttled", flaws{noAdminThrottle: true}, []string{"ATK-42"}},
	{"a throttled address refused the right key too", flaws{throttleLocksOut: true}, []string{"ATK-42"}},
	{"admin reset on the public listener", flaws{resetPublic: true}, []string{"ATK-43"}},
	{"a quarter of the connections per client", flaws{quarterPerClient: true}, []string{"ATK-44"}},
	{"forward-auth keeps ; parameters", flaws{gwKeepsParams: true}, []string{"ATK-45"}},
	{"forward-auth matches paths literally", flaws{gwLiteralPath: true}, []string{"ATK-46"}},
	{"forward-auth refuses absolute-form URIs", flaws{gwOriginOnly: true}, []string{"ATK-46", "ATK-47"}},
	{"forward-auth compares hosts as sent", flaws{gwHostExact: true}, []string{"ATK-47"}},
}

// allExcept lists every case id but the given ones, in table order.
func allExcept(ids ...string) []string {
	var out []string
	for _, c := range Cases {
		if !slices.Contains(ids, c.ID) {
			out = append(out, c.ID)
		}
	}
	return out
}

func TestBrokenVariantsFailExactly(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			results := Run(t.Context(), testConfig(t, testKey, v.f, true), Cases)
			assert.Equal(t, v.fail, byOutcome(results, Fail), failureText(results))
			assert.Empty(t, byOutcome(results, Skip))
		})
	}
}

func TestEveryCaseFailsAgainstSomeVariant(t *testing.T) {
	caught := map[string]bool{}
	for _, v := range variants {
		for _, id := range v.fail {
			caught[id] = true
		}
	}
	for _, c := range Cases {
		assert.True(t, caught[c.ID], "%s passes against every broken variant", c.ID)
	}
}

func TestCollectorCondensesTestifyOutput(t *testing.T) {
	c := &Collector{}
	assert.Equal(c, 400, 200, "POST /rate/check: status")
	assert.Equal(c, "ok", "no", "member %q", "result")
	assert.True(c, true, "passes, so not recorded")
	msgs := c.Messages()
	require.Len(t, msgs, 2)
	assert.Equal(t, "POST /rate/check: status: Not equal: expected: 400 actual : 200", msgs[0])
	assert.Equal(t, `member "result": Not equal: expected: "ok" actual : "no"`, msgs[1])
}

func TestSeedMakesIDsReproducible(t *testing.T) {
	draw := func(seed uint64, id string) []string {
		e := newEnv(t.Context(), &Config{Seed: seed}, id)
		return []string{e.UserID(), e.UserID(), e.Token("k-")}
	}
	a := draw(5, "ATK-01")
	assert.Equal(t, a, draw(5, "ATK-01"))
	assert.NotEqual(t, a, draw(6, "ATK-01"))
	assert.NotEqual(t, a, draw(5, "ATK-02"))
	assert.NotEqual(t, a[0], a[1])
	assert.Regexp(t, `^[1-9][0-9]{9,15}$`, a[0])
}

// closedPort returns a loopback address on which nothing listens.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := run(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestRunExitCodes(t *testing.T) {
	good := newReference(t, testKey, flaws{})
	closed := newReference(t, "", flaws{})
	strict, strictInternal := newStrictReference(t, testKey, flaws{})
	broken := newReference(t, testKey, flaws{all200: true})
	unhealthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(unhealthy.Close)
	down := closedPort(t)
	withKey := map[string]string{"LIMITER_ADMIN_KEY": testKey}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		want     int
		inStdout string
		inStderr string
	}{
		{"no target", nil, nil, exitUsage, "", "--target is required"},
		{"not a URL", nil, []string{"--target", "ftp://127.0.0.1"}, exitUsage, "", "want an http(s) base URL"},
		{"unknown case", nil, []string{"--target", good, "--only", "ATK-99"}, exitUsage, "", `unknown case "ATK-99"`},
		{"zero timeout", nil, []string{"--target", good, "--timeout", "0s"}, exitUsage, "", "--timeout must be positive"},
		{"extra argument", nil, []string{"--target", good, "now"}, exitUsage, "", `unexpected argument "now"`},
		{"unknown flag", nil, []string{"--target", good, "--admin-key", "x"}, exitUsage, "", "flag provided but not defined"},
		{"help", nil, []string{"--help"}, exitPass, "", "CONSUMES RATE-LIMIT BUDGET"},
		{"list", nil, []string{"--list"}, exitPass, "ATK-35 — 128-character endpoint accepted — ", ""},
		{"target unreachable", nil, []string{"--target", down}, exitUsage, "", "unreachable"},
		{"closed target unreachable", nil, []string{"--target", good, "--closed-target", down}, exitUsage, "", down + " unreachable"},
		{"target unhealthy", nil, []string{"--target", unhealthy.URL}, exitUsage, "", "not healthy: GET /healthz answered 503"},
		{"bad trusted proxy", nil, []string{"--target", good, "--trusted-proxy", "127.0.0.1"}, exitUsage, "", "want an IPv4 loopback address other than 127.0.0.1"},
		{"internal without strict", nil, []string{"--target", good, "--strict-internal-target", strictInternal}, exitUsage, "", "needs --strict-target"},
		{"all pass", withKey, []string{"--target", good, "--closed-target", closed, "--strict-target", strict, "--strict-internal-target", strictInternal, "--trusted-proxy", refProxy.String(), "--seed", "42"}, exitPass,
			fmt.Sprintf("%d passed, 0 failed, 0 skipped", len(Cases)), ""},
		{"a failure", withKey, []string{"--target", broken, "--only", "ATK-01"}, exitFail, "expected: 400 actual : 200", ""},
		// A reference of its own: wrong admin keys from one address add up
		// in a reference whose minute never ends.
		{"key from another variable", map[string]string{"K": testKey}, []string{"--target", newReference(t, testKey, flaws{}), "--admin-key-env", "K", "--only", "ATK-24"}, exitPass,
			"admin key $K set", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.env, tt.args...)
			assert.Equal(t, tt.want, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Contains(t, stdout, tt.inStdout)
			assert.Contains(t, stderr, tt.inStderr)
		})
	}
}

func TestRunPrintsSeed(t *testing.T) {
	code, stdout, _ := runCLI(t, nil, "--target", newReference(t, testKey, flaws{}), "--only", "ATK-01", "--seed", "987654321")
	assert.Equal(t, exitPass, code)
	assert.Contains(t, stdout, "seed 987654321")
	code, stdout, _ = runCLI(t, nil, "--target", newReference(t, testKey, flaws{}), "--only", "ATK-01")
	assert.Equal(t, exitPass, code)
	assert.Regexp(t, `seed [1-9][0-9]*\n`, stdout)
}

func TestOnlyWritesJSONAndJUnit(t *testing.T) {
	dir := t.TempDir()
	jsonPath, junitPath := filepath.Join(dir, "atk.json"), filepath.Join(dir, "atk.xml")
	target := newReference(t, testKey, flaws{noLengthCheck: true})
	code, stdout, stderr := runCLI(t, nil, "--target", target, "--only", "atk-24, ATK-03,ATK-01", "--seed", "11",
		"--json", jsonPath, "--junit", junitPath)
	require.Equal(t, exitFail, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)

	var rep Report
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.Equal(t, target, rep.Target)
	assert.Equal(t, uint64(11), rep.Seed)
	assert.Equal(t, []int{1, 1, 1}, []int{rep.Passed, rep.Failed, rep.Skipped})
	require.Len(t, rep.Results, 3)
	assert.Equal(t, []string{"ATK-01", "ATK-03", "ATK-24"}, []string{rep.Results[0].ID, rep.Results[1].ID, rep.Results[2].ID})
	assert.Equal(t, []Outcome{Pass, Fail, Skip}, []Outcome{rep.Results[0].Outcome, rep.Results[1].Outcome, rep.Results[2].Outcome})
	require.NotEmpty(t, rep.Results[1].Failures)
	assert.Contains(t, rep.Results[1].Failures[0], "expected: 422 actual : 200")

	var ju junitSuites
	b, err = os.ReadFile(junitPath)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(b, &ju))
	require.Len(t, ju.Suites, 1)
	s := ju.Suites[0]
	assert.Equal(t, []int{3, 1, 1}, []int{s.Tests, s.Failures, s.Skipped})
	require.Len(t, s.Cases, 3)
	assert.Equal(t, "ATK-01 missing X-User-Id", s.Cases[0].Name)
	assert.Nil(t, s.Cases[0].Failure)
	require.NotNil(t, s.Cases[1].Failure)
	assert.Contains(t, s.Cases[1].Failure.Text, "expected: 422")
	require.NotNil(t, s.Cases[2].Skipped)
	assert.Contains(t, s.Cases[2].Skipped.Message, "admin key is unset")
}

func TestRunFailsWhenAReportCannotBeWritten(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "missing-dir", "atk.json")
	code, _, stderr := runCLI(t, nil, "--target", newReference(t, testKey, flaws{}), "--only", "ATK-01", "--json", bad)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "missing-dir")
}

// TestScript runs scripts/atk.sh with this test binary standing in for
// bin/limiter (the reference service) and bin/atk.
func TestScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not on PATH")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	bin := t.TempDir()
	for _, name := range []string{"limiter", "atk"} {
		require.NoError(t, os.Symlink(exe, filepath.Join(bin, name)))
	}
	script, err := filepath.Abs("../../scripts/atk.sh")
	require.NoError(t, err)
	tests := []struct {
		mode     string
		want     int
		inStdout string
		inStderr []string
	}{
		{"ok", 0, "6 passed, 0 failed, 0 skipped", nil},
		{"all200", 1, "FAIL", []string{"exited with status 1", "---- a.log ----", "fake limiter listening on 127.0.0.1:"}},
		{"exit", 2, "", []string{"exited before it was healthy", "refusing to start"}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), "bash", script, bin, "--only", "ATK-01,ATK-18,ATK-24,ATK-32,ATK-36,ATK-39")
			cmd.Env = append(os.Environ(), "ATK_FAKE_MODE="+tt.mode, "TMPDIR="+t.TempDir())
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			assert.Contains(t, stdout.String(), tt.inStdout)
			for _, s := range tt.inStderr {
				assert.Contains(t, stderr.String(), s)
			}
			// The services are stopped and the temporary files gone.
			for _, m := range regexp.MustCompile(`target (http://127\.0\.0\.1:\d+)`).FindAllStringSubmatch(stdout.String(), -1) {
				_, err := http.Get(m[1] + "/healthz")
				assert.Error(t, err, "%s still answers after the script", m[1])
			}
			left, err := os.ReadDir(cmd.Env[len(cmd.Env)-1][len("TMPDIR="):])
			require.NoError(t, err)
			assert.Empty(t, left, "temporary files left behind")
		})
	}
}
