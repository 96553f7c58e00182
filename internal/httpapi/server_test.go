package httpapi_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/httpapi"
)

func TestFaultsBecomeCleanJSONErrors(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withRequestTimeout(200*time.Millisecond), withLogs(), withRoutes(func(s *httpapi.Server) {
		s.Admin.GET("/test/panic", func(c echo.Context) error { panic("kaboom: secret stack detail") })
		s.Admin.GET("/test/internal", func(c echo.Context) (err error) {
			defer repolock.WrapOp(&err, "test.Internal")
			return errors.New(`pq: relation "secret_table" does not exist`)
		})
		s.Admin.GET("/test/slow", func(c echo.Context) error {
			<-c.Request().Context().Done()
			return c.Request().Context().Err()
		})
		s.Admin.GET("/test/claimed", func(c echo.Context) error {
			claimed := repolock.Errorf(repolock.ERepositoryClaimed, "a repository URL is already claimed by another user: bob")
			claimed.Details = map[string]any{"owner": "bob"}
			return claimed
		})
	}))

	tests := []struct {
		path       string
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{"/v1/admin/test/panic", 500, "internal", "internal error"},
		{"/v1/admin/test/internal", 500, "internal", "internal error"},
		{"/v1/admin/test/slow", 504, "timeout", "the request timed out"},
		{"/v1/admin/test/claimed", 409, "repository_claimed", "a repository URL is already claimed by another user: bob"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			status, resp := e.on(t).call(http.MethodGet, tc.path, adminToken, nil)
			if errObj := errorOf(resp); status != tc.wantStatus || errObj["code"] != tc.wantCode || errObj["message"] != tc.wantMsg {
				t.Fatalf("got %d %v, want %d %s %q", status, errObj, tc.wantStatus, tc.wantCode, tc.wantMsg)
			}
		})
	}
	_, resp := e.call(http.MethodGet, "/v1/admin/test/claimed", adminToken, nil)
	if errorOf(resp)["owner"] != "bob" {
		t.Fatalf("details not in the error body: %v", errorOf(resp))
	}
	// The causes are in the logs (for operators), not in responses.
	// A 500's log line names the failed operation; its body does not.
	for _, want := range []string{"kaboom: secret stack detail", "secret_table", `"stack"`, `"op":"test.Internal"`, `"error":"test.Internal: pq: relation`} {
		if !strings.Contains(e.logs.String(), want) {
			t.Errorf("logs lack %q", want)
		}
	}
	// The server survived the panic.
	if status, _, _ := e.raw(http.MethodGet, "/healthz", adminToken, "", nil); status != 200 {
		t.Fatalf("healthz after panic: %d", status)
	}
}

func TestRequestIDs(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withRequestTimeout(time.Second), withLogs())
	_, hdr, _ := e.send(http.MethodGet, "/healthz", adminToken, http.Header{"X-Request-Id": {"caller-chosen-id"}}, nil)
	if got := hdr.Get("X-Request-ID"); got != "caller-chosen-id" {
		t.Fatalf("caller's request id not kept: %q", got)
	}
	_, hdr, _ = e.send(http.MethodGet, "/healthz", adminToken, http.Header{"X-Request-Id": {strings.Repeat("x", 500)}}, nil)
	first := hdr.Get("X-Request-ID")
	if len(first) != 32 || strings.Trim(first, "0123456789abcdef") != "" {
		t.Fatalf("overlong request id not replaced by 32 hex digits: %q", first)
	}
	_, hdr, _ = e.send(http.MethodGet, "/healthz", adminToken, nil, nil)
	if got := hdr.Get("X-Request-ID"); len(got) != 32 || got == first {
		t.Fatalf("generated request ids %q then %q", first, got)
	}
	if !strings.Contains(e.logs.String(), `"request_id":"caller-chosen-id"`) {
		t.Fatalf("access log lacks the request id:\n%s", e.logs.String())
	}
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withRequestTimeout(time.Second))
	status, hdr, out := e.raw(http.MethodPut, "/v1/admin/users", adminToken, "", nil)
	resp := e.object(http.MethodPut, "/v1/admin/users", status, out)
	if status != 405 || errorOf(resp)["code"] != "method_not_allowed" {
		t.Fatalf("got %d %v", status, errorOf(resp))
	}
	if got := hdr.Get("Allow"); got != "GET, POST" {
		t.Fatalf("Allow = %q, want GET, POST", got)
	}
}

