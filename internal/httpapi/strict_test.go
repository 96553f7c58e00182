package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/version"
)

// withRateLimit sets Config.RateLimit and RateBurst.
func withRateLimit(limit float64, burst int) envOption {
	return func(_ *apiEnv, cfg *httpapi.Config) { cfg.RateLimit, cfg.RateBurst = limit, burst }
}

// TestStrictInput: the request bodies, path and query parameters the issue
// found answered wrongly (500, or silently accepted) are 400
// invalid_argument with an exact message, and nothing is written.
func TestStrictInput(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	e.tenant("alice")
	alice := e.tenant("bob")
	const users = "/v1/admin/users"
	for _, tc := range []struct {
		name, method, path, token, body string
		msg                             string
	}{
		{"NUL in display_name", http.MethodPost, users, adminToken, `{"name":"x1","display_name":"a\u0000b"}`, "display_name must not contain NUL bytes"},
		{"LF in display_name", http.MethodPost, users, adminToken, `{"name":"x2","display_name":"a\nb"}`, "display_name must be a single line (no CR or LF)"},
		{"CR in display_name", http.MethodPost, users, adminToken, `{"name":"x3","display_name":"a\rb"}`, "display_name must be a single line (no CR or LF)"},
		{"escape in display_name", http.MethodPost, users, adminToken, `{"name":"x4","display_name":"a\u001b[31m"}`, "display_name must not contain control characters (U+001B)"},
		{"C1 control in name", http.MethodPost, users, adminToken, `{"name":"x5\u0085"}`, "name must not contain control characters (U+0085)"},
		{"invalid UTF-8", http.MethodPost, users, adminToken, "{\"name\":\"x6\",\"display_name\":\"a\xffb\"}", "request body is not valid UTF-8"},
		{"case variant of a field", http.MethodPost, users, adminToken, `{"NAME":"x7"}`, `unknown field "NAME"`},
		{"case variants and a duplicate", http.MethodPost, "/v1/applications", alice,
			`{"NAME":"a","Repo_URL":"https://github.com/acme/x","name":"b"}`, `unknown field "NAME"`},
		{"duplicate key", http.MethodPost, users, adminToken, `{"name":"x8","name":"x9"}`, `duplicate field "name"`},
		{"duplicate nested key", http.MethodPost, "/v1/applications", alice, `{"name":"a","repo_url":"https://github.com/acme/x","name":"b"}`, `duplicate field "name"`},
		{"NUL in a field name", http.MethodPost, users, adminToken, `{"na\u0000me":"x"}`, "a field name must not contain NUL bytes"},
		{"unknown field", http.MethodPost, users, adminToken, `{"name":"x10","color":"red"}`, `unknown field "color"`},
		{"truncated", http.MethodPost, users, adminToken, `{"name":`, "request body is not valid JSON: unexpected end"},
		{"NUL in a path parameter", http.MethodPost, users + "/a%00b/tokens", adminToken, "", "path parameter name must not contain NUL bytes"},
		{"NUL in a path parameter (revoke)", http.MethodDelete, users + "/%00/tokens", adminToken, "", "path parameter name must not contain NUL bytes"},
		{"NUL in a path parameter (delete)", http.MethodDelete, users + "/%00", adminToken, "", "path parameter name must not contain NUL bytes"},
		{"LF in a path parameter", http.MethodGet, "/v1/applications/a%0Ab", alice, "", "path parameter id must be a single line (no CR or LF)"},
		{"invalid UTF-8 in a path parameter", http.MethodGet, "/v1/repositories/a%FFb", alice, "", "path parameter name is not valid UTF-8"},
		{"NUL in a query parameter", http.MethodGet, "/v1/applications?page_token=%00", alice, "", "query parameter page_token must not contain NUL bytes"},
		{"lone high surrogate", http.MethodPost, users, adminToken, `{"name":"x11","display_name":"a\ud800b"}`, `request body holds the escape \ud800, a lone UTF-16 surrogate: not a character`},
		{"lone low surrogate", http.MethodPost, users, adminToken, `{"name":"x12","display_name":"\uDC00"}`, `request body holds the escape \uDC00, a lone UTF-16 surrogate: not a character`},
		{"reversed pair", http.MethodPost, users, adminToken, `{"name":"x13","display_name":"\udc00\ud800"}`, `request body holds the escape \udc00, a lone UTF-16 surrogate: not a character`},
		{"high surrogate before a letter", http.MethodPost, users, adminToken, `{"name":"x14","display_name":"\ud800\u0041"}`, `request body holds the escape \ud800, a lone UTF-16 surrogate: not a character`},
		{"surrogate in a key", http.MethodPost, users, adminToken, `{"na\ud800me":"x15"}`, `request body holds the escape \ud800, a lone UTF-16 surrogate: not a character`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := ""
			var body []byte
			if tc.body != "" {
				ct, body = "application/json", []byte(tc.body)
			}
			status, resp := e.on(t).callRaw(tc.method, tc.path, tc.token, ct, body)
			expectError(t, tc.name, status, resp, http.StatusBadRequest, "invalid_argument", tc.msg)
		})
	}
	var n int
	if err := e.db.GetContext(t.Context(), &n, `SELECT count(*) FROM cluster_users`); err != nil || n != 2 {
		t.Fatalf("tenants: %d %v, want the 2 created by the test", n, err)
	}
	if err := e.db.GetContext(t.Context(), &n, `SELECT count(*) FROM applications`); err != nil || n != 0 {
		t.Fatalf("applications: %d %v, want none", n, err)
	}
	// Exact names still work, and a multi-line display name does not.
	e.must(http.StatusCreated, http.MethodPost, users, adminToken, map[string]any{"name": "carol", "display_name": "Carol Ünïcode ✓"})
	// A surrogate pair is a character, and an escaped backslash before
	// "ud800" is text.
	status, resp := e.callRaw(http.MethodPost, users, adminToken, "application/json", []byte(`{"name":"dave","display_name":"\ud83d\ude00 \\ud800"}`))
	if status != http.StatusCreated || resp["display_name"] != "😀 \\ud800" {
		t.Fatalf("a surrogate pair: %d %v", status, resp)
	}
}

