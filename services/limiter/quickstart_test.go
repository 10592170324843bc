package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmePath is the README, read by the tests that hold it to its word.
var readmePath = filepath.Join("..", "..", "README.md")

// readmeBlock returns the first fenced block of the given language in the
// README's section headed "## heading".
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	readme, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	_, section, found := strings.Cut(string(readme), "\n## "+heading+"\n")
	require.True(t, found, "the README has a section %q", heading)
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, found := strings.Cut(section, "```"+lang+"\n")
	require.True(t, found, "the README's %q shows a %s block", heading, lang)
	block, _, found = strings.Cut(block, "```")
	require.True(t, found)
	return block
}

// quickStartStep is one command of the README's Quick start session and the
// output the README shows for it.
type quickStartStep struct {
	cmd, want string
}

// quickStartSession returns the commands of the README's Quick start
// console block: a line "$ cmd" starts a step, the lines up to the next
// blank line or "$ " are what it prints.
func quickStartSession(t *testing.T) []quickStartStep {
	t.Helper()
	block := readmeBlock(t, "Quick start", "console")
	var steps []quickStartStep
	for line := range strings.SplitSeq(strings.TrimSuffix(block, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, quickStartStep{cmd: strings.TrimPrefix(line, "$ ")})
		case line == "":
		default:
			require.NotEmpty(t, steps, "output before any command: %q", line)
			steps[len(steps)-1].want += line + "\n"
		}
	}
	return steps
}

// What legitimately differs from one run to the next: the seconds to a
// window's end (a zero retry_after is not a time to wait and stays), the
// time a window started and a request's id. Both sides are normalized.
var quickStartVarying = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`("reset_after":)[0-9]+(\.[0-9]+)?`), "${1}<seconds>"},
	{regexp.MustCompile(`("retry_after":)([1-9][0-9]*|0\.[0-9]*[1-9][0-9]*)(\.[0-9]+)?`), "${1}<seconds>"},
	{regexp.MustCompile(`(;t=)[0-9]+`), "${1}<seconds>"},
	{regexp.MustCompile(`(?im)^(Retry-After: )[0-9]+$`), "${1}<seconds>"},
	{regexp.MustCompile(`(urn:tollgate:request:)[0-9A-Z]+`), "${1}<id>"},
	{regexp.MustCompile(`"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"`), `"<time>"`},
}

