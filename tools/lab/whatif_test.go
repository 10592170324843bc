package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// whatifConfigYAML has a policy on /ping, a shadow policy watching logins
// before the enforcing one, and gateway rules, the first of which no log
// can key (a header).
const whatifConfigYAML = `
addr: 127.0.0.1:8080          # a service setting: the lab reads past it
trusted_proxies: 10.0.0.5
policies:
  ping:        { limit: 2 }   # fixed_window, 60s: the default's other fields
  login_watch: { algorithm: fixed_window, limit: 1, window: 60s, shadow: true }
  login:       { algorithm: sliding_log, limit: 2, window: 60s, on_store_error: open }
  api_gw:      { algorithm: fixed_window, limit: 3, window: 60s }
gateway:
  - match: { method: POST, path: /login }
    policies: [login_watch, login]
    key: client
  - match: { host: api.example.com, path_prefix: /api/ }
    policies: [api_gw]
    key: header:X-Api-Key
  - match: { path_prefix: /api/ }
    policies: [api_gw]
    key: global
`

// whatifLog is written in completion order: line 3 (00:00:20) comes before
// line 2's request (00:00:10). Times are 2026-01-01 00:MM:SS UTC.
const whatifLog = `1.1.1.1 - - [01/Jan/2026:00:00:00 +0000] "GET /ping HTTP/1.1" 200 10
1.1.1.1 - - [01/Jan/2026:00:00:20 +0000] "GET /ping?x=1 HTTP/1.1" 200 10
1.1.1.1 - - [01/Jan/2026:00:00:10 +0000] "GET /ping HTTP/1.1" 200 10
1.1.1.1 - - [01/Jan/2026:00:01:00 +0000] "GET /ping HTTP/1.1" 200 10
2.2.2.2 - - [01/Jan/2026:00:00:05 +0000] "POST /login HTTP/1.1" 200 10 "-" "curl/8"
2.2.2.2 - - [01/Jan/2026:00:00:06 +0000] "POST /login HTTP/1.1" 200 10 "-" "curl/8"
2.2.2.2 - - [01/Jan/2026:00:00:07 +0000] "POST /login HTTP/1.1" 200 10 "-" "curl/8"
2.2.2.2 - - [01/Jan/2026:00:01:07 +0000] "POST /login HTTP/1.1" 200 10 "-" "curl/8"
api.example.com:443 3.3.3.3 - - [01/Jan/2026:00:00:30 +0000] "GET /api/x HTTP/1.1" 200 5 "-" "ua"
4.4.4.4 - - [01/Jan/2026:00:00:31 +0000] "GET /api/y HTTP/1.1" 200 5
3.3.3.3 - - [01/Jan/2026:00:00:32 +0000] "GET /api/z HTTP/1.1" 200 5
4.4.4.4 - - [01/Jan/2026:00:00:33 +0000] "GET //api/../api/w HTTP/1.1" 200 5
5.5.5.5 - - [01/Jan/2026:00:00:34 +0000] "GET /static/x HTTP/1.1" 200 5
this line is not an access log line
1.1.1.1 - - [01/Jan/2026:00:00:35 +0000] "GET /%zz HTTP/1.1" 400 5
`

func writeWhatifFiles(t *testing.T, config, log string) (configPath, logPath string) {
	t.Helper()
	dir := t.TempDir()
	configPath, logPath = filepath.Join(dir, "tollgate.yaml"), filepath.Join(dir, "access.log")
	require.NoError(t, os.WriteFile(configPath, []byte(config), 0o600))
	require.NoError(t, os.WriteFile(logPath, []byte(log), 0o600))
	return configPath, logPath
}

func runWhatifJSON(t *testing.T, args ...string) whatifReport {
	t.Helper()
	code, out, errOut := runLab(append([]string{"whatif", "--json"}, args...)...)
	require.Equal(t, 0, code, errOut)
	var r whatifReport
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	return r
}

