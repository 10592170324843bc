package tracefile

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAccess(t *testing.T) {
	at := time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC).UnixNano() // 12:00 at +0100
	for _, tc := range []struct {
		line string
		want Request
	}{
		{`192.0.2.1 - - [01/Jan/2026:12:00:00 +0100] "GET /a?b=1 HTTP/1.1" 200 5`, Request{At: at, Method: "GET", Target: "/a?b=1", Client: "192.0.2.1"}},
		{`::1 - bob [01/Jan/2026:12:00:00 +0100] "POST /login HTTP/2.0" 401 0 "https://x/" "curl/8"`, Request{At: at, Method: "POST", Target: "/login", Client: "::1"}},
		{`api.example.com:443 192.0.2.1 - - [01/Jan/2026:12:00:00 +0100] "GET /api/ HTTP/1.1" 200 5 "-" "ua"`, Request{At: at, Method: "GET", Target: "/api/", Host: "api.example.com", Client: "192.0.2.1"}},
		{`www.example.com 192.0.2.1 - - [01/Jan/2026:12:00:00 +0100] "HEAD / HTTP/1.0" 200 0`, Request{At: at, Method: "HEAD", Target: "/", Host: "www.example.com", Client: "192.0.2.1"}},
	} {
		var r Request
		require.NoError(t, ParseAccess([]byte(tc.line), &r), tc.line)
		assert.Equal(t, tc.want, r, tc.line)
	}
	for line, want := range map[string]string{
		"":            "skip",
		"# a comment": "skip",
		`192.0.2.1 - - [01/Jan/2026:12:00:00 +0100] "-" 400 0`:                  "want METHOD TARGET",
		`192.0.2.1 - - [01/Jan/2026:12:00:00 +0100]`:                            "no \"request line\"",
		`192.0.2.1 - - [01/Jan/2026:12:00:00 +0100] "GET /a`:                    "unterminated request line",
		`192.0.2.1 [01/Jan/2026:12:00:00 +0100] "GET / HTTP/1.1" 200 1`:         "found 1 fields before the time",
		`192.0.2.1 - - [2026-01-01T12:00:00Z] "GET / HTTP/1.1" 200 1`:           "want 02/Jan/2006",
		`192.0.2.1 - - [01/Jan/1969:12:00:00 +0000] "GET / HTTP/1.1" 200 1`:     "outside the lab's range",
		`192.0.2.1 - - [01/Jan/2026:12:00:00 +0100 "GET / HTTP/1.1" 200 1`:      "no closing ]",
		strings.Repeat("x", 300) + ` - - [01/Jan/2026:12:00:00 +0100] "GET / H`: "unterminated",
	} {
		var r Request
		err := ParseAccess([]byte(line), &r)
		require.Error(t, err, line)
		if want == "skip" {
			assert.ErrorIs(t, err, ErrSkip)
			continue
		}
		assert.Contains(t, err.Error(), want, line)
	}
}

func TestParseRequestCSV(t *testing.T) {
	c, err := NewRequestCSV([]byte("Key,time,METHOD,path,host\r"))
	require.NoError(t, err)
	var r Request
	require.NoError(t, c.Parse([]byte(`"client, one",2026-01-01T00:00:01Z,GET,"/a,b",api.example.com`), &r))
	assert.Equal(t, Request{At: time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC).UnixNano(), Method: "GET", Target: "/a,b", Host: "api.example.com", Client: "client, one"}, r)
	require.NoError(t, c.Parse([]byte(`k,1767225601000000000,POST,/x,`), &r))
	assert.Equal(t, Request{At: time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC).UnixNano(), Method: "POST", Target: "/x", Client: "k"}, r)
	for line, want := range map[string]string{
		"k,2026-01-01T00:00:01Z,GET,/x":          "4 fields, the header names 5",
		",2026-01-01T00:00:01Z,GET,/x,":          "empty method, path or key",
		"k,yesterday,GET,/x,":                    "neither RFC 3339 nor Unix nanoseconds",
		`k,2026-01-01T00:00:01Z,GET,"/x" junk,h`: "text after a closing quote",
		"k,1970-01-01T00:00:00Z,GET,/x,h\n":      "",
		"k,2300-01-01T00:00:00Z,GET,/x,h":        "outside the lab's range",
	} {
		err := c.Parse([]byte(line), &r)
		if want == "" {
			assert.NoError(t, err, line)
			continue
		}
		require.Error(t, err, line)
		assert.Contains(t, err.Error(), want, line)
	}
	for header, want := range map[string]string{
		"time,method,path":          "no key column",
		"time,method,path,key,when": `column "when"`,
		"time,method,path,key,time": `column "time" given twice`,
		`time,method,"path,key`:     "unterminated quote",
	} {
		_, err := NewRequestCSV([]byte(header))
		require.Error(t, err, header)
		assert.Contains(t, err.Error(), want, header)
	}
}

// FuzzParseAccess: whatever the line, no panic, and a parsed request has a
// method, a target and a client, at a time in the range.
func FuzzParseAccess(f *testing.F) {
	for _, seed := range []string{
		`192.0.2.1 - - [01/Jan/2026:12:00:00 +0100] "GET /a?b=1 HTTP/1.1" 200 5`,
		`h:1 192.0.2.1 - - [01/Jan/2026:12:00:00 +0100] "GET / HTTP/1.1" 200 5 "-" "ua"`,
		`[ ] "`, `a b c [`, `a b c []"`, `a b c [01/Jan/2026:12:00:00 +0100] "" 1`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var r Request
		if ParseAccess([]byte(line), &r) != nil {
			return
		}
		assert.NotEmpty(t, r.Method)
		assert.NotEmpty(t, r.Target)
		assert.NotEmpty(t, r.Client)
		assert.GreaterOrEqual(t, r.At, MinTime.UnixNano())
		assert.Less(t, r.At, MaxTime.UnixNano())
	})
}

// FuzzRequestCSV: whatever the line, no panic, and a parsed request has a
// method, a target and a key.
func FuzzRequestCSV(f *testing.F) {
	c, err := NewRequestCSV([]byte("time,method,path,key,host"))
	require.NoError(f, err)
	for _, seed := range []string{`2026-01-01T00:00:01Z,GET,"/a,b",k,h`, `1,GET,/x,"k""",`, `,,,,`, `"`, `1,"a"b,c,d,e`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var r Request
		if c.Parse([]byte(line), &r) != nil {
			return
		}
		assert.NotEmpty(t, r.Method)
		assert.NotEmpty(t, r.Target)
		assert.NotEmpty(t, r.Client)
	})
}
