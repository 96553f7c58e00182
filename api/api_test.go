package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/repolock/repolock/api"
	"github.com/repolock/repolock/api/internal/openapijson"
	"github.com/repolock/repolock/internal/contracttest"
)

// TestOpenAPILint is `make lint`'s OpenAPI step: the document is valid
// OpenAPI 3.0 (kin-openapi's validation, examples included) and follows the
// project's rules: every operation has an operationId, a summary, a
// description, a tag, an explicit security, documented error responses, and
// shared error responses in the one error shape. The rules the generators
// and linters of scripts/test-openapi.sh need that can be checked offline
// are in TestOpenAPIComponentsUsed and TestOpenAPIGeneratedNames.
func TestOpenAPILint(t *testing.T) {
	if err := contracttest.ValidateDocument(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not valid OpenAPI 3.0: %v", err)
	}
	doc, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Errorf("openapi = %q, want 3.0.x", doc.OpenAPI)
	}
	for _, name := range []string{"tenantToken", "adminToken"} {
		if doc.Components.SecuritySchemes[name] == nil {
			t.Errorf("security scheme %s is missing", name)
		}
	}
	errorSchema := doc.Components.Schemas["Error"]
	if errorSchema == nil {
		t.Fatal("components.schemas.Error is missing")
	}
	seen := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", where)
			} else if prev, dup := seen[op.OperationID]; dup {
				t.Errorf("%s: operationId %s already used by %s", where, op.OperationID, prev)
			}
			seen[op.OperationID] = where
			if op.Summary == "" {
				t.Errorf("%s: no summary", where)
			}
			if strings.TrimSpace(op.Description) == "" {
				t.Errorf("%s (operationId %s): no description: say what it does beyond the summary (who may call it, what it changes, its notable errors)", where, op.OperationID)
			}
			if len(op.Tags) == 0 {
				t.Errorf("%s: no tags", where)
			}
			if op.Security == nil {
				t.Errorf("%s: no explicit security (use [] for none)", where)
			}
			var hasSuccess, hasError bool
			for code, ref := range op.Responses.Map() {
				switch {
				case strings.HasPrefix(code, "2"):
					hasSuccess = true
				case strings.HasPrefix(code, "4"), strings.HasPrefix(code, "5"):
					hasError = true
					if ref.Ref == "" || !strings.HasPrefix(ref.Ref, "#/components/responses/") {
						t.Errorf("%s: response %s is not a shared components/responses entry", where, code)
					}
				default:
					t.Errorf("%s: response %q: only explicit 2xx, 4xx and 5xx statuses", where, code)
				}
			}
			if !hasSuccess || !hasError {
				t.Errorf("%s: needs a success and error responses (success %v, error %v)", where, hasSuccess, hasError)
			}
			authed := op.Security != nil && len(*op.Security) > 0
			for _, want := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
				if authed && op.Responses.Status(want) == nil {
					t.Errorf("%s: authenticated operation without a %d response", where, want)
				}
			}
			if op.RequestBody != nil {
				for _, want := range []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType} {
					if op.Responses.Status(want) == nil {
						t.Errorf("%s: takes a body but has no %d response", where, want)
					}
				}
				s := op.RequestBody.Value.Content.Get("application/json").Schema.Value
				if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
					t.Errorf("%s: request body schema must say additionalProperties: false (unknown fields are rejected)", where)
				}
			}
			for _, p := range op.Parameters {
				if p.Value.Name == "page_size" && op.Responses.Status(http.StatusBadRequest) == nil {
					t.Errorf("%s: paginated but no 400 response", where)
				}
			}
		}
	}
	// Every shared error response uses the error shape; the retryable ones
	// say when to retry.
	for name, ref := range doc.Components.Responses {
		mt := ref.Value.Content.Get("application/json")
		if mt == nil || mt.Schema == nil || mt.Schema.Ref != "#/components/schemas/Error" {
			t.Errorf("components.responses.%s does not use the Error schema", name)
		}
	}
	for _, name := range []string{"TooManyRequests", "Unavailable"} {
		if doc.Components.Responses[name].Value.Headers["Retry-After"] == nil {
			t.Errorf("components.responses.%s has no Retry-After header", name)
		}
	}
	if len(seen) < 50 {
		t.Errorf("only %d operations; the document should describe every route", len(seen))
	}
	if doc.Info.License == nil || doc.Info.License.Name == "" || doc.Info.License.URL == "" {
		t.Errorf("info.license needs a name and a url")
	}
	if doc.Info.Contact == nil || doc.Info.Contact.URL == "" {
		t.Errorf("info.contact needs a url")
	}
}