func hhmm(mmss string) time.Time {
	t, err := time.Parse(time.RFC3339, "2026-01-01T00:"+mmss+"Z")
	if err != nil {
		panic(err)
	}
	return t
}

// TestWhatifByHand replays whatifLog through whatifConfigYAML; every figure
// is worked out below.
//
// In time order (the log is sorted first):
//
//	/ping, 1.1.1.1 (ping: fixed_window 2 per minute, windows from :00):
//	  00:00 count 1 ok; 00:10 count 2 ok; 00:20 count 3 > 2 REFUSED;
//	  01:00 a new window, count 1 ok.                   4 requests, 1 refused
//	  Unsorted, the refusal would fall at 00:10: FirstRefused says 00:20.
//	POST /login, 2.2.2.2 (gateway[0]: login_watch then login, key client):
//	  00:05 watch 1 ok,              login log {05} ok
//	  00:06 watch 2 > 1 SHADOW,      login log {05,06} ok
//	  00:07 watch 3 > 1 SHADOW,      login: 2 events in (-53s, 07] REFUSED
//	  01:07 watch (new window) 1 ok, login: (07, 67] holds none, ok
//	                                 4 requests, 1 refused, 2 shadow refusals
//	/api/ (gateway[2]: api_gw fixed_window 3 per minute, key global):
//	  00:30 3.3.3.3 (vhost api.example.com: gateway[1] matches first but
//	        is keyed by a header no log holds, so it is skipped) count 1 ok
//	  00:31 4.4.4.4 count 2 ok; 00:32 3.3.3.3 count 3 ok;
//	  00:33 4.4.4.4 (//api/../api/w cleans to /api/w) count 4 > 3 REFUSED
//	                                                    4 requests, 1 refused
//	5.5.5.5 /static/x: no rule matches. /%zz: a bad escape. One line is
//	not an access log line.
//
// So 15 lines, 14 requests parsed, 12 counted (1 unmatched, 1 bad path),
// 3 refused. Peaks within any minute (t-60s, t]: 1.1.1.1 {00,10,20} = 3
// (at 01:00 the span (00:00, 01:00] holds 10, 20, 60: 3 again); 2.2.2.2
// {05,06,07} = 3; 4.4.4.4 {31,33} = 2.
func TestWhatifByHand(t *testing.T) {
	config, log := writeWhatifFiles(t, whatifConfigYAML, whatifLog)
	r := runWhatifJSON(t, "--config", config, "--trace", log)

	assert.Equal(t, int64(15), r.Lines)
	assert.Equal(t, int64(14), r.Requests)
	assert.Equal(t, int64(12), r.Replayed)
	assert.Equal(t, int64(1), r.Unmatched)
	assert.Equal(t, int64(1), r.BadPath)
	assert.Equal(t, int64(1), r.Malformed)
	assert.Equal(t, int64(1), r.HeaderOnly)
	assert.Equal(t, int64(3), r.Refused)
	assert.Equal(t, hhmm("00:00"), r.From)
	assert.Equal(t, hhmm("01:07"), r.To)

	policies := map[string]whatifPolicyRow{}
	for _, p := range r.Policies {
		policies[p.Policy] = p
	}
	assert.Equal(t, whatifPolicyRow{Policy: "ping", Algorithm: "fixed_window", Limit: 2, WindowSeconds: 60, Evaluated: 4, Refused: 1}, policies["ping"])
	assert.Equal(t, whatifPolicyRow{Policy: "login_watch", Algorithm: "fixed_window", Limit: 1, WindowSeconds: 60, Shadow: true, Evaluated: 4, ShadowRefused: 2}, policies["login_watch"])
	assert.Equal(t, whatifPolicyRow{Policy: "login", Algorithm: "sliding_log", Limit: 2, WindowSeconds: 60, Evaluated: 4, Refused: 1}, policies["login"])
	assert.Equal(t, whatifPolicyRow{Policy: "api_gw", Algorithm: "fixed_window", Limit: 3, WindowSeconds: 60, Evaluated: 4, Refused: 1}, policies["api_gw"])
	assert.Equal(t, int64(0), policies["check"].Evaluated) // no POST /rate/check

	require.Len(t, r.Routes, 5) // the two seed routes, the three rules
	got := map[string][2]int64{}
	for _, rt := range r.Routes {
		got[rt.Route] = [2]int64{rt.Requests, rt.Refused}
	}
	assert.Equal(t, map[string][2]int64{
		"GET /ping (route ping)":                            {4, 1},
		"POST /rate/check (route check)":                    {0, 0},
		"gateway[0] POST /login":                            {4, 1},
		"gateway[1] any method host api.example.com /api/*": {0, 0},
		"gateway[2] any method /api/*":                      {4, 1},
	}, got)

	assert.Equal(t, []whatifClientRow{
		{Client: "1.1.1.1", Requests: 4, Refused: 1, PeakPerMinute: 3, FirstRefused: hhmm("00:20")},
		{Client: "2.2.2.2", Requests: 4, Refused: 1, PeakPerMinute: 3, FirstRefused: hhmm("00:07")},
		{Client: "4.4.4.4", Requests: 2, Refused: 1, PeakPerMinute: 2, FirstRefused: hhmm("00:33")},
	}, r.TopClients)

	require.Len(t, r.Shadow, 1)
	s := r.Shadow[0]
	assert.Equal(t, "login_watch", s.Policy)
	assert.Equal(t, int64(2), s.Refusals)
	assert.Equal(t, 1, s.Clients)
	assert.Equal(t, hhmm("00:06"), s.First)
	assert.Equal(t, hhmm("00:07"), s.Last)
	assert.Equal(t, []whatifClientRow{{Client: "2.2.2.2", Requests: 4, Refused: 2, PeakPerMinute: 3, FirstRefused: hhmm("00:06")}}, s.TopClients)

	// The timeline: 1 s bins over 67 s; each refusal in the bin of its second.
	assert.Equal(t, int64(1), r.Timeline.BinSeconds)
	require.Len(t, r.Timeline.Refused["ping"], 68)
	assert.Equal(t, int64(1), r.Timeline.Refused["ping"][20])
	assert.Equal(t, int64(1), r.Timeline.Refused["api_gw"][33])
	assert.Equal(t, int64(1), r.Timeline.Refused["login_watch"][6])
	assert.Equal(t, int64(1), r.Timeline.Refused["login_watch"][7])
	assert.Equal(t, int64(1), r.Timeline.Refused["login"][7])
	assert.NotContains(t, r.Timeline.Refused, "check")
}

