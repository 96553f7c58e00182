package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestErrorStatusesAgainstContract produces every error status of the
// contract on a documented operation, through apiEnv.send, so that each one
// is validated against api/openapi.yaml (the status must be declared for
// the operation and the body must be the error shape with a documented
// code). 429 is produced (and validated the same way) by TestRateLimit.
func TestErrorStatusesAgainstContract(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice, bob := e.tenant("alice"), e.tenant("bob")
	const repo = "https://github.com/argoproj/argocd-example-apps.git"
	e.must(http.StatusCreated, http.MethodPost, "/v1/applications", alice, map[string]any{"name": "guestbook", "repo_url": repo})
	e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "repo-one", "storage_namespace": "s3://bucket/r1", "default_branch": "main"})
	head := e.must(http.StatusOK, http.MethodGet, "/v1/repositories/repo-one/branches/main", alice, nil)["commit_id"].(string)
	jsonCT := http.Header{"Content-Type": {"application/json"}}

	for _, tc := range []struct {
		name         string
		method, path string
		token        string
		hdr          http.Header
		body         string
		wantStatus   int
		wantCode     string
	}{
		{"400 unknown field", "POST", "/v1/applications", alice, jsonCT, `{"name":"x","repo_url":"` + repo + `","bogus":1}`, 400, "invalid_argument"},
		{"400 bad page size", "GET", "/v1/applications?page_size=0", alice, nil, "", 400, "invalid_argument"},
		{"401 no token", "GET", "/v1/me", "", nil, "", 401, "unauthenticated"},
		{"401 unknown token", "GET", "/v1/applications", "rlt_nope", nil, "", 401, "unauthenticated"},
		{"403 tenant on admin", "GET", "/v1/admin/users", alice, nil, "", 403, "forbidden"},
		{"403 admin on tenant", "GET", "/v1/me", adminToken, nil, "", 403, "forbidden"},
		{"404 unknown application", "GET", "/v1/applications/0b8e6c1e-7d7a-4d1e-9a53-6f3f3c2b1a10", alice, nil, "", 404, "not_found"},
		{"404 unknown route", "GET", "/v1/nope", alice, nil, "", 404, "not_found"},
		{"405 wrong method", "PUT", "/v1/me", alice, nil, "", 405, "method_not_allowed"},
		{"409 claimed", "POST", "/v1/applications", bob, jsonCT, `{"name":"mine","repo_url":"` + repo + `"}`, 409, "repository_claimed"},
		{"409 name taken", "POST", "/v1/applications", alice, jsonCT, `{"name":"guestbook","repo_url":"` + repo + `"}`, 409, "already_exists"},
		{"412 stale expected commit", "PUT", "/v1/repositories/repo-one/branches/main", alice, jsonCT,
			`{"commit_id":"` + head + `","expected_commit_id":"` + strings.Repeat("a", 64) + `"}`, 412, "precondition_failed"},
		{"413 body too large", "POST", "/v1/applications", alice, jsonCT, `{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "payload_too_large"},
		{"415 not JSON", "POST", "/v1/applications", alice, http.Header{"Content-Type": {"text/plain"}}, `{}`, 415, "unsupported_media_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			status, _, out := e.on(t).send(tc.method, tc.path, tc.token, tc.hdr, body)
			resp := e.on(t).object(tc.method, tc.path, status, out)
			expectError(t, tc.method+" "+tc.path, status, resp, tc.wantStatus, tc.wantCode, "")
		})
	}

	t.Run("503 database closed", func(t *testing.T) {
		t.Parallel()
		e := newAPIEnv(t)
		e.must(http.StatusOK, http.MethodGet, "/readyz", "", nil)
		if err := e.db.Close(); err != nil {
			t.Fatal(err)
		}
		e.wantErr(503, "unavailable", http.MethodGet, "/readyz", "", nil)
	})

	t.Run("504 request timeout", func(t *testing.T) {
		t.Parallel()
		e := newAPIEnv(t, withRequestTimeout(300*time.Millisecond))
		// Hold a lock the handler's query needs until the request's
		// deadline has passed: the query is cancelled and the request
		// answered 504, whatever the machine's speed.
		tx, err := e.db.BeginTxx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(t.Context(), `LOCK TABLE cluster_users IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		e.wantErr(504, "timeout", http.MethodGet, "/v1/admin/users", adminToken, nil)
	})
}
