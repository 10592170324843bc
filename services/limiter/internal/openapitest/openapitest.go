// Package openapitest checks the service's HTTP exchanges against its
// OpenAPI 3.1 document (httpapi.OpenAPI), for the service's tests: every
// request a test makes and every answer it gets go through [Check], so that
// a route answering a status, a header or a body the document does not
// describe fails the test that saw it.
//
// It validates with getkin/kin-openapi's openapi3filter, which validates the
// schemas of a 3.1 document as JSON Schema 2020-12 (type arrays, const,
// exclusiveMinimum as a number).
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/tollgate/tollgate/services/limiter/internal/httpapi"
)

// Document is the parsed OpenAPI document and its router.
type Document struct {
	doc    *openapi3.T
	router routers.Router
}

// Load parses and validates an OpenAPI document.
func Load(data []byte) (*Document, error) {
	doc, err := openapi3.NewLoader().LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("openapitest: load: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapitest: the document is OpenAPI %s, not 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapitest: invalid document: %w", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapitest: router: %w", err)
	}
	return &Document{doc: doc, router: router}, nil
}

// service is the service's own document, loaded once.
var service = sync.OnceValues(func() (*Document, error) { return Load(httpapi.OpenAPI()) })

// Service returns the service's document; a document that does not load
// fails tb.
func Service(tb testing.TB) *Document {
	tb.Helper()
	d, err := service()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// Exchange is one request and its answer.
type Exchange struct {
	Request *http.Request
	// RequestBody is what the request sent (Request.Body is not read).
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
}

// Check validates x against the document and returns what does not match:
//   - a path the document does not have must answer a 404 problem, and a
//     method a documented path does not serve a 405 problem with Allow;
//   - a request the document calls invalid must answer a documented 4xx;
//   - the answer's status must be documented for the operation, and its
//     headers and body must match the documented ones (HEAD answers have
//     their body dropped, as net/http drops it).
func (d *Document) Check(x Exchange) error {
	req := x.Request.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	if len(x.RequestBody) > 0 && req.Header.Get("Content-Type") == "" {
		// The service reads the body as JSON whatever its type, as the
		// document says; validate it as such.
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := d.router.FindRoute(req)
	var reason string // the router answers new RouteErrors, not its sentinels
	if re := (*routers.RouteError)(nil); errors.As(err, &re) {
		reason = re.Reason
	}
	if err == nil && len(req.URL.Path) > 1 && strings.HasSuffix(req.URL.Path, "/") {
		// The router takes /ping/ for /ping; the service, which redirects
		// nothing, answers 404, and the document has no path ending in /.
		reason = routers.ErrPathNotFound.Error()
	}
	switch {
	case reason == routers.ErrPathNotFound.Error():
		return d.checkUnrouted(x, http.StatusNotFound, "NotFound")
	case reason == routers.ErrMethodNotAllowed.Error():
		return d.checkUnrouted(x, http.StatusMethodNotAllowed, "MethodNotAllowed")
	case err != nil:
		return fmt.Errorf("%s %s: no route: %w", x.Request.Method, x.Request.URL.Path, err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if reqErr := openapi3filter.ValidateRequest(context.Background(), in); reqErr != nil && (x.Status < 400 || x.Status > 499) {
		return fmt.Errorf("%s %s: the document refuses the request, yet the service answered %d: %w",
			x.Request.Method, x.Request.URL.Path, x.Status, reqErr)
	}
	body := x.Body
	if x.Request.Method == http.MethodHead {
		body = nil
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 x.Status,
		Header:                 x.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("%s %s: the %d answer does not match the document: %w (body %.300q)",
			x.Request.Method, x.Request.URL.Path, x.Status, err, x.Body)
	}
	return nil
}

// checkUnrouted checks the answer to a request the document has no
// operation for: status, as the document's shared response name describes it.
func (d *Document) checkUnrouted(x Exchange, status int, name string) error {
	what := x.Request.Method + " " + x.Request.URL.Path
	if x.Status != status {
		return fmt.Errorf("%s: not in the document, yet answered %d instead of %d", what, x.Status, status)
	}
	body := x.Body
	if x.Request.Method == http.MethodHead {
		body = nil
	}
	if err := d.CheckResponse(name, x.Header, body); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// CheckResponse checks an answer's headers and body (nil: no body to check,
// as for HEAD) against the document's shared response name
// (components/responses), for answers of routes a test adds to the engine.
func (d *Document) CheckResponse(name string, header http.Header, body []byte) error {
	ref := d.doc.Components.Responses[name]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("openapitest: no response %q in the document", name)
	}
	r := ref.Value
	for h, hr := range r.Headers {
		vs := header.Values(h)
		if len(vs) == 0 {
			if hr.Value.Required {
				return fmt.Errorf("the %s answer lacks its %s field", name, h)
			}
			continue
		}
		if err := hr.Value.Schema.Value.VisitJSON(vs[0], openapi3.EnableJSONSchema2020()); err != nil {
			return fmt.Errorf("the %s answer's %s field: %w", name, h, err)
		}
	}
	if body == nil {
		return nil
	}
	ct := header.Get("Content-Type")
	mt := r.Content.Get(ct)
	if mt == nil {
		return fmt.Errorf("the %s answer is %q, which the document does not describe", name, ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("the %s answer is not JSON: %w", name, err)
	}
	if err := mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("the %s answer does not match the document: %w", name, err)
	}
	return nil
}

// Transport returns a RoundTripper that sends each request with base (nil:
// http.DefaultTransport) and gives report every exchange that does not match
// the document. The request body is copied as it is sent (a streamed body
// stays streamed); the answer's body is read whole and given back unread.
func (d *Document) Transport(report func(error), base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{report: report, doc: d, base: base}
}

// Collector gathers the mismatches of the transports it wraps, for a
// TestMain, where no test is there to report them to.
type Collector struct {
	doc  *Document
	mu   sync.Mutex
	errs []error
}

// NewCollector returns a Collector checking against the service's document.
func NewCollector() (*Collector, error) {
	d, err := service()
	if err != nil {
		return nil, err
	}
	return &Collector{doc: d}, nil
}

// Wrap returns base (nil: http.DefaultTransport) checking every exchange.
func (c *Collector) Wrap(base http.RoundTripper) http.RoundTripper {
	return c.doc.Transport(func(err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.errs = append(c.errs, err)
	}, base)
}

// Err returns every mismatch seen so far, joined; nil when none.
func (c *Collector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

type transport struct {
	report func(error)
	doc    *Document
	base   http.RoundTripper
}

// teeBody keeps a copy of what the transport reads of a request body.
type teeBody struct {
	io.ReadCloser
	mu   sync.Mutex
	sent bytes.Buffer
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.sent.Write(p[:n])
	b.mu.Unlock()
	return n, err
}

func (b *teeBody) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.sent.Bytes())
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	var tee *teeBody
	if r.Body != nil && r.Body != http.NoBody {
		tee = &teeBody{ReadCloser: r.Body}
		r = r.Clone(r.Context())
		r.Body = tee
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return resp, nil // the caller sees the short body; nothing to check
	}
	var sent []byte
	if tee != nil {
		sent = tee.bytes()
	}
	if err := t.doc.Check(Exchange{Request: r, RequestBody: sent, Status: resp.StatusCode, Header: resp.Header, Body: body}); err != nil {
		t.report(err)
	}
	return resp, nil
}

// CloseIdleConnections closes the base transport's idle connections, so
// that http.Client.CloseIdleConnections reaches them.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Operations returns the document's operations as "METHOD /path", sorted.
func (d *Document) Operations() []string {
	var ops []string
	for path, item := range d.doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}