// TestRequestIDEcho: only a caller ID of the safe set is echoed.
func TestRequestIDEcho(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	long := strings.Repeat("a", httpapi.MaxRequestIDLen)
	for _, tc := range []struct {
		id   string
		echo bool
	}{
		{"abc-DEF_123.4:5", true},
		{long, true},
		{long + "a", false},
		{"has space", false},
		{`"quoted"`, false},
		{"<script>alert(1)</script>", false},
		{"semi;colon", false},
		{"ünï", false},
	} {
		status, hdr, _ := e.send(http.MethodGet, "/healthz", "", http.Header{"X-Request-Id": {tc.id}}, nil)
		got := hdr.Get("X-Request-Id")
		if status != http.StatusOK || (got == tc.id) != tc.echo || got == "" {
			t.Errorf("X-Request-ID %q: answered %q (status %d), want echoed=%v", tc.id, got, status, tc.echo)
		}
		if !tc.echo && (len(got) != 32 || strings.Trim(got, "0123456789abcdef") != "") {
			t.Errorf("X-Request-ID %q: generated %q, want 32 hex digits", tc.id, got)
		}
	}
}

// TestHeadAnd405: HEAD on the health routes answers like GET without a
// body; every 405 (Echo's own and the group catch-all's) has one shape.
func TestHeadAnd405(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		status, hdr, body := e.send(http.MethodHead, path, "", nil, nil)
		if status != http.StatusOK || len(body) != 0 || hdr.Get("X-Request-Id") == "" {
			t.Errorf("HEAD %s: %d %q", path, status, body)
		}
	}
	for _, tc := range []struct{ method, path, token, allow string }{
		{http.MethodPost, "/healthz", "", "GET, HEAD"},
		{http.MethodDelete, "/readyz", "", "GET, HEAD"},
		{http.MethodPut, "/v1/admin/users", adminToken, "GET, POST"},
		{http.MethodHead, "/v1/admin/users", adminToken, "GET, POST"},
		{http.MethodPut, "/v1/me", "", "GET"},
		{"FROB", "/v1/me", "", "GET"},
	} {
		status, hdr, out := e.send(tc.method, tc.path, tc.token, nil, nil)
		if status != http.StatusMethodNotAllowed || hdr.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", tc.method, tc.path, status, hdr.Get("Allow"), tc.allow)
			continue
		}
		if tc.method == http.MethodHead {
			continue
		}
		resp := e.object(tc.method, tc.path, status, out)
		m := tc.method
		if m == "FROB" {
			m = "OTHER"
		}
		expectError(t, tc.method+" "+tc.path, status, resp, 405, "method_not_allowed",
			fmt.Sprintf("method %s is not allowed here; allowed: %s", m, tc.allow))
	}
	// The metrics label unknown methods OTHER: a caller cannot create series.
	_, _, metrics := e.send(http.MethodGet, "/metrics", "", nil, nil)
	if strings.Contains(string(metrics), `method="FROB"`) || !strings.Contains(string(metrics), `method="OTHER"`) {
		t.Errorf("/metrics: want method=\"OTHER\" and no FROB series")
	}
}

