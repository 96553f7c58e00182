package contracttest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/contracttest"
)

const me = `{"id":"0b8e6c1e-7d7a-4d1e-9a53-6f3f3c2b1a10","name":"alice","display_name":"","created_at":"2026-11-24T01:00:00Z"}`

// TestUndocumented: routes a test adds on purpose pass, but their errors
// must still have the error shape.
func TestUndocumented(t *testing.T) {
	v := contracttest.New(t).WithUndocumented("/v1/admin/test/")
	h := http.Header{"Content-Type": {"application/json"}}
	req := httptest.NewRequest("GET", "http://127.0.0.1:1/v1/admin/test/panic", nil)
	if err := v.Check(req, nil, 500, h, []byte(`{"error":{"code":"internal","message":"internal error"}}`)); err != nil {
		t.Errorf("undocumented route with a proper error: %v", err)
	}
	if err := v.Check(req, nil, 500, h, []byte(`panic!`)); err == nil {
		t.Error("undocumented route with a broken error body passed")
	}
	if err := contracttest.New(t).Check(req, nil, 500, h, []byte(`{"error":{"code":"internal","message":"internal error"}}`)); err == nil {
		t.Error("the shared validator let an undocumented route through")
	}
}

// TestValidatorCatchesDrift injects handlers that drift from the document
// and checks that Check reports each one, and that conforming exchanges
// pass.
func TestValidatorCatchesDrift(t *testing.T) {
	v := contracttest.New(t)
	for _, tc := range []struct {
		name          string
		method, path  string
		token, ct     string
		reqBody       string
		status        int
		respCT, body  string
		wantViolation string // "" for none
	}{
		{"conforming", "GET", "/v1/me", "t", "", "", 200, "application/json", me, ""},
		{"undocumented field", "GET", "/v1/me", "t", "", "", 200, "application/json",
			strings.Replace(me, `"name"`, `"extra":1,"name"`, 1), "response does not match"},
		{"missing required field", "GET", "/v1/me", "t", "", "", 200, "application/json", `{"id":"0b8e6c1e-7d7a-4d1e-9a53-6f3f3c2b1a10"}`, "response does not match"},
		{"undocumented status", "GET", "/v1/me", "t", "", "", 418, "application/json", `{"error":{"code":"internal","message":"x"}}`, "response does not match"},
		{"error not in the shape", "GET", "/v1/applications/x", "t", "", "", 404, "application/json", `{"message":"nope"}`, "response does not match"},
		{"unknown error code", "GET", "/v1/applications/x", "t", "", "", 404, "application/json", `{"error":{"code":"nope","message":"x"}}`, "response does not match"},
		{"documented error", "GET", "/v1/applications/x", "t", "", "", 404, "application/json", `{"error":{"code":"not_found","message":"x"}}`, ""},
		{"claimed with owner", "POST", "/v1/applications", "t", "application/json", `{"name":"a","repo_url":"u"}`, 409, "application/json",
			`{"error":{"code":"repository_claimed","message":"x","owner":"bob"}}`, ""},
		{"bad request accepted", "POST", "/v1/applications", "t", "application/json", `{"name":"a","repo_url":"u","bogus":1}`, 201, "application/json", `{}`, "the document rejects this request"},
		{"bad request refused", "POST", "/v1/applications", "t", "application/json", `{"name":"a","repo_url":"u","bogus":1}`, 400, "application/json",
			`{"error":{"code":"invalid_argument","message":"unknown field \"bogus\""}}`, ""},
		{"no token accepted", "GET", "/v1/me", "", "", "", 200, "application/json", me, "the document rejects this request"},
		{"no token refused", "GET", "/v1/me", "", "", "", 401, "application/json", `{"error":{"code":"unauthenticated","message":"x"}}`, ""},
		{"unknown path answered 200", "GET", "/v1/nope", "t", "", "", 200, "application/json", `{}`, "no such operation"},
		{"unknown path 404", "GET", "/v1/nope", "t", "", "", 404, "application/json", `{"error":{"code":"not_found","message":"no such route"}}`, ""},
		{"wrong method 405", "PUT", "/v1/me", "t", "", "", 405, "application/json", `{"error":{"code":"method_not_allowed","message":"x"}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://127.0.0.1:1"+tc.path, strings.NewReader(tc.reqBody))
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			h := http.Header{}
			h.Set("Content-Type", tc.respCT)
			err := v.Check(req, []byte(tc.reqBody), tc.status, h, []byte(tc.body))
			switch {
			case tc.wantViolation == "" && err != nil:
				t.Errorf("unexpected violation: %v", err)
			case tc.wantViolation != "" && (err == nil || !strings.Contains(err.Error(), tc.wantViolation)):
				t.Errorf("violation = %v, want one saying %q", err, tc.wantViolation)
			}
		})
	}
}