// TestWhatifCSVMatchesTheAccessLog replays the same requests written as CSV
// (columns in another order, a host column): the figures are the same.
func TestWhatifCSVMatchesTheAccessLog(t *testing.T) {
	var csv strings.Builder
	csv.WriteString("key,time,method,path,host\n")
	for _, line := range strings.Split(strings.TrimSpace(whatifLog), "\n") {
		var rec struct{ host, client, when, method, target string }
		fields := strings.Fields(line)
		if !strings.Contains(line, "[") {
			csv.WriteString("1.1.1.1,not a time,GET,/x,\n") // still malformed
			continue
		}
		if strings.Contains(fields[0], ":443") {
			rec.host, fields = "api.example.com", fields[1:]
		}
		rec.client = fields[0]
		tm, err := time.Parse("[02/Jan/2006:15:04:05", fields[3])
		require.NoError(t, err)
		rec.when = tm.UTC().Format(time.RFC3339)
		rec.method, rec.target = strings.Trim(fields[5], `"`), fields[6]
		fmt.Fprintf(&csv, "%s,%s,%s,%q,%s\n", rec.client, rec.when, rec.method, rec.target, rec.host)
	}
	config, clf := writeWhatifFiles(t, whatifConfigYAML, whatifLog)
	_, csvPath := writeWhatifFiles(t, whatifConfigYAML, csv.String())
	want := runWhatifJSON(t, "--config", config, "--trace", clf)
	got := runWhatifJSON(t, "--config", config, "--trace", csvPath)
	assert.Equal(t, int64(16), got.Lines) // the header too
	got.Lines, want.Lines = 0, 0
	got.Trace, want.Trace = "", ""
	assert.Contains(t, got.Notes[0], `line 15: timestamp "not a time"`) // the malformed line, one line further down
	got.Notes[0], want.Notes[0] = "", ""
	assert.Equal(t, want, got)
}