// TestVersion: GET /version needs no token and carries the build info.
func TestVersion(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	resp := e.must(http.StatusOK, http.MethodGet, "/version", "", nil)
	want := version.Get()
	if resp["version"] != want.Version || resp["revision"] != want.Revision || resp["go_version"] != want.GoVersion || want.GoVersion == "" {
		t.Fatalf("GET /version = %v, want %+v", resp, want)
	}
}

// TestAdminUsersPagination: the admin list pages like every list.
func TestAdminUsersPagination(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	for _, n := range []string{"dave", "alice", "carol", "bob", "eve"} {
		e.tenant(n)
	}
	var names []string
	path := "/v1/admin/users?page_size=2"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more than 3 pages of 2 for 5 tenants: %v", names)
		}
		resp := e.must(http.StatusOK, http.MethodGet, path, adminToken, nil)
		items := resp["items"].([]any)
		for _, it := range items {
			names = append(names, it.(map[string]any)["name"].(string))
		}
		next := resp["next_page_token"].(string)
		if next == "" {
			if len(items) != 1 {
				t.Fatalf("last page has %d items, want 1", len(items))
			}
			break
		}
		if len(items) != 2 {
			t.Fatalf("page has %d items, want 2", len(items))
		}
		path = "/v1/admin/users?page_size=2&page_token=" + next
	}
	if got := strings.Join(names, ","); got != "alice,bob,carol,dave,eve" {
		t.Fatalf("names = %s", got)
	}
	for _, q := range []string{"page_size=0", "page_size=501", "page_size=abc", "page_token=bogus"} {
		status, resp := e.call(http.MethodGet, "/v1/admin/users?"+q, adminToken, nil)
		if status != 400 || errorOf(resp)["code"] != "invalid_argument" {
			t.Errorf("%s: %d %v, want 400 invalid_argument", q, status, resp)
		}
	}
	// A token of another list is refused.
	alice := e.tenant("zed")
	e.must(http.StatusCreated, http.MethodPost, "/v1/applications", alice, map[string]any{"name": "a1", "repo_url": "https://github.com/acme/a1"})
	e.must(http.StatusCreated, http.MethodPost, "/v1/applications", alice, map[string]any{"name": "a2", "repo_url": "https://github.com/acme/a2"})
	other := e.must(http.StatusOK, http.MethodGet, "/v1/applications?page_size=1", alice, nil)["next_page_token"].(string)
	e.wantErr(400, "invalid_argument", http.MethodGet, "/v1/admin/users?page_token="+other, adminToken, nil)
}

// TestRateLimit: a tenant over its bucket gets 429 too_many_requests with
// Retry-After; another tenant and the admin token are not affected. The
// refill rate is so low (one request per 1000 s) that no request of the
// test can be refilled: no clock involved.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withRateLimit(0.001, 3))
	alice := e.tenant("alice")
	bob := e.tenant("bob")
	for i := 0; i < 3; i++ {
		e.must(http.StatusOK, http.MethodGet, "/v1/me", alice, nil)
	}
	status, hdr, out := e.send(http.MethodGet, "/v1/me", alice, nil, nil)
	resp := e.object(http.MethodGet, "/v1/me", status, out)
	expectError(t, "4th request", status, resp, http.StatusTooManyRequests, "too_many_requests", "")
	if ra := hdr.Get("Retry-After"); ra != "1000" {
		t.Fatalf("Retry-After = %q, want 1000", ra)
	}
	// A refused request takes no token: still refused, same wait.
	status, hdr, _ = e.send(http.MethodGet, "/v1/applications", alice, nil, nil)
	if status != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1000" {
		t.Fatalf("5th request: %d Retry-After %q", status, hdr.Get("Retry-After"))
	}
	e.must(http.StatusOK, http.MethodGet, "/v1/me", bob, nil)
	for i := 0; i < 10; i++ {
		e.must(http.StatusOK, http.MethodGet, "/v1/admin/users", adminToken, nil)
	}
}

// TestRateLimitOff: RateLimit 0 is off, as on --rate-limit: a tenant is
// never refused, however far past the burst it goes (with the limit on,
// TestRateLimit's fourth request is refused).
func TestRateLimitOff(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withRateLimit(0, 1))
	alice := e.tenant("alice")
	for i := 0; i < 20; i++ {
		e.must(http.StatusOK, http.MethodGet, "/v1/me", alice, nil)
	}
}
