package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/repolock/repolock/api"
)

// TestOpenAPILint is `make lint`'s OpenAPI step: the document is valid
// OpenAPI 3.0 (kin-openapi's validation, examples included) and follows the
// project's rules: every operation has an operationId, a summary, a tag, an
// explicit security, documented error responses, and shared error
// responses in the one error shape.
func TestOpenAPILint(t *testing.T) {
	if err := api.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not valid OpenAPI 3.0: %v", err)
	}
	doc, err := api.Load()
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
}

// TestErrorCodes: the code enum of the document is the server's vocabulary.
func TestErrorCodes(t *testing.T) {
	doc, err := api.Load()
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

// TestJSON: the JSON form is the same document.
func TestJSON(t *testing.T) {
	b, err := api.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc openapi3.T
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	y, err := api.Load()
	if err != nil {
		t.Fatal(err)
	}
	if doc.Paths.Len() != y.Paths.Len() || doc.Info.Title != y.Info.Title {
		t.Errorf("JSON has %d paths (%q), YAML %d (%q)", doc.Paths.Len(), doc.Info.Title, y.Paths.Len(), y.Info.Title)
	}
}
