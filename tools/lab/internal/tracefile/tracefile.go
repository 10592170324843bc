// Package tracefile parses the lines of the trace files the lab replays:
// CSV "timestamp,key[,cost]" and common or combined access logs. Each
// parser reads one line, allocates nothing but the key (into a scratch
// buffer the caller reuses), and never panics, whatever the line.
package tracefile

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Record is one parsed line: its time, key and cost.
type Record struct {
	At   int64  // Unix nanoseconds
	Key  []byte // in the scratch buffer passed to the parser
	Cost int64
}

// ErrSkip marks a line that holds no request (blank, comment, CSV header).
var ErrSkip = errors.New("tracefile: no request on this line")

// ErrOutOfRange marks a timestamp outside [MinTime, MaxTime): a line the
// replay cannot do time arithmetic on. Unlike a malformed line it is not
// skipped: a trace that holds one is not what its writer meant.
var ErrOutOfRange = errors.New("outside the lab's range")

// The range of the timestamps a trace may hold. Unix nanoseconds in an
// int64 end in April 2262; MaxTime leaves more than a year below that, so
// that a time plus the longest window (limiter.MaxWindow) cannot overflow.
var (
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.Date(2261, 1, 1, 0, 0, 0, 0, time.UTC)
)

// inRange returns t in Unix nanoseconds, or ErrOutOfRange naming the
// timestamp as written (text).
func inRange(t time.Time, text []byte) (int64, error) {
	if t.Before(MinTime) || !t.Before(MaxTime) {
		return 0, fmt.Errorf("timestamp %s is %w [%s, %s)", text, ErrOutOfRange,
			MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339))
	}
	return t.UnixNano(), nil
}

// ParseCSV parses "timestamp,key[,cost]" into rec and returns the scratch
// buffer, grown to hold the key. The timestamp is RFC 3339
// (any fraction) or integer Unix nanoseconds; the key may be double-quoted
// ("" escapes a quote) and is otherwise taken as is; cost defaults to 1.
// Blank lines, lines starting with '#', and a header whose first field is
// "timestamp" are skipped.
func ParseCSV(line []byte, rec *Record, scratch []byte) ([]byte, error) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
		return scratch, ErrSkip
	}
	ts, rest, ok := bytes.Cut(line, []byte{','})
	if !ok {
		return scratch, fmt.Errorf("want timestamp,key[,cost]")
	}
	ts = bytes.TrimSpace(ts)
	if string(ts) == "timestamp" {
		return scratch, ErrSkip
	}
	at, err := parseTimestamp(ts)
	if err != nil {
		return scratch, err
	}
	key, rest, err := csvField(rest, scratch[:0])
	if err != nil {
		return scratch, err
	}
	if len(key) == 0 {
		return key, fmt.Errorf("empty key")
	}
	cost := int64(1)
	if rest != nil {
		c := bytes.TrimSpace(rest)
		if cost, err = strconv.ParseInt(string(c), 10, 64); err != nil || cost < 1 {
			return key, fmt.Errorf("cost %q is not a positive integer", c)
		}
	}
	rec.At, rec.Key, rec.Cost = at, key, cost
	return key, nil
}

// csvField reads one field from the start of s, quoted or not, into dst.
// rest is what follows the comma after it, nil when the field ends the line.
func csvField(s, dst []byte) (field, rest []byte, err error) {
	if len(s) == 0 || s[0] != '"' {
		f, r, ok := bytes.Cut(s, []byte{','})
		if !ok {
			r = nil
		}
		return append(dst, f...), r, nil
	}
	for i := 1; i < len(s); i++ {
		if s[i] != '"' {
			dst = append(dst, s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '"' {
			dst = append(dst, '"')
			i++
			continue
		}
		switch {
		case i+1 == len(s):
			return dst, nil, nil
		case s[i+1] == ',':
			return dst, s[i+2:], nil
		}
		return dst, nil, fmt.Errorf("text after a closing quote")
	}
	return dst, nil, fmt.Errorf("unterminated quote")
}

// parseTimestamp reads RFC 3339 or integer Unix nanoseconds, in
// [MinTime, MaxTime).
func parseTimestamp(b []byte) (int64, error) {
	if len(b) > 0 && (b[0] >= '0' && b[0] <= '9' || b[0] == '-') && !bytes.ContainsAny(b, ":T") {
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("timestamp %q is not Unix nanoseconds", b)
		}
		return inRange(time.Unix(0, n), b)
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return 0, fmt.Errorf("timestamp %q is neither RFC 3339 nor Unix nanoseconds", b)
	}
	return inRange(t, b)
}

// clfTime is the time layout of common and combined access logs.
const clfTime = "02/Jan/2006:15:04:05 -0700"

// ParseCLF parses a common or combined access log line,
//
//	host ident authuser [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 2326 ...
//
// taking the host as the key and each line as one request of cost 1.
func ParseCLF(line []byte, rec *Record, scratch []byte) ([]byte, error) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
		return scratch, ErrSkip
	}
	host, _, ok := bytes.Cut(line, []byte{' '})
	if !ok || len(host) == 0 {
		return scratch, fmt.Errorf("want an access log line")
	}
	open := bytes.IndexByte(line, '[')
	if open < 0 {
		return scratch, fmt.Errorf("no [time] in the access log line")
	}
	closing := bytes.IndexByte(line[open:], ']')
	if closing < 0 {
		return scratch, fmt.Errorf("no closing ] after the time")
	}
	t, err := time.Parse(clfTime, string(line[open+1:open+closing]))
	if err != nil {
		return scratch, fmt.Errorf("time %q: want %s", line[open+1:open+closing], clfTime)
	}
	at, err := inRange(t, []byte(t.UTC().Format(time.RFC3339)))
	if err != nil {
		return scratch, err
	}
	key := append(scratch[:0], host...)
	rec.At, rec.Key, rec.Cost = at, key, 1
	return key, nil
}

// LooksLikeCLF reports whether line reads as an access log line rather than
// CSV (its time may be out of range: the parse will say so).
func LooksLikeCLF(line []byte) bool {
	var rec Record
	_, err := ParseCLF(line, &rec, nil)
	return err == nil || errors.Is(err, ErrOutOfRange)
}
