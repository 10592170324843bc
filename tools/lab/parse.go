package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Trace file formats.
const (
	formatAuto = "auto"
	formatCSV  = "csv" // timestamp,key[,cost]
	formatCLF  = "clf" // common or combined access log
)

// maxLine bounds one line of a trace file.
const maxLine = 1 << 20

// maxBadExamples is how many malformed lines a report quotes.
const maxBadExamples = 3

// record is one parsed line: its time, key and cost.
type record struct {
	at   int64
	key  []byte // valid until the next line
	cost int64
}

// errSkip marks a line that holds no request (blank, comment, CSV header).
var errSkip = errors.New("lab: no request on this line")

// parseCSVLine parses "timestamp,key[,cost]". The timestamp is RFC 3339
// (any fraction) or integer Unix nanoseconds; the key may be double-quoted
// ("" escapes a quote) and is otherwise taken as is; cost defaults to 1.
// Blank lines, lines starting with '#', and a header whose first field is
// "timestamp" are skipped.
func parseCSVLine(line []byte, rec *record, scratch []byte) ([]byte, error) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
		return scratch, errSkip
	}
	ts, rest, ok := bytes.Cut(line, []byte{','})
	if !ok {
		return scratch, fmt.Errorf("want timestamp,key[,cost]")
	}
	ts = bytes.TrimSpace(ts)
	if string(ts) == "timestamp" {
		return scratch, errSkip
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
	rec.at, rec.key, rec.cost = at, key, cost
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

// parseTimestamp reads RFC 3339 or integer Unix nanoseconds.
func parseTimestamp(b []byte) (int64, error) {
	if len(b) > 0 && (b[0] >= '0' && b[0] <= '9' || b[0] == '-') && !bytes.ContainsAny(b, ":T") {
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("timestamp %q is not Unix nanoseconds", b)
		}
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return 0, fmt.Errorf("timestamp %q is neither RFC 3339 nor Unix nanoseconds", b)
	}
	return t.UnixNano(), nil
}

// clfTime is the time layout of common and combined access logs.
const clfTime = "02/Jan/2006:15:04:05 -0700"

// parseCLFLine parses a common or combined access log line,
//
//	host ident authuser [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 2326 ...
//
// taking the host as the key and each line as one request of cost 1.
func parseCLFLine(line []byte, rec *record, scratch []byte) ([]byte, error) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
		return scratch, errSkip
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
	key := append(scratch[:0], host...)
	rec.at, rec.key, rec.cost = t.UnixNano(), key, 1
	return key, nil
}

// looksLikeCLF reports whether line reads as an access log line rather than
// CSV.
func looksLikeCLF(line []byte) bool {
	var rec record
	_, err := parseCLFLine(line, &rec, nil)
	return err == nil
}

// lineParser is parseCSVLine or parseCLFLine.
type lineParser func(line []byte, rec *record, scratch []byte) ([]byte, error)

// fileSource streams a trace file: one line at a time, keys interned to
// numbers in order of first appearance. Time must not go backwards; an
// event earlier than the one before it (access logs are written in
// completion order) is moved to the time of the one before it and counted.
type fileSource struct {
	r       *bufio.Reader
	size    int64 // bytes, 0 when unknown
	read    int64
	line    int64
	parse   lineParser
	format  string
	ids     map[string]uint32
	names   []string
	scratch []byte
	last    int64
	// What the parse met.
	moved    int64    // events moved forward in time
	bad      int64    // malformed lines, skipped
	examples []string // the first malformed lines, with their numbers
	maxCost  int64    // events whose cost exceeds this are skipped and counted
	tooDear  int64
}

// newFileSource reads the first line to choose the format when format is
// auto. size is the file's length, for progress (0 if unknown). Events
// whose cost exceeds maxCost (the policy's limit: a store refuses them as
// invalid) are skipped and counted.
func newFileSource(r io.Reader, size int64, format string, maxCost int64) (*fileSource, error) {
	f := &fileSource{r: bufio.NewReaderSize(r, 1<<16), size: size, ids: map[string]uint32{}, last: -1 << 63, maxCost: maxCost}
	if format == formatAuto {
		format = formatCSV
		head, _ := f.r.Peek(4096) // a shorter file gives what it has
		for line := range bytes.SplitSeq(head, []byte{'\n'}) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if looksLikeCLF(line) {
				format = formatCLF
			}
			break
		}
	}
	switch format {
	case formatCSV:
		f.parse = parseCSVLine
	case formatCLF:
		f.parse = parseCLFLine
	default:
		return nil, fmt.Errorf("lab: trace format %q: want auto, csv or clf", format)
	}
	f.format = format
	return f, nil
}

func (f *fileSource) next(buf []event) (int, error) {
	n := 0
	for n < len(buf) {
		line, err := f.readLine()
		if line == nil {
			return n, err
		}
		var rec record
		f.scratch, err = f.parse(line, &rec, f.scratch)
		switch {
		case errors.Is(err, errSkip):
			continue
		case err != nil:
			f.bad++
			if len(f.examples) < maxBadExamples {
				f.examples = append(f.examples, fmt.Sprintf("line %d: %v", f.line, err))
			}
			continue
		case rec.cost > f.maxCost:
			f.tooDear++
			continue
		}
		if rec.at < f.last {
			rec.at = f.last
			f.moved++
		}
		f.last = rec.at
		id, ok := f.ids[string(rec.key)]
		if !ok {
			id = uint32(len(f.names))
			name := string(rec.key)
			f.ids[name] = id
			f.names = append(f.names, name)
		}
		buf[n] = event{at: rec.at, key: id, cost: uint32(rec.cost)}
		n++
	}
	return n, nil
}

// readLine returns the next line without its newline, nil at the end of the
// input (with the read error, nil for a clean end). A line longer than
// maxLine is an error.
func (f *fileSource) readLine() ([]byte, error) {
	line, err := f.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = f.r.ReadSlice('\n')
			long = append(long, line...)
			if len(long) > maxLine {
				return nil, fmt.Errorf("lab: trace: line %d is longer than %d bytes", f.line+1, maxLine)
			}
		}
		line = long
	}
	f.read += int64(len(line))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("lab: trace: %w", err)
	}
	if len(line) == 0 {
		return nil, nil
	}
	f.line++
	return bytes.TrimSuffix(line, []byte{'\n'}), nil
}

func (f *fileSource) name(k uint32) string          { return f.names[k] }
func (f *fileSource) progress() (done, total int64) { return f.read, f.size }
func (f *fileSource) unit() string                  { return "bytes" }

// notes returns what the parse met, for the report: moved, malformed and
// too costly lines.
func (f *fileSource) notes() []string {
	var out []string
	if f.bad > 0 {
		out = append(out, fmt.Sprintf("%d malformed lines skipped (%s)", f.bad, strings.Join(f.examples, "; ")))
	}
	if f.tooDear > 0 {
		out = append(out, fmt.Sprintf("%d requests skipped: their cost exceeds the limit", f.tooDear))
	}
	if f.moved > 0 {
		out = append(out, fmt.Sprintf("%d requests earlier than the one before them were moved to its time", f.moved))
	}
	return out
}
