package client_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/client"
)

// answering starts a server that answers every request with h.
func answering(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestA429IsARefusalWhateverItsBody: a proxy's or a firewall's 429, HTML and
// no decision, refuses even failing open; its Retry-After is the wait.
func TestA429IsARefusalWhateverItsBody(t *testing.T) {
	url := answering(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "<html><body>Slow down</body></html>")
	})
	c := newClient(t, url, client.WithFailureMode(client.FailOpen))
	d, err := c.Check(context.Background(), "api", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "a 429 without a decision, failing open")
	assert.False(t, d.Unavailable)
	assert.Equal(t, 7*time.Second, d.RetryAfter)
}

// TestA200ThatIsNotADecisionIsAnError: another service's 200 JSON is not an
// allowance.
func TestA200ThatIsNotADecisionIsAnError(t *testing.T) {
	for _, body := range []string{`{"status":"ok"}`, `{"allowed":false,"limit":3}`, `{"allowed":true}`, `[]`} {
		url := answering(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, body)
		})
		d, err := newClient(t, url).Check(context.Background(), "api", "k", 1)
		require.ErrorIs(t, err, client.ErrUnavailable, "200 %s", body)
		assert.False(t, d.Allowed, "200 %s, failing closed", body)
		assert.True(t, d.Unavailable, "200 %s", body)
	}
}

// TestRedirectsAreNotFollowed: a 307 to another server does not send the
// request (and its key) there.
func TestRedirectsAreNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := answering(t, func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		io.WriteString(w, `{"allowed":true,"limit":3,"remaining":2,"count":1,"reset_after":1,"retry_after":0}`)
	})
	url := answering(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other+"/v1/check", http.StatusTemporaryRedirect)
	})
	for _, opts := range [][]client.Option{nil, {client.WithHTTPClient(&http.Client{})}} {
		d, err := newClient(t, url, opts...).Check(context.Background(), "api", "k", 1)
		require.ErrorIs(t, err, client.ErrUnavailable)
		assert.False(t, d.Allowed)
	}
	assert.Zero(t, elsewhere.Load(), "requests sent to the redirect's target")
}

// TestDurationsAreClamped: negative, and huge, waits from a faulty answer
// come out as 0 and the longest Duration, never negative.
func TestDurationsAreClamped(t *testing.T) {
	url := answering(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"type":"urn:tollgate:problem:rate-limit-exceeded","status":429,"limit":3,"remaining":0,"count":4,"reset_after":1e300,"retry_after":-5}`)
	})
	d, err := newClient(t, url).Check(context.Background(), "api", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Zero(t, d.RetryAfter)
	assert.Equal(t, time.Duration(1<<63-1), d.ResetAfter)
	assert.EqualValues(t, 4, d.Count)
}

// TestAnEndlessBodyIsNotReadOn: a 200 whose body never ends is abandoned
// after 64 KiB, not read until the call's timeout.
func TestAnEndlessBodyIsNotReadOn(t *testing.T) {
	url := answering(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		chunk := bytes.Repeat([]byte(" "), 4096)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	d, err := newClient(t, url, client.WithTimeout(time.Hour)).Check(context.Background(), "api", "k", 1)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "read until the timeout: %v", err)
	assert.ErrorContains(t, err, "over 65536 bytes")
	assert.False(t, d.Allowed)
}

// countingTransport counts the (decompressed) body bytes its responses
// hand to the caller.
type countingTransport struct{ read atomic.Int64 }

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = countingBody{resp.Body, &ct.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestAGzipBombIsBounded: 64 MiB of zeros gzipped into a 200 are read no
// further than 64 KiB once decompressed.
func TestAGzipBombIsBounded(t *testing.T) {
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, err := io.Copy(zw, io.LimitReader(zeros{}, 64<<20))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	url := answering(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(bomb.Bytes())
	})
	ct := &countingTransport{}
	_, err = newClient(t, url, client.WithHTTPClient(&http.Client{Transport: ct})).Check(context.Background(), "api", "k", 1)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.LessOrEqual(t, ct.read.Load(), int64(64<<10+1), "decompressed bytes read")
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