// TestOpenAPIComponentsUsed: every component is referenced (redocly's
// no-unused-components): an unused one is either dead or a $ref that was
// meant to point at it.
func TestOpenAPIComponentsUsed(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(api.JSON(), &doc); err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "$ref" {
					refs[s] = true
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	components, _ := doc["components"].(map[string]any)
	for section, entries := range components {
		if section == "securitySchemes" {
			continue // referenced by name in security requirements
		}
		m, _ := entries.(map[string]any)
		for name := range m {
			if ref := "#/components/" + section + "/" + name; !refs[ref] {
				t.Errorf("components.%s.%s is never used (no $ref to %s): remove it or refer to it", section, name, ref)
			}
		}
	}
}

// TestOpenAPIGeneratedNames: the Go type names oapi-codegen derives from the
// document are unique, so that its output compiles with default settings
// (scripts/test-openapi.sh runs the generator itself where the module proxy
// is reachable; this is the offline part). It names, like oapi-codegen, a
// type after each schema and parameter component, each inline enum
// property (<Schema><Property>), and per operation <OperationId>Response,
// <OperationId>Params and <OperationId>JSONRequestBody / JSONBody.
func TestOpenAPIGeneratedNames(t *testing.T) {
	doc, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	origin := map[string][]string{}
	add := func(name, from string) { origin[name] = append(origin[name], from) }
	for name, s := range doc.Components.Schemas {
		add(goName(name), "components.schemas."+name)
		if s.Value == nil {
			continue
		}
		for prop, ps := range s.Value.Properties {
			if ps.Ref == "" && ps.Value != nil && len(ps.Value.Enum) > 0 {
				add(goName(name)+goName(prop), "the enum of components.schemas."+name+"."+prop)
			}
		}
	}
	for name := range doc.Components.Parameters {
		add(goName(name), "components.parameters."+name)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			id := goName(op.OperationID)
			where := "operation " + op.OperationID + " (" + method + " " + path + ")"
			add(id+"Response", where)
			if op.RequestBody != nil {
				add(id+"JSONRequestBody", where)
				add(id+"JSONBody", where)
			}
			for _, p := range op.Parameters {
				if p.Value != nil && (p.Value.In == "query" || p.Value.In == "header") {
					add(id+"Params", where)
					break
				}
			}
		}
	}
	for name, from := range origin {
		if from = slices.Compact(from); len(from) > 1 {
			sort.Strings(from)
			t.Errorf("generated clients would declare %s twice, from %s: rename one", name, strings.Join(from, " and "))
		}
	}
}

// goName is the Go identifier oapi-codegen makes of a name: words split at
// '_', '-', '.', ' ' and '/', each capitalized.
func goName(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if r == '_' || r == '-' || r == '.' || r == ' ' || r == '/' {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestErrorCodes: the code enum of the document is the server's vocabulary.
func TestErrorCodes(t *testing.T) {
	doc, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		got = append(got, v.(string))
	}
	sort.Strings(got)
	want := []string{"alias_conflict", "already_exists", "conflict", "cursor_expired", "fenced", "forbidden", "handover_pending", "internal", "invalid_argument", "lease_held", "lock_in_use", "method_not_allowed", "not_found",
		"payload_too_large", "precondition_failed", "repository_claimed", "repository_deleting", "repository_reserved", "reservation_conflict", "secret_in_field", "timeout", "too_many_requests",
		"unauthenticated", "unavailable", "unsupported_media_type"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("ErrorCode enum = %v, want %v", got, want)
	}
}

// TestJSONIsGenerated: openapi.json, which the binary embeds and serves, is
// what go generate ./api/ makes of openapi.yaml today, and the same
// document.
func TestJSONIsGenerated(t *testing.T) {
	want, err := openapijson.FromYAML(api.YAML())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(api.JSON(), want) {
		t.Fatal("api/openapi.json is stale: run go generate ./api/ and commit api/openapi.json")
	}
	var doc openapi3.T
	if err := json.Unmarshal(api.JSON(), &doc); err != nil {
		t.Fatal(err)
	}
	y, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	if doc.Paths.Len() != y.Paths.Len() || doc.Info.Title != y.Info.Title || len(doc.Components.Schemas) != len(y.Components.Schemas) {
		t.Errorf("JSON has %d paths, %d schemas (%q), YAML %d, %d (%q)", doc.Paths.Len(), len(doc.Components.Schemas), doc.Info.Title, y.Paths.Len(), len(y.Components.Schemas), y.Info.Title)
	}
}
