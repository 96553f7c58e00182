package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/repolock/repolock/api"
	"github.com/repolock/repolock/internal/contracttest"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/httpapi/httpapitest"
)

// newContractServer builds the server the way the rest of the package does.
// It is the one place that knows how; keep it so when Config changes.
func newContractServer(t *testing.T) *httpapi.Server {
	t.Helper()
	return httpapitest.New(t, dbtest.New(t), adminToken)
}

// pendingOperations are in the document ahead of the code: they may be
// missing from Echo (and are not reported when they are registered).
var pendingOperations = map[string]string{}

var echoParam = regexp.MustCompile(`:([A-Za-z_][A-Za-z0-9_]*)`)

// TestOpenAPIRouteCoverage: every route registered in Echo is in the
// document and every operation of the document is registered.
func TestOpenAPIRouteCoverage(t *testing.T) {
	t.Parallel()
	srv := newContractServer(t)
	registered := map[string]bool{}
	for _, r := range srv.Echo.Routes() {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		default:
			continue // Echo's own not-found/any routes of groups
		}
		if strings.HasSuffix(r.Path, "*") {
			continue // catch-alls Echo adds for group middleware
		}
		registered[r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}")] = true
	}
	doc, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	var missingInDoc, missingInEcho []string
	for k := range registered {
		if !documented[k] {
			missingInDoc = append(missingInDoc, k)
		}
	}
	for k := range documented {
		if !registered[k] && pendingOperations[k] == "" {
			missingInEcho = append(missingInEcho, k)
		}
	}
	sort.Strings(missingInDoc)
	sort.Strings(missingInEcho)
	for _, k := range missingInDoc {
		t.Errorf("route %s is registered but not in api/openapi.yaml", k)
	}
	for _, k := range missingInEcho {
		t.Errorf("api/openapi.yaml has %s but no route is registered", k)
	}
	if len(registered) < 50 {
		t.Errorf("only %d routes found; is the server built with every route?", len(registered))
	}
}

// TestOpenAPIServed: the document is served without a token, as YAML and
// JSON, and both responses match the document itself.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(newContractServer(t))
	t.Cleanup(ts.Close)
	hc := &http.Client{Transport: contracttest.New(t).Transport(t, nil)}
	for _, tc := range []struct{ path, ct, prefix string }{
		{"/openapi.yaml", "application/yaml", "# The repolock HTTP API contract"},
		{"/openapi.json", "application/json", `{"openapi":"3.0.`},
	} {
		resp, err := hc.Get(ts.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tc.ct || !strings.HasPrefix(string(b), tc.prefix) {
			t.Errorf("GET %s = %d %q %.40q, want 200 %q %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.ct, tc.prefix)
		}
	}
	if want := api.YAML(); true {
		resp, err := hc.Get(ts.URL + "/openapi.yaml")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != string(want) {
			t.Errorf("GET /openapi.yaml is not the embedded document")
		}
	}
}
