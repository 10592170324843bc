package tracefile

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCSVLine(t *testing.T) {
	ts := time.Date(2026, 3, 1, 12, 0, 0, 500_000_000, time.UTC).UnixNano()
	cases := []struct {
		line string
		at   int64
		key  string
		cost int64
		err  string // "" ok, "skip" a line without a request
	}{
		{line: "2026-03-01T12:00:00.5Z,alice", at: ts, key: "alice", cost: 1},
		{line: "2026-03-01T13:00:00.5+01:00,alice,3\r", at: ts, key: "alice", cost: 3},
		{line: fmt.Sprintf("%d,10.0.0.1,2", ts), at: ts, key: "10.0.0.1", cost: 2},
		{line: `1,"a,""quoted"" key",4`, at: 1, key: `a,"quoted" key`, cost: 4},
		{line: `1,"trailing"`, at: 1, key: "trailing", cost: 1},
		{line: " 1 , spaced key , 2 ", at: 1, key: " spaced key ", cost: 2},
		{line: "timestamp,key,cost", err: "skip"},
		{line: "# comment", err: "skip"},
		{line: "   ", err: "skip"},
		{line: "no comma", err: "want timestamp,key"},
		{line: "yesterday,alice", err: "neither RFC 3339"},
		{line: "99999999999999999999,alice", err: "not Unix nanoseconds"},
		{line: "1,", err: "empty key"},
		{line: "1,alice,0", err: "not a positive integer"},
		{line: "1,alice,two", err: "not a positive integer"},
		{line: `1,"open`, err: "unterminated quote"},
		{line: `1,"closed"x,1`, err: "after a closing quote"},
	}
	for _, c := range cases {
		var rec Record
		_, err := ParseCSV([]byte(c.line), &rec, nil)
		switch c.err {
		case "":
			require.NoError(t, err, c.line)
			assert.Equal(t, c.at, rec.At, c.line)
			assert.Equal(t, c.key, string(rec.Key), c.line)
			assert.Equal(t, c.cost, rec.Cost, c.line)
		case "skip":
			assert.ErrorIs(t, err, ErrSkip, c.line)
		default:
			require.Error(t, err, c.line)
			assert.NotErrorIs(t, err, ErrSkip, c.line)
			assert.Contains(t, err.Error(), c.err, c.line)
		}
	}
}

func TestParseCLFLine(t *testing.T) {
	common := `192.0.2.7 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326`
	combined := common + ` "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"`
	want := time.Date(2000, 10, 10, 20, 55, 36, 0, time.UTC).UnixNano()
	for _, line := range []string{common, combined} {
		var rec Record
		_, err := ParseCLF([]byte(line), &rec, nil)
		require.NoError(t, err)
		assert.Equal(t, want, rec.At)
		assert.Equal(t, "192.0.2.7", string(rec.Key))
		assert.Equal(t, int64(1), rec.Cost)
		assert.True(t, LooksLikeCLF([]byte(line)))
	}
	for _, bad := range []string{"192.0.2.7 - - no time", "192.0.2.7 - - [10/Oct/2000:13:55:36", "192.0.2.7 - - [yesterday] \"GET /\"", "1,alice"} {
		var rec Record
		_, err := ParseCLF([]byte(bad), &rec, nil)
		assert.Error(t, err, bad)
		assert.False(t, LooksLikeCLF([]byte(bad)), bad)
	}
}

// FuzzParseCSVLine: no input panics; a parsed line written back as CSV
// (key quoted) parses to the same record.
func FuzzParseCSVLine(f *testing.F) {
	for _, s := range []string{"1,a", "2026-01-01T00:00:00Z,b,3", `5,"q,""x""",2`, "timestamp,key", "#", "1,\"", "-5,a,1", "-9223372036854775808,a", "2263-01-01T00:00:00Z,a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var rec Record
		_, err := ParseCSV([]byte(line), &rec, nil)
		if err != nil {
			return
		}
		require.NotEmpty(t, rec.Key)
		require.GreaterOrEqual(t, rec.Cost, int64(1))
		requireInRange(t, rec.At)
		again := fmt.Sprintf("%d,\"%s\",%d", rec.At, strings.ReplaceAll(string(rec.Key), `"`, `""`), rec.Cost)
		var rec2 Record
		_, err = ParseCSV([]byte(again), &rec2, nil)
		require.NoError(t, err, again)
		assert.Equal(t, rec.At, rec2.At)
		assert.Equal(t, string(rec.Key), string(rec2.Key))
		assert.Equal(t, rec.Cost, rec2.Cost)
	})
}

// FuzzParseCLFLine: no input panics; a parsed line has a key without
// spaces and a cost of one.
func FuzzParseCLFLine(f *testing.F) {
	f.Add(`192.0.2.7 - frank [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 2326`)
	f.Add(`h - - [] "x"`)
	f.Add(`[`)
	f.Add(`h - - [01/Jan/2263:00:00:00 +0000] "GET / HTTP/1.1" 200 5`)
	f.Fuzz(func(t *testing.T, line string) {
		var rec Record
		_, err := ParseCLF([]byte(line), &rec, nil)
		if err != nil {
			return
		}
		require.NotEmpty(t, rec.Key)
		require.NotContains(t, string(rec.Key), " ")
		require.Equal(t, int64(1), rec.Cost)
		requireInRange(t, rec.At)
	})
}

// requireInRange: a parsed time is one the replay can add a window to.
func requireInRange(t *testing.T, at int64) {
	t.Helper()
	require.GreaterOrEqual(t, at, MinTime.UnixNano())
	require.Less(t, at, MaxTime.UnixNano())
}

func TestTimestampRange(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"0,a", true},
		{"-1,a", false},
		{"-9223372036854775808,a", false},
		{"9223372036854775807,a", false},
		{"2200-06-01T00:00:00Z,a", true},
		{"2260-12-31T23:59:59.999999999Z,a", true},
		{"2261-01-01T00:00:00Z,a", false},
		{"2263-01-01T00:00:00Z,a", false}, // UnixNano would wrap to 1678
		{"9999-12-31T23:59:59Z,a", false},
		{"1969-12-31T23:59:59Z,a", false},
	} {
		var rec Record
		_, err := ParseCSV([]byte(tc.line), &rec, nil)
		if tc.ok {
			assert.NoError(t, err, tc.line)
			continue
		}
		assert.ErrorIs(t, err, ErrOutOfRange, tc.line)
	}
	var rec Record
	_, err := ParseCLF([]byte(`h - - [01/Jan/2263:00:00:00 +0000] "GET / HTTP/1.1" 200 5`), &rec, nil)
	require.ErrorIs(t, err, ErrOutOfRange)
	assert.Contains(t, err.Error(), "timestamp 2263-01-01T00:00:00Z is outside the lab's range [1970-01-01T00:00:00Z, 2261-01-01T00:00:00Z)")
}
