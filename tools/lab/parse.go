package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tollgate/tollgate/tools/lab/internal/tracefile"
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

// lineParser is tracefile.ParseCSV or tracefile.ParseCLF.
type lineParser func(line []byte, rec *tracefile.Record, scratch []byte) ([]byte, error)

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
	maxKeys  int // distinct keys allowed; one more is an error
}

// newFileSource reads the first line to choose the format when format is
// auto. size is the file's length, for progress (0 if unknown). Events
// whose cost exceeds maxCost (the policy's limit: a store refuses them as
// invalid) are skipped and counted. A key beyond the first maxKeys distinct
// ones, and a timestamp outside tracefile's range, stop the replay.
func newFileSource(r io.Reader, size int64, format string, maxCost int64, maxKeys int) (*fileSource, error) {
	f := &fileSource{r: bufio.NewReaderSize(r, 1<<16), size: size, ids: map[string]uint32{}, last: -1 << 63, maxCost: maxCost, maxKeys: maxKeys}
	if format == formatAuto {
		format = formatCSV
		head, _ := f.r.Peek(4096) // a shorter file gives what it has
		for line := range bytes.SplitSeq(head, []byte{'\n'}) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if tracefile.LooksLikeCLF(line) {
				format = formatCLF
			}
			break
		}
	}
	switch format {
	case formatCSV:
		f.parse = tracefile.ParseCSV
	case formatCLF:
		f.parse = tracefile.ParseCLF
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
		var rec tracefile.Record
		f.scratch, err = f.parse(line, &rec, f.scratch)
		switch {
		case errors.Is(err, tracefile.ErrSkip):
			continue
		case errors.Is(err, tracefile.ErrOutOfRange):
			return n, fmt.Errorf("lab: trace: line %d: %w", f.line, err)
		case err != nil:
			f.bad++
			if len(f.examples) < maxBadExamples {
				f.examples = append(f.examples, fmt.Sprintf("line %d: %v", f.line, err))
			}
			continue
		case rec.Cost > f.maxCost:
			f.tooDear++
			continue
		}
		if rec.At < f.last {
			rec.At = f.last
			f.moved++
		}
		f.last = rec.At
		id, ok := f.ids[string(rec.Key)]
		if !ok {
			if len(f.names) >= f.maxKeys {
				return n, fmt.Errorf("lab: trace: line %d: more than %d distinct keys (--max-keys %d): each key's state is kept for the whole replay; raise --max-keys if the memory is there",
					f.line, f.maxKeys, f.maxKeys)
			}
			id = uint32(len(f.names))
			name := string(rec.Key)
			f.ids[name] = id
			f.names = append(f.names, name)
		}
		buf[n] = event{at: rec.At, key: id, cost: uint32(rec.Cost)}
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