// TestWhatifOnTheExampleConfig replays a log through deploy/config/sqlite.yaml,
// the single-host configuration the README points to: ping allows 30 a
// minute and then daily (10,000 a day) is charged; check is sliding_log,
// 20 a minute.
func TestWhatifOnTheExampleConfig(t *testing.T) {
	var log strings.Builder
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	line := func(client string, s int, method, path string) {
		fmt.Fprintf(&log, "%s - - [%s] \"%s %s HTTP/1.1\" 200 2\n", client, t0.Add(time.Duration(s)*time.Second).Format("02/Jan/2006:15:04:05 -0700"), method, path)
	}
	for s := range 40 { // 40 in one minute: 30 allowed, the last 10 refused by ping
		line("198.51.100.7", s, "GET", "/ping")
	}
	for s := range 5 {
		line("203.0.113.9", s, "GET", "/ping")
	}
	for s := range 25 { // 25 in one minute on a sliding log of 20: 5 refused
		line("192.0.2.1", s, "POST", "/rate/check")
	}
	_, logPath := writeWhatifFiles(t, "", log.String())
	out := t.TempDir()
	r := runWhatifJSON(t, "--config", filepath.Join("..", "..", "deploy", "config", "sqlite.yaml"), "--trace", logPath, "--out", out)

	assert.Equal(t, int64(70), r.Replayed)
	assert.Equal(t, int64(15), r.Refused)
	byName := map[string]whatifPolicyRow{}
	for _, p := range r.Policies {
		byName[p.Policy] = p
	}
	assert.Equal(t, int64(10), byName["ping"].Refused)
	assert.Equal(t, int64(45), byName["ping"].Evaluated)
	// daily comes after ping: the 10 ping refused never reach it.
	assert.Equal(t, int64(35), byName["daily"].Evaluated)
	assert.Equal(t, int64(0), byName["daily"].Refused)
	assert.Equal(t, int64(5), byName["check"].Refused)
	require.NotEmpty(t, r.TopClients)
	assert.Equal(t, whatifClientRow{Client: "198.51.100.7", Requests: 40, Refused: 10, PeakPerMinute: 40, FirstRefused: t0.Add(30 * time.Second)}, r.TopClients[0])
	assert.Empty(t, r.Shadow)
	assert.Equal(t, []string{"whatif-timeline.png"}, r.Plots)
	for _, f := range []string{"whatif-timeline.png", "whatif.md"} {
		st, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err)
		assert.Positive(t, st.Size(), f)
	}
}