func normalizeQuickStart(s string) string {
	s = strings.ReplaceAll(s, "\r", "") // curl -i prints the header lines with CRLF
	for _, v := range quickStartVarying {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return strings.TrimSuffix(s, "\n")
}

// quickStartPattern turns what the README shows into a pattern: "..." stands
// for text the README leaves out (within a line or whole lines), and a line
// starting with one space continues the line before it (a long JSON body
// wrapped for reading).
func quickStartPattern(want string) *regexp.Regexp {
	want = normalizeQuickStart(strings.ReplaceAll(want, "\n ", ""))
	parts := strings.Split(want, "...")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^` + strings.Join(parts, `(?s:.*?)`) + `$`)
}

// TestREADMEQuickStart runs the README's Quick start session, as written,
// against the binary make run starts (its database in a temporary folder),
// and fails when an answer differs from what the README shows, but for the
// times that vary from run to run (as Example_server does for the library's
// Go code).
func TestREADMEQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	for _, tool := range []string{"sh", "curl", "grep"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the Quick start needs %s on PATH", tool)
			}
			t.Skipf("the Quick start needs %s on PATH", tool)
		}
	}
	steps := quickStartSession(t)
	require.GreaterOrEqual(t, len(steps), 4, "the session's commands were found")
	for _, s := range steps {
		require.Contains(t, s.cmd, "localhost:8080", "every command asks make run's address")
		require.NotEmpty(t, s.want, "the README shows what %q prints", s.cmd)
	}

	// /ping's window is the UTC minute: a session that straddles a minute
	// boundary starts a new window midway and rightly answers otherwise.
	// Such a run is done again on a fresh service, not judged.
	for attempt := 1; ; attempt++ {
		began := time.Now().UTC().Truncate(time.Minute)
		got := runQuickStart(t, steps)
		if time.Now().UTC().Truncate(time.Minute).Equal(began) {
			for i, s := range steps {
				assert.Regexp(t, quickStartPattern(s.want), normalizeQuickStart(got[i]),
					"$ %s\nthe README shows:\n%sthe service answered:\n%s", s.cmd, s.want, got[i])
			}
			return
		}
		require.Less(t, attempt, 3, "three sessions in a row straddled a minute boundary")
	}
}

// runQuickStart starts a fresh service and runs each step's command with sh,
// make run's address replaced by the service's; it returns what each printed.
func runQuickStart(t *testing.T, steps []quickStartStep) []string {
	t.Helper()
	in := startProcess(t, []string{"--sqlite-path=" + filepath.Join(t.TempDir(), "data", "limiter.db")})
	host := strings.TrimPrefix(in.url, "http://")
	out := make([]string, len(steps))
	for i, s := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
		cmd := exec.CommandContext(ctx, "sh", "-c", strings.ReplaceAll(s.cmd, "localhost:8080", host))
		b, err := cmd.Output()
		cancel()
		require.NoError(t, err, "$ %s", s.cmd)
		out[i] = string(b)
	}
	return out
}

// TestMakeRunWritesWhatTheREADMESays starts the binary as make run does (its
// defaults, the database in a temporary ./data/) and checks what it wrote
// against the README's list: the database, SQLite's -wal and -shm, and the
// 8 MiB reserve, nothing else; and that the start-up log names the database
// and the reserve.
func TestMakeRunWritesWhatTheREADMESays(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	readme, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	_, section, found := strings.Cut(string(readme), "**What `make run` writes.**")
	require.True(t, found, "the Quick start says what make run writes")
	section, _, _ = strings.Cut(section, "\n## ")
	described := map[string]bool{}
	for _, m := range regexp.MustCompile("`(limiter\\.db[-a-z]*)`").FindAllStringSubmatch(section, -1) {
		described[m[1]] = true
	}
	require.Equal(t, map[string]bool{"limiter.db": true, "limiter.db-wal": true, "limiter.db-shm": true, "limiter.db-reserve": true}, described)
	require.Contains(t, section, "`limiter.db-reserve`: 8 MiB of zeros")

	data := filepath.Join(t.TempDir(), "data")
	database := filepath.Join(data, "limiter.db")
	in := startProcess(t, []string{"--sqlite-path=" + database})
	resp, err := client.Get(in.url + "/ping")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	entries, err := os.ReadDir(data)
	require.NoError(t, err)
	for _, e := range entries {
		assert.True(t, described[e.Name()], "make run wrote %s, which the README does not list", e.Name())
	}
	assert.FileExists(t, database)
	reserve, err := os.Stat(database + "-reserve")
	require.NoError(t, err, "the reserve the README describes")
	assert.Equal(t, int64(8<<20), reserve.Size(), "8 MiB")

	// The line follows "listening" at once; the test's reader may lag.
	for deadline := time.Now().Add(30 * time.Second); in.logCount("sqlite database") == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // a hang guard, not a timing assertion
	}
	in.mu.Lock()
	logs := in.logs.String()
	in.mu.Unlock()
	var files struct {
		Database, Reserve string
		Bytes             int64 `json:"reserve_bytes"`
	}
	for line := range strings.SplitSeq(logs, "\n") {
		var l struct{ Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Msg, "sqlite database") {
			require.NoError(t, json.Unmarshal([]byte(line), &files))
		}
	}
	assert.Equal(t, database, files.Database, "the start-up log names the database:\n%s", logs)
	assert.Equal(t, database+"-reserve", files.Reserve, "and the reserve")
	assert.Equal(t, int64(8<<20), files.Bytes)
}

// TestREADMEIsShort: the README stays a page a newcomer finishes (issue 25:
// under 300 lines); the rest belongs in docs/.
func TestREADMEIsShort(t *testing.T) {
	readme, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	assert.Less(t, strings.Count(string(readme), "\n"), 300, "README.md's lines")
}
