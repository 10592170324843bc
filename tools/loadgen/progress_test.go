package main

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/schollz/progressbar/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRenderLine(t *testing.T) {
	assert.Equal(t, "race: 150/500 requests (30%), 125 requests/s, ETA 2.8s",
		renderLine("race", "requests", progressbar.State{CurrentNum: 150, Max: 500, CurrentPercent: 0.3, SecondsSince: 1.2, SecondsLeft: 2.8}))
	assert.Equal(t, "x: 5/5 steps (100%), 0 steps/s, done",
		renderLine("x", "steps", progressbar.State{CurrentNum: 5, Max: 5, CurrentPercent: 1}), "no time elapsed: no rate")
}

// syncBuffer is a bytes.Buffer safe for the progress goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// In a log (anything but a terminal), progress is plain lines, never a
// carriage-return redraw, ending with the final state.
func TestProgressInALogIsPlainLines(t *testing.T) {
	var out syncBuffer
	mode := progressModeOf(&out, false)
	require.Equal(t, progressLog, mode)
	p := startProgress(&out, mode, "boundary", "requests", 20)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { p.Add(1) })
	}
	wg.Wait()
	p.SetTotal(10)
	p.Stop()
	s := out.String()
	assert.NotContains(t, s, "\r")
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	assert.Regexp(t, `^boundary: 10/10 requests \(100%\), \d+ requests/s, done$`, lines[len(lines)-1])
}

func TestQuietPrintsNothing(t *testing.T) {
	var out syncBuffer
	mode := progressModeOf(&out, true)
	require.Equal(t, progressQuiet, mode)
	p := startProgress(&out, mode, "race", "requests", 10)
	p.Add(10)
	p.Stop()
	assert.Empty(t, out.String())
}

// A pipe or a file is not a terminal, however it is opened.
func TestFilesAreLogs(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	assert.Equal(t, progressLog, progressModeOf(w, false))
	f, err := os.Create(t.TempDir() + "/log")
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, progressLog, progressModeOf(f, false))
}