func TestWhatifMarkdownAndHelp(t *testing.T) {
	config, log := writeWhatifFiles(t, whatifConfigYAML, whatifLog)
	code, out, errOut := runLab("whatif", "--config", config, "--trace", log)
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{
		"**3 refused**",
		"| login_watch | fixed_window | 1 | 1m0s | 4 | 0 | 2 |",
		"| gateway[2] any method /api/* | global | api_gw | 4 | 1 |",
		"`login_watch` would have refused 2 requests of 1 clients",
		"line 14: no [time] in the access log line",
	} {
		assert.Contains(t, out, want)
	}
	code, out, _ = runLab("whatif", "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "Usage: lab whatif")
	assert.Contains(t, out, "shadow")
}

func TestWhatifErrors(t *testing.T) {
	for _, tc := range []struct {
		name, config, log string
		args              []string
		code              int
		want              string
	}{
		{name: "no flags", code: 2, want: "--config and --trace are required"},
		{name: "strict config", config: "policies:\n  ping: { limt: 3 }\n", log: whatifLog, code: 1, want: "policies.ping.limt: unknown key (want algorithm, limit"},
		{name: "unknown gateway policy", config: "gateway:\n  - policies: [nope]\n    key: global\n", log: whatifLog, code: 1, want: `gateway[0].policies[0]: unknown policy "nope"`},
		{name: "nothing readable", config: whatifConfigYAML, log: "garbage\nmore garbage\n", args: []string{"--format", "clf"}, code: 1, want: "no readable request in the log: 2 malformed lines (line 1: "},
		{name: "CSV without a key column", config: whatifConfigYAML, log: "time,method,path\n", code: 1, want: "line 1: header: no key column"},
		{name: "time out of range", config: whatifConfigYAML, log: "1.1.1.1 - - [01/Jan/1969:00:00:00 +0000] \"GET /ping HTTP/1.1\" 200 1\n", code: 1, want: "line 1: timestamp"},
		{name: "CSV header", config: whatifConfigYAML, log: "garbage\n", code: 1, want: `line 1: header: column "garbage": want time, method, path, key, host`},
		{name: "too many requests", config: whatifConfigYAML, log: whatifLog, args: []string{"--max-requests", "2"}, code: 1, want: "more than 2 requests to replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"whatif"}
			if tc.config != "" {
				config, log := writeWhatifFiles(t, tc.config, tc.log)
				args = append(args, "--config", config, "--trace", log)
			}
			code, _, errOut := runLab(append(args, tc.args...)...)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, errOut, tc.want)
		})
	}
}

// TestWhatifKeysClientsAsTheServiceDoes: three IPv6 addresses of one /64 are
// one client, as the service keys them (httplimit.Clients), so the third
// /ping in the minute is refused (ping: 2 a minute); with --ipv6-prefix 128
// they are three clients and none is. A client name longer than the store
// takes is a malformed line, not the end of the run.
func TestWhatifKeysClientsAsTheServiceDoes(t *testing.T) {
	log := `2001:db8:1:2::1 - - [01/Jan/2026:00:00:00 +0000] "GET /ping HTTP/1.1" 200 10
2001:db8:1:2::2 - - [01/Jan/2026:00:00:01 +0000] "GET /ping HTTP/1.1" 200 10
2001:db8:1:2::3 - - [01/Jan/2026:00:00:02 +0000] "GET /ping HTTP/1.1" 200 10
` + strings.Repeat("h", 1100) + ` - - [01/Jan/2026:00:00:03 +0000] "GET /ping HTTP/1.1" 200 10
`
	config, logPath := writeWhatifFiles(t, whatifConfigYAML, log)
	r := runWhatifJSON(t, "--config", config, "--trace", logPath)
	assert.Equal(t, int64(1), r.Refused, "one /64, one client")
	require.Len(t, r.TopClients, 1)
	assert.Equal(t, "2001:db8:1:2::/64", r.TopClients[0].Client)
	assert.Equal(t, int64(1), r.Malformed, "the over-long client")
	r = runWhatifJSON(t, "--config", config, "--trace", logPath, "--ipv6-prefix", "128")
	assert.Equal(t, int64(0), r.Refused, "three clients")
}

// TestWhatifSeedRoutesOff: behind a gateway, /ping is the application's own
// path. With --seed-routes=false the ping route's policy counts nothing, and
// /ping (no gateway rule matches it) is unmatched: of the hand-made log's
// four /ping lines, none is refused (TestWhatifByHand: one is, by `ping`).
func TestWhatifSeedRoutesOff(t *testing.T) {
	config, log := writeWhatifFiles(t, whatifConfigYAML, whatifLog)
	on := runWhatifJSON(t, "--config", config, "--trace", log)
	off := runWhatifJSON(t, "--config", config, "--trace", log, "--seed-routes=false")
	assert.Equal(t, on.Unmatched+4, off.Unmatched, "the four /ping lines")
	assert.Equal(t, on.Refused-1, off.Refused, "ping's one refusal is gone")
}
