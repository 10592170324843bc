package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRenderBar(t *testing.T) {
	assert.Equal(t, "race       [#########.....................]  30%  150/500 requests  1.2s ",
		renderBar("race", "requests", 150, 500, 1200*time.Millisecond))
	assert.Equal(t, "x          [##############################] 100%  9/5 steps  0.0s ",
		renderBar("x", "steps", 9, 5, 0), "overshoot is clamped")
	assert.Equal(t, "x          [##############################] 100%  0/0 steps  0.0s ",
		renderBar("x", "steps", 0, 0, 0))
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

func TestProgressEndsWithTheFinalState(t *testing.T) {
	var out syncBuffer
	p := startProgress(&out, "boundary", "requests", 10)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { p.Add(1) })
	}
	wg.Wait()
	p.SetTotal(20)
	p.Stop()
	s := out.String()
	assert.True(t, strings.HasSuffix(s, "\n"))
	last := s[strings.LastIndex(s, "\r")+1:]
	assert.Contains(t, last, " 50%  10/20 requests")
}