func TestParsePage(t *testing.T) {
	t.Parallel()
	e := echo.New()
	tests := []struct {
		query    string
		wantSize int
		wantErr  bool
	}{
		{"", httpapi.DefaultPageSize, false},
		{"page_size=1", 1, false},
		{"page_size=500", 500, false},
		{"page_size=0", 0, true},
		{"page_size=501", 0, true},
		{"page_size=-3", 0, true},
		{"page_size=ten", 0, true},
		{"page_token=" + strings.Repeat("a", 1025), 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			c := e.NewContext(httptest.NewRequest(http.MethodGet, "/?"+tc.query, nil), httptest.NewRecorder())
			p, err := httpapi.ParsePage(c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && repolock.ErrorCode(err) != repolock.EInvalid {
				t.Fatalf("code %q", repolock.ErrorCode(err))
			}
			if !tc.wantErr && p.Size != tc.wantSize {
				t.Fatalf("size %d, want %d", p.Size, tc.wantSize)
			}
		})
	}
}

// TestAccessLogLine: one line per request with its fields and their JSON
// types (the access log is written with typed attributes straight to the
// handler): INFO for API routes, with the tenant of an authenticated
// request; DEBUG for /healthz; and the request metrics counted per
// (method, route, status), a second status of one route its own series.
func TestAccessLogLine(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withRequestTimeout(time.Second), withLogs())
	token := e.tenant("alice")
	_, hdr, _ := e.send(http.MethodGet, "/v1/me", token, http.Header{"X-Request-Id": {"line-1"}}, nil)
	if hdr.Get("X-Request-ID") != "line-1" {
		t.Fatal("request id not echoed")
	}
	e.send(http.MethodGet, "/v1/me", "rla_not_a_token", http.Header{"X-Request-Id": {"line-2"}}, nil)
	e.send(http.MethodGet, "/healthz", "", http.Header{"X-Request-Id": {"line-3"}}, nil)
	lines := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil || rec["msg"] != "request" {
			continue
		}
		if id, _ := rec["request_id"].(string); strings.HasPrefix(id, "line-") {
			lines[id] = rec
		}
	}
	want := map[string]map[string]any{
		"line-1": {"level": "INFO", "method": "GET", "route": "/v1/me", "path": "/v1/me", "status": 200.0, "tenant": "alice"},
		"line-2": {"level": "INFO", "method": "GET", "route": "/v1/me", "path": "/v1/me", "status": 401.0},
		"line-3": {"level": "DEBUG", "method": "GET", "route": "/healthz", "path": "/healthz", "status": 200.0},
	}
	for id, fields := range want {
		rec, ok := lines[id]
		if !ok {
			t.Fatalf("no access line for %s:\n%s", id, e.logs.String())
		}
		for k, v := range fields {
			if rec[k] != v {
				t.Errorf("%s: %s = %#v, want %#v", id, k, rec[k], v)
			}
		}
		if _, ok := rec["tenant"]; ok && fields["tenant"] == nil {
			t.Errorf("%s: a tenant on an unauthenticated request: %v", id, rec)
		}
		if d, ok := rec["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("%s: duration_ms %#v", id, rec["duration_ms"])
		}
		if n, ok := rec["bytes_out"].(float64); !ok || n <= 0 {
			t.Errorf("%s: bytes_out %#v", id, rec["bytes_out"])
		}
		if _, err := time.Parse(time.RFC3339Nano, rec["time"].(string)); err != nil {
			t.Errorf("%s: time %v: %v", id, rec["time"], err)
		}
		if len(rec) != len(fields)+5 { // and time, msg, duration_ms, bytes_out, request_id
			t.Errorf("%s: fields %v", id, rec)
		}
	}
	_, _, raw := e.raw(http.MethodGet, "/metrics", "", "", nil)
	metrics := string(raw)
	for _, series := range []string{
		`repolock_http_requests_total{method="GET",route="/v1/me",status="200"} 1`,
		`repolock_http_requests_total{method="GET",route="/v1/me",status="401"} 1`,
		`repolock_http_request_duration_seconds_count{method="GET",route="/v1/me",status="401"} 1`,
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("metrics lack %s:\n%s", series, grepLines(metrics, "repolock_http_request"))
		}
	}
}
