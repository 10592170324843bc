package tracefile

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Request is one request of an access log: what a gateway would ask
// Tollgate about.
type Request struct {
	At     int64  // Unix nanoseconds
	Method string // as logged
	Target string // the request target as logged: path and query
	Host   string // the virtual host, "" when the log has none
	Client string // the client address, or the CSV's key
}

// ParseAccess parses a common or combined access log line into r:
//
//	client ident user [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.1" 200 2326 ...
//
// A line with one more field before the time is Apache's vhost_combined
// ("%v:%p %h %l %u %t ..."): its first field is the virtual host (a port
// after it is dropped) and the second the client. The request line must
// hold a method and a target; "-" (a connection closed before a request)
// and a line whose time is unreadable are errors, a time outside the
// range ErrOutOfRange. Blank lines and '#' comments are ErrSkip.
func ParseAccess(line []byte, r *Request) error {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
		return ErrSkip
	}
	open := bytes.IndexByte(line, '[')
	if open < 0 {
		return fmt.Errorf("no [time] in the access log line")
	}
	closing := bytes.IndexByte(line[open:], ']')
	if closing < 0 {
		return fmt.Errorf("no closing ] after the time")
	}
	head := strings.Fields(string(line[:open]))
	var host, client string
	switch len(head) {
	case 3:
		client = head[0]
	case 4:
		host, client = head[0], head[1]
		if h, _, ok := strings.Cut(host, ":"); ok && strings.Count(host, ":") == 1 {
			host = h
		}
	default:
		return fmt.Errorf("want client ident user [time] (or vhost client ident user [time]), found %d fields before the time", len(head))
	}
	t, err := time.Parse(clfTime, string(line[open+1:open+closing]))
	if err != nil {
		return fmt.Errorf("time %q: want %s", line[open+1:open+closing], clfTime)
	}
	at, err := inRange(t, []byte(t.UTC().Format(time.RFC3339)))
	if err != nil {
		return err
	}
	rest := bytes.TrimLeft(line[open+closing+1:], " ")
	if len(rest) == 0 || rest[0] != '"' {
		return fmt.Errorf(`no "request line" after the time`)
	}
	end := bytes.IndexByte(rest[1:], '"')
	if end < 0 {
		return fmt.Errorf("unterminated request line")
	}
	method, target, ok := strings.Cut(string(rest[1:1+end]), " ")
	target, _, _ = strings.Cut(target, " ") // drop the protocol
	if !ok || method == "" || target == "" {
		return fmt.Errorf("request line %q: want METHOD TARGET [PROTOCOL]", rest[1:1+end])
	}
	*r = Request{At: at, Method: method, Target: target, Host: host, Client: client}
	return nil
}

// The columns of a request CSV.
var requestColumns = []string{"time", "method", "path", "key", "host"}

// RequestCSV parses CSV lines of requests whose first line, the header,
// names the columns: time, method, path and key, in any order, and host
// if the log has one. The key is what a rule's `client` counts.
type RequestCSV struct {
	index [5]int // position of each of requestColumns; -1: absent
	width int
}

// NewRequestCSV reads the header line.
func NewRequestCSV(header []byte) (*RequestCSV, error) {
	c := &RequestCSV{index: [5]int{-1, -1, -1, -1, -1}}
	rest := bytes.TrimRight(header, "\r")
	for i := 0; rest != nil; i++ {
		var name []byte
		var err error
		if name, rest, err = csvField(rest, nil); err != nil {
			return nil, fmt.Errorf("header: %v", err)
		}
		col := slices.Index(requestColumns, strings.ToLower(strings.TrimSpace(string(name))))
		switch {
		case col < 0:
			return nil, fmt.Errorf("header: column %q: want %s", name, strings.Join(requestColumns, ", "))
		case c.index[col] >= 0:
			return nil, fmt.Errorf("header: column %q given twice", name)
		}
		c.index[col] = i
		c.width = i + 1
	}
	for col, name := range requestColumns[:4] {
		if c.index[col] < 0 {
			return nil, fmt.Errorf("header: no %s column (want time, method, path, key and optionally host)", name)
		}
	}
	return c, nil
}

// Parse parses one data line into r. Blank lines and '#' comments are
// ErrSkip; a time outside the range is ErrOutOfRange.
func (c *RequestCSV) Parse(line []byte, r *Request) error {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
		return ErrSkip
	}
	fields := make([]string, 0, c.width)
	for rest := line; rest != nil; {
		var f []byte
		var err error
		if f, rest, err = csvField(rest, nil); err != nil {
			return err
		}
		fields = append(fields, string(f))
	}
	if len(fields) != c.width {
		return fmt.Errorf("%d fields, the header names %d", len(fields), c.width)
	}
	at, err := parseTimestamp([]byte(strings.TrimSpace(fields[c.index[0]])))
	if err != nil {
		return err
	}
	*r = Request{At: at, Method: fields[c.index[1]], Target: fields[c.index[2]], Client: fields[c.index[3]]}
	if i := c.index[4]; i >= 0 {
		r.Host = fields[i]
	}
	if r.Method == "" || r.Target == "" || r.Client == "" {
		return fmt.Errorf("empty method, path or key")
	}
	return nil
}
