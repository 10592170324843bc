package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readAll streams a file source to its end.
func readAll(t *testing.T, f *fileSource) []event {
	t.Helper()
	var out []event
	buf := make([]event, 3) // small batches: lines cross batch ends
	for {
		n, err := f.next(buf)
		require.NoError(t, err)
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

func TestFileSourceDetectsTheFormat(t *testing.T) {
	clf := "\n" + `10.0.0.1 - - [01/Jan/2026:00:00:01 +0000] "GET / HTTP/1.1" 200 5` + "\n" +
		`10.0.0.2 - - [01/Jan/2026:00:00:02 +0000] "GET / HTTP/1.1" 200 5` + "\n" +
		`10.0.0.1 - - [01/Jan/2026:00:00:03 +0000] "GET / HTTP/1.1" 429 0`
	f, err := newFileSource(strings.NewReader(clf), int64(len(clf)), formatAuto, 10, 100)
	require.NoError(t, err)
	assert.Equal(t, formatCLF, f.format)
	evs := readAll(t, f)
	require.Len(t, evs, 3)
	assert.Equal(t, []uint32{0, 1, 0}, []uint32{evs[0].key, evs[1].key, evs[2].key}, "keys numbered by first appearance")
	assert.Equal(t, "10.0.0.2", f.name(1))
	done, total := f.progress()
	assert.Equal(t, total, done, "every byte read")

	f, err = newFileSource(strings.NewReader("timestamp,key\n1,a\n"), 0, formatAuto, 10, 100)
	require.NoError(t, err)
	assert.Equal(t, formatCSV, f.format)
	_, err = newFileSource(strings.NewReader(""), 0, "json", 10, 100)
	assert.ErrorContains(t, err, "want auto, csv or clf")
}

func TestFileSourceCountsWhatItSkips(t *testing.T) {
	in := strings.Join([]string{
		"timestamp,key,cost",
		"10,a,1",
		"5,b,1",   // earlier than the line before: moved to 10
		"20,c,99", // above the limit of 10: skipped
		"garbage", // malformed
		"30,a",    // fine
		"x,a",     // malformed
		"40,a,-1", // malformed
		"50,b,1",  // fine, and no final newline
	}, "\n")
	f, err := newFileSource(strings.NewReader(in), 0, formatCSV, 10, 100)
	require.NoError(t, err)
	evs := readAll(t, f)
	assert.Equal(t, []event{{10, 0, 1}, {10, 1, 1}, {30, 0, 1}, {50, 1, 1}}, evs)
	notes := f.notes()
	require.Len(t, notes, 3)
	assert.Contains(t, notes[0], "3 malformed lines skipped (line 5: want timestamp,key[,cost]; line 7:")
	assert.Contains(t, notes[1], "1 requests skipped: their cost exceeds the limit")
	assert.Contains(t, notes[2], "1 requests earlier than the one before them")
}

func TestFileSourceLongLines(t *testing.T) {
	long := "1," + strings.Repeat("k", 100_000) + "\n2,b\n"
	f, err := newFileSource(strings.NewReader(long), 0, formatCSV, 10, 100)
	require.NoError(t, err)
	evs := readAll(t, f)
	require.Len(t, evs, 2, "a line longer than the read buffer is read whole")
	assert.Len(t, f.name(0), 100_000)

	huge := "1," + strings.Repeat("k", maxLine+10) + "\n"
	f, err = newFileSource(strings.NewReader(huge), 0, formatCSV, 10, 100)
	require.NoError(t, err)
	_, err = f.next(make([]event, 4))
	assert.ErrorContains(t, err, "longer than")
}
