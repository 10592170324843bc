package openapitest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/openapitest"
)

// exchange builds an exchange of a request with body and an answer.
func exchange(method, target, reqBody string, status int, header http.Header, body string) openapitest.Exchange {
	r := httptest.NewRequest(method, target, strings.NewReader(reqBody))
	if header == nil {
		header = http.Header{}
	}
	header.Set("X-Request-Id", "r1")
	return openapitest.Exchange{Request: r, RequestBody: []byte(reqBody), Status: status, Header: header, Body: []byte(body)}
}

func jsonHeader(ct string) http.Header { return http.Header{"Content-Type": {ct}} }

// The checker accepts what the document describes and refuses each kind of
// drift: an undocumented member, status or header value, a missing
// required header, a 404 that is not a problem, a request the document
// refuses that the service accepted. A 3.1 type array (reset's endpoint:
// string or null) is understood.
func TestCheckFindsDrift(t *testing.T) {
	d := openapitest.Service(t)
	problem := http.Header{"Content-Type": {"application/problem+json"}, "Cache-Control": {"no-store"}}
	notFound := `{"type":"urn:tollgate:problem:not-found","title":"Not Found","status":404,"detail":"no such route"}`
	reset := func(endpoint string) openapitest.Exchange {
		return exchange(http.MethodDelete, "/rate/reset/7", "", 200, jsonHeader("application/json; charset=utf-8"),
			`{"user_id":7,"endpoint":`+endpoint+`,"deleted":1}`)
	}

	for name, x := range map[string]openapitest.Exchange{
		"health":              exchange(http.MethodGet, "/healthz", "", 200, jsonHeader("application/json; charset=utf-8"), `{"status":"ok"}`),
		"head drops the body": exchange(http.MethodHead, "/healthz", "", 200, jsonHeader("application/json; charset=utf-8"), `whatever`),
		"reset of all":        reset("null"),
		"reset of one":        reset(`"/a"`),
		"unknown path":        exchange(http.MethodGet, "/nowhere", "", 404, problem.Clone(), notFound),
		"refused request, 4xx": exchange(http.MethodPost, "/v1/check", `{"policy":"api"}`, 422, problem.Clone(),
			`{"type":"urn:tollgate:problem:validation-failed","title":"Unprocessable Entity","status":422,"detail":"key is required"}`),
	} {
		assert.NoError(t, d.Check(x), name)
	}

	limited := http.Header{"Content-Type": {"application/problem+json"}, "Cache-Control": {"no-store"}}
	for name, x := range map[string]openapitest.Exchange{
		"undocumented member": exchange(http.MethodGet, "/healthz", "", 200, jsonHeader("application/json"), `{"status":"ok","extra":1}`),
		"undocumented status": exchange(http.MethodGet, "/healthz", "", 201, jsonHeader("application/json"), `{"status":"ok"}`),
		"wrong type":          reset("3"),
		"404 not a problem":   exchange(http.MethodGet, "/nowhere", "", 404, jsonHeader("text/plain"), "404 page not found"),
		"unknown path, 200":   exchange(http.MethodGet, "/nowhere", "", 200, jsonHeader("application/json"), `{}`),
		"429 without Retry-After": exchange(http.MethodGet, "/ping", "", 429, limited,
			`{"type":"urn:tollgate:problem:rate-limit-exceeded","title":"Too Many Requests","status":429,"detail":"d","violated-policies":["ping"],"limit":3,"remaining":0,"count":4,"reset_after":1,"retry_after":1}`),
		"refused request, 200": exchange(http.MethodPost, "/v1/check", `{"policy":"api"}`, 200, jsonHeader("application/json"),
			`{"allowed":true,"limit":1,"remaining":0,"count":1,"reset_after":1,"retry_after":0,"policy":"api","key":"k"}`),
	} {
		assert.Error(t, d.Check(x), name)
	}
}

func TestLoadRefusesWhatIsNot31(t *testing.T) {
	_, err := openapitest.Load([]byte(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{}}`))
	require.ErrorContains(t, err, "not 3.1")
	_, err = openapitest.Load([]byte(`{"openapi":"3.1.0","paths":{}}`))
	require.Error(t, err, "no info")
}

// The transport checks what goes through it and leaves the answer readable.
func TestTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "r1")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"fine"}`)) // not the document's "ok"
	}))
	t.Cleanup(srv.Close)
	var seen []error
	c := &http.Client{Transport: openapitest.Service(t).Transport(func(err error) { seen = append(seen, err) }, nil)}
	resp, err := c.Get(srv.URL + "/healthz")
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, `{"status":"fine"}`, string(got))
	require.Len(t, seen, 1)
	assert.ErrorContains(t, seen[0], "GET /healthz")
}
