package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi"
)

const adminToken = "rla_test_admin_token"

// newTestServer starts the real handler stack on a fresh database, with extra
// routes registered through Config.Hooks, and captures its logs.
func newTestServer(t *testing.T, timeout time.Duration, hooks ...func(*httpapi.Server)) (*httptest.Server, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	srv, err := httpapi.New(httpapi.Config{
		DB:             dbtest.New(t),
		Logger:         slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		AdminToken:     adminToken,
		RequestTimeout: timeout,
		Hooks:          hooks,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts, &logs
}

type syncWriter struct{ w io.Writer }

func (s *syncWriter) Write(p []byte) (int, error) { return s.w.Write(p) }

type errBody struct {
	Error map[string]any `json:"error"`
}

func get(t *testing.T, ts *httptest.Server, path string, hdr http.Header) (int, http.Header, errBody) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body errBody
	raw, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(raw, &body)
	return res.StatusCode, res.Header, body
}

func TestFaultsBecomeCleanJSONErrors(t *testing.T) {
	t.Parallel()
	ts, logs := newTestServer(t, 200*time.Millisecond, func(s *httpapi.Server) {
		s.Admin.GET("/test/panic", func(c echo.Context) error { panic("kaboom: secret stack detail") })
		s.Admin.GET("/test/internal", func(c echo.Context) error {
			return errors.New(`pq: relation "secret_table" does not exist`)
		})
		s.Admin.GET("/test/slow", func(c echo.Context) error {
			<-c.Request().Context().Done()
			return c.Request().Context().Err()
		})
		s.Admin.GET("/test/claimed", func(c echo.Context) error {
			e := repolock.Errorf(repolock.ERepositoryClaimed, "a repository URL is already claimed by another user: bob")
			e.Details = map[string]any{"owner": "bob"}
			return e
		})
	})

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
			status, _, body := get(t, ts, tc.path, nil)
			if status != tc.wantStatus || body.Error["code"] != tc.wantCode || body.Error["message"] != tc.wantMsg {
				t.Fatalf("got %d %v, want %d %s %q", status, body.Error, tc.wantStatus, tc.wantCode, tc.wantMsg)
			}
		})
	}
	_, _, body := get(t, ts, "/v1/admin/test/claimed", nil)
	if body.Error["owner"] != "bob" {
		t.Fatalf("details not in the error body: %v", body.Error)
	}
	// The causes are in the logs (for operators), not in responses.
	for _, want := range []string{"kaboom: secret stack detail", "secret_table", `"stack"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q", want)
		}
	}
	// The server survived the panic.
	if status, _, _ := get(t, ts, "/healthz", nil); status != 200 {
		t.Fatalf("healthz after panic: %d", status)
	}
}

func TestRequestIDs(t *testing.T) {
	t.Parallel()
	ts, logs := newTestServer(t, time.Second)
	_, hdr, _ := get(t, ts, "/healthz", http.Header{"X-Request-Id": {"caller-chosen-id"}})
	if got := hdr.Get("X-Request-ID"); got != "caller-chosen-id" {
		t.Fatalf("caller's request id not kept: %q", got)
	}
	_, hdr, _ = get(t, ts, "/healthz", http.Header{"X-Request-Id": {strings.Repeat("x", 500)}})
	if got := hdr.Get("X-Request-ID"); len(got) != 32 {
		t.Fatalf("overlong request id not replaced: %q", got)
	}
	if !strings.Contains(logs.String(), `"request_id":"caller-chosen-id"`) {
		t.Fatalf("access log lacks the request id:\n%s", logs.String())
	}
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, time.Second)
	req, _ := http.NewRequest(http.MethodPut, ts.URL+"/v1/admin/users", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body errBody
	_ = json.NewDecoder(res.Body).Decode(&body)
	if res.StatusCode != 405 || body.Error["code"] != "method_not_allowed" {
		t.Fatalf("got %d %v", res.StatusCode, body.Error)
	}
	if got := res.Header.Get("Allow"); got != "GET, POST" {
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
