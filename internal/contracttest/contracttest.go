// Package contracttest checks HTTP traffic against the API contract
// (api/openapi.yaml) in tests. Wrap a test client's transport with
// Validator.Transport and every request and response that goes through it is
// validated with kin-openapi's openapi3filter; a mismatch fails the test.
//
// The rules:
//   - A response must be one the document declares for the operation:
//     status (undeclared statuses fail), headers and body (JSON bodies
//     against their schema; additionalProperties: false catches fields the
//     document does not know).
//   - A request the document rejects (unknown field, missing required
//     field, bad parameter, no token...) must be answered with a 4xx error
//     in the error shape: tests that send bad input on purpose pass, a
//     server that accepts what the contract forbids fails.
//   - A request to a path or method the document does not have must be
//     answered 404 not_found or 405 method_not_allowed in the error shape.
package contracttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/repolock/repolock/api"
)

// Validator validates requests and responses against the document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
	errors *openapi3.Schema

	// undocumented are path prefixes of routes tests add on purpose
	// (Config.Hooks); only their error bodies are checked.
	undocumented []string

	mu      *sync.Mutex
	checked map[string]int // operationId → responses validated
}

// WithUndocumented returns a Validator that lets requests under the path
// prefixes through although the document does not have them (routes a
// test registers itself, such as a handler that panics); their error
// responses must still have the error shape.
func (v *Validator) WithUndocumented(prefixes ...string) *Validator {
	c := *v
	c.undocumented = append(append([]string(nil), v.undocumented...), prefixes...)
	return &c
}

var (
	sharedOnce sync.Once
	shared     *Validator
	sharedErr  error
)

// New returns a Validator on the embedded document. It is safe for
// concurrent use and shared by every caller of the process.
func New(tb testing.TB) *Validator {
	tb.Helper()
	sharedOnce.Do(func() { shared, sharedErr = newValidator() })
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

// Load parses the embedded document (api/openapi.yaml) with kin-openapi.
// Each call returns a fresh *openapi3.T, so callers may modify it (a test
// setting Servers, for instance). It lives here, not in package api, so
// that the binary, which serves the document as bytes, links no OpenAPI
// library.
func Load() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.YAML())
	if err != nil {
		return nil, fmt.Errorf("api: parse openapi.yaml: %w", err)
	}
	return doc, nil
}

// ValidateDocument parses the document and validates it against the
// OpenAPI 3.0 specification, examples included.
func ValidateDocument(ctx context.Context) error {
	doc, err := Load()
	if err != nil {
		return err
	}
	return doc.Validate(ctx, openapi3.EnableExamplesValidation())
}

func newValidator() (*Validator, error) {
	doc, err := Load()
	if err != nil {
		return nil, err
	}
	// Match any host: tests serve on random ports.
	doc.Servers = nil
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("contracttest: router: %w", err)
	}
	return &Validator{doc: doc, router: r, errors: doc.Components.Schemas["Error"].Value, checked: map[string]int{}, mu: &sync.Mutex{}}, nil
}

// Doc returns the parsed document (do not modify it).
func (v *Validator) Doc() *openapi3.T { return v.doc }

// Checked returns how many responses of each operationId were validated.
func (v *Validator) Checked() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := make(map[string]int, len(v.checked))
	for k, n := range v.checked {
		m[k] = n
	}
	return m
}

// Transport wraps next (http.DefaultTransport when nil) so that every
// exchange is validated; a violation is reported with tb.Errorf (the test
// fails, the response is still returned to the caller).
func (v *Validator) Transport(tb testing.TB, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper{v: v, tb: tb, next: next}
}

type roundTripper struct {
	v    *Validator
	tb   testing.TB
	next http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";"); resp.StatusCode < 300 && strings.TrimSpace(mt) == "text/event-stream" {
		// A stream has no end to read to: the request, the status and the
		// headers are checked, and that the document declares the stream.
		if verr := rt.v.check(req, reqBody, resp.StatusCode, resp.Header, nil, true); verr != nil {
			rt.tb.Errorf("contract violation: %v", verr)
		}
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if verr := rt.v.Check(req, reqBody, resp.StatusCode, resp.Header, body); verr != nil {
		rt.tb.Errorf("contract violation: %v", verr)
	}
	return resp, nil
}

// Check validates one exchange: the request (with its body) and the
// response's status, headers and body.
func (v *Validator) Check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	return v.check(req, reqBody, status, header, body, false)
}

// check is Check; stream: the response is a text/event-stream whose body
// is not checked (the document must declare that media type).
func (v *Validator) check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte, stream bool) error {
	where := req.Method + " " + req.URL.RequestURI() + " → " + fmt.Sprint(status)
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := v.router.FindRoute(r)
	for _, prefix := range v.undocumented {
		if err != nil && strings.HasPrefix(req.URL.Path, prefix) {
			if status < 400 || req.Method == http.MethodHead {
				return nil
			}
			return v.checkErrorBody(where, header, body)
		}
	}
	if err != nil {
		// Not in the document: the server must say 404 or 405.
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			return fmt.Errorf("%s: the document has no such operation (%v), yet the server answered %d", where, err, status)
		}
		if req.Method == http.MethodHead {
			return nil
		}
		return v.checkErrorBody(where, header, body)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearerAuth, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr != nil && (status < 400 || status > 499) {
		return fmt.Errorf("%s: the document rejects this request (%v), yet the server answered %d", where, reqErr, status)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			// A HEAD response has the GET's headers and no body.
			ExcludeResponseBody: req.Method == http.MethodHead || stream,
		},
	}
	if stream {
		r := route.Operation.Responses.Status(status)
		if r == nil || r.Value == nil || r.Value.Content.Get("text/event-stream") == nil {
			return fmt.Errorf("%s (%s): a text/event-stream response the document does not declare", where, route.Operation.OperationID)
		}
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("%s (%s): response does not match the document: %v\nbody: %s", where, route.Operation.OperationID, err, truncate(body))
	}
	if status >= 400 && req.Method != http.MethodHead {
		if err := v.checkErrorBody(where, header, body); err != nil {
			return err
		}
	}
	v.mu.Lock()
	v.checked[route.Operation.OperationID]++
	v.mu.Unlock()
	return nil
}

// checkErrorBody checks a body against the Error schema.
func (v *Validator) checkErrorBody(where string, header http.Header, body []byte) error {
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("%s: error with Content-Type %q, want application/json", where, ct)
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("%s: error body is not JSON: %v", where, err)
	}
	if err := v.errors.VisitJSON(doc); err != nil {
		return fmt.Errorf("%s: error body is not the error shape: %v\nbody: %s", where, err, truncate(body))
	}
	return nil
}

// bearerAuth accepts any well-formed "Authorization: Bearer <token>": the
// document cannot tell a tenant token from the admin token; the server's
// 401/403 responses are validated like any other response.
func bearerAuth(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	if s == nil || s.Type != "http" || !strings.EqualFold(s.Scheme, "bearer") {
		return fmt.Errorf("unsupported security scheme %s", in.SecuritySchemeName)
	}
	scheme, token, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return errors.New("no Authorization: Bearer token")
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}
