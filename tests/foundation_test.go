package tests

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	s := startServer(t)

	// The exact bodies and the request id header: raw HTTP.
	status, resp := s.do(t, http.MethodGet, "/healthz", "", nil)
	if status != http.StatusOK || resp["status"] != "ok" {
		t.Fatalf("healthz: %d %v", status, resp)
	}
	status, resp = s.do(t, http.MethodGet, "/readyz", "", nil)
	if status != http.StatusOK || resp["status"] != "ready" {
		t.Fatalf("readyz: %d %v", status, resp)
	}
	status, hdr, _ := s.doRaw(t, http.MethodGet, "/healthz", "", nil, nil)
	if status != http.StatusOK || len(hdr.Get("X-Request-ID")) < 16 {
		t.Fatalf("healthz request id: %d %q", status, hdr.Get("X-Request-ID"))
	}

	body, err := s.client(t, "").Metrics(t.Context())
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, want := range []string{
		`repolock_http_requests_total{method="GET",route="/readyz",status="200"} 1`,
		`repolock_http_request_duration_seconds_bucket{method="GET",route="/healthz",status="200"`,
		`go_sql_max_open_connections{db_name="repolock"} 20`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestReadyzFailsWhenDatabaseGoes(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, false)
	s := startServerWith(t, serverOptions{DatabaseURL: dbURL})
	anon := s.client(t, "")
	if err := anon.Readyz(t.Context()); err != nil {
		t.Fatalf("readyz before: %v", err)
	}
	// Take the database away under the server.
	admin, err := sql.Open("postgres", dbtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := dbURL[strings.LastIndex(dbURL, "/")+1:]
	if i := strings.IndexByte(name, '?'); i >= 0 {
		name = name[:i]
	}
	if _, err := admin.Exec("DROP DATABASE " + pq.QuoteIdentifier(name) + " WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	wantAPIError(t, "readyz after drop", anon.Readyz(t.Context()), http.StatusServiceUnavailable, client.CodeUnavailable, "")
	if err := anon.Healthz(t.Context()); err != nil {
		t.Fatalf("healthz must not depend on the database: %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := t.Context()
	alice := s.createTenant(t, "alice")
	admin := s.admin(t)
	me := func(c *client.Client) error { _, err := c.Me(ctx); return err }
	users := func(c *client.Client) error { _, err := c.ListUsersPage(ctx, client.ListOptions{}); return err }

	tests := []struct {
		name       string
		call       func(*client.Client) error
		token      string
		wantStatus int
		wantCode   client.Code
	}{
		{"tenant route without token is 401", me, "", 401, client.CodeUnauthenticated},
		{"tenant route with unknown token is 401", me, "rlt_nope", 401, client.CodeUnauthenticated},
		{"tenant route with junk token is 401", me, "junk", 401, client.CodeUnauthenticated},
		{"tenant route with admin token is 403", me, s.AdminToken, 403, client.CodeForbidden},
		{"tenant route with tenant token is 200", me, alice, 200, ""},
		{"admin route without token is 401", users, "", 401, client.CodeUnauthenticated},
		{"admin route with bad token is 401", users, "rla_wrong", 401, client.CodeUnauthenticated},
		{"admin route with tenant token is 403", users, alice, 403, client.CodeForbidden},
		{"admin route with admin token is 200", users, s.AdminToken, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(s.client(t, tc.token))
			if tc.wantStatus == 200 {
				if err != nil {
					t.Fatalf("got %v, want 200", err)
				}
				return
			}
			wantAPIError(t, tc.name, err, tc.wantStatus, tc.wantCode, "")
		})
	}

	if u, err := s.client(t, alice).Me(ctx); err != nil || u.Name != "alice" {
		t.Fatalf("me: %v %+v", err, u)
	}

	// Basic auth or a malformed header is 401 with the same error shape
	// (raw HTTP: the client only sends bearer tokens).
	st, _, raw := s.doRaw(t, "GET", "/v1/me", "", http.Header{"Authorization": {"Basic YTpi"}}, nil)
	if st != 401 || !strings.Contains(string(raw), `"code":"unauthenticated"`) {
		t.Fatalf("basic auth: %d %s", st, raw)
	}

	// Revoking every token of a tenant locks it out; a new token works.
	if n, err := admin.RevokeTokens(ctx, "alice"); err != nil || n != 1 {
		t.Fatalf("revoke: %v %d", err, n)
	}
	_, err := s.client(t, alice).Me(ctx)
	wantAPIError(t, "revoked token", err, 401, client.CodeUnauthenticated, "")
	token, err := admin.IssueToken(ctx, "alice")
	if err != nil || token == "" {
		t.Fatalf("issue token: %v %q", err, token)
	}
	if _, err := s.client(t, token).Me(ctx); err != nil {
		t.Fatalf("new token: %v", err)
	}
}

func TestErrorShape(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	jsonCT := http.Header{"Content-Type": {"application/json"}}

	tests := []struct {
		name       string
		method     string
		path       string
		hdr        http.Header
		body       string
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{"unknown route", "GET", "/v1/nope", nil, "", 404, "not_found", "no such route"},
		{"malformed JSON", "POST", "/v1/admin/users", jsonCT, `{"name":`, 400, "invalid_argument", "not valid JSON"},
		{"unknown field", "POST", "/v1/admin/users", jsonCT, `{"name":"bob","admin":true}`, 400, "invalid_argument", `unknown field "admin"`},
		{"wrong type", "POST", "/v1/admin/users", jsonCT, `{"name":7}`, 400, "invalid_argument", `field "name"`},
		{"two values", "POST", "/v1/admin/users", jsonCT, `{"name":"bob"}{}`, 400, "invalid_argument", "single JSON value"},
		{"empty body", "POST", "/v1/admin/users", jsonCT, ``, 400, "invalid_argument", "empty"},
		{"no content type", "POST", "/v1/admin/users", nil, `{"name":"bob"}`, 415, "unsupported_media_type", "application/json"},
		{"text content type", "POST", "/v1/admin/users", http.Header{"Content-Type": {"text/plain"}}, `{"name":"bob"}`, 415, "unsupported_media_type", "application/json"},
		{"invalid name", "POST", "/v1/admin/users", jsonCT, `{"name":"Bad_Name"}`, 400, "invalid_argument", "user name must be"},
		{"too large", "POST", "/v1/admin/users", jsonCT, `{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "payload_too_large", "larger than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, raw := s.doRaw(t, tc.method, tc.path, s.AdminToken, tc.hdr, strings.NewReader(tc.body))
			var resp struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &resp); err != nil {
				t.Fatalf("status %d, body is not the JSON error shape: %q", status, raw)
			}
			if status != tc.wantStatus || resp.Error.Code != tc.wantCode || !strings.Contains(resp.Error.Message, tc.wantMsg) {
				t.Fatalf("got %d %+v, want %d %s containing %q", status, resp.Error, tc.wantStatus, tc.wantCode, tc.wantMsg)
			}
		})
	}

	// Nothing was written by the rejected requests.
	admin := s.admin(t)
	if users, err := admin.ListUsersPage(t.Context(), client.ListOptions{}); err != nil || len(users.Items) != 0 {
		t.Fatalf("rejected requests wrote users: %v %+v", err, users)
	}
	// A duplicate is 409 already_exists.
	s.createTenant(t, "bob")
	_, err := admin.CreateUser(t.Context(), client.CreateUserRequest{Name: "bob"})
	wantAPIError(t, "duplicate", err, 409, client.CodeAlreadyExists, "")
}

// TestGracefulShutdown proves that a request in flight when SIGTERM arrives
// is completed before the process exits, and that the exit is clean.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	s := startServer(t)

	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"name":"late"}`
	// Send the headers and half of the body, so the request is in flight.
	fmt.Fprintf(conn, "POST /v1/admin/users HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		s.AdminToken, len(body), body[:5])
	// The server's own signals, from its logs: it has started reading the
	// request (the connection is active) ...
	local := conn.LocalAddr().String()
	s.waitForLog(t, "the connection as active", func(rec map[string]any) bool {
		return rec["msg"] == "http connection" && rec["state"] == "active" && rec["remote"] == local
	})
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// ... and it has begun shutting down, with the request still in flight.
	s.waitForLog(t, "shutting down", func(rec map[string]any) bool { return rec["msg"] == "shutting down" })
	select {
	case <-s.exited:
		t.Fatalf("server exited with a request in flight")
	default:
	}
	if _, err := io.WriteString(conn, body[5:]); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("in-flight request got no response: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("in-flight request: status %d", res.StatusCode)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
	if s.err != nil {
		t.Fatalf("exit: %v", s.err)
	}
	if !strings.Contains(s.logs.String(), `"msg":"stopped"`) {
		t.Errorf("no 'stopped' log line")
	}
	// New connections are refused once it is gone.
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(s.URL, "http://"), time.Second); err == nil {
		t.Errorf("server still accepts connections after exit")
	}
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, false)
	versions, err := database.Versions()
	if err != nil {
		t.Fatal(err)
	}
	// The version before the latest (numbers may have gaps).
	previous := versions[len(versions)-2]
	latest, err := database.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	version := func(out string) (v uint, dirty bool) {
		t.Helper()
		var st database.MigrationStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("version output %q: %v", out, err)
		}
		return st.Version, st.Dirty
	}
	steps := []struct {
		args []string
		want uint
	}{
		{[]string{"migrate", "version"}, 0},
		{[]string{"migrate", "up"}, latest},
		{[]string{"migrate", "down", "1"}, previous},
		{[]string{"migrate", "up"}, latest},
		{[]string{"migrate", "down", "--all"}, 0},
		{[]string{"migrate", "up"}, latest},
		{[]string{"migrate", "up"}, latest}, // nothing to do is fine
	}
	for _, st := range steps {
		out, errOut, code := runCLI(t, dbURL, st.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", st.args, code, errOut)
		}
		if v, dirty := version(out); v != st.want || dirty {
			t.Fatalf("%v: version %d dirty %v, want %d", st.args, v, dirty, st.want)
		}
	}
	// After down --all nothing of ours is left; after up everything is back.
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 'cluster_users'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("cluster_users after up: %d %v", n, err)
	}

	if _, _, code := runCLI(t, dbURL, "migrate", "sideways"); code != 2 {
		t.Fatalf("bad action: exit %d, want 2", code)
	}
}

// TestMigrateConcurrently runs several migrators at once, as replicas
// starting together would: all succeed and the schema is applied once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, false)
	latest, _ := database.LatestVersion()
	var wg sync.WaitGroup
	errs := make([]string, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, errOut, code := runCLI(t, dbURL, "migrate", "up")
			if code != 0 || !strings.Contains(out, fmt.Sprintf(`"version":%d,"dirty":false`, latest)) {
				errs[i] = fmt.Sprintf("exit %d: %s %s", code, out, errOut)
			}
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("migrator %d: %s", i, e)
		}
	}
}

func TestUserCLI(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	out, errOut, code := runCLI(t, s.DatabaseURL, "user", "create", "carol", "--display-name", "Carol C")
	if code != 0 {
		t.Fatalf("user create: %d %s", code, errOut)
	}
	token := strings.TrimSpace(out)
	if !strings.HasPrefix(token, "rlt_") || !strings.Contains(errOut, "shown only this once") {
		t.Fatalf("user create printed %q / %q", out, errOut)
	}
	carol := s.client(t, token)
	if u, err := carol.Me(t.Context()); err != nil || u.Name != "carol" || u.DisplayName != "Carol C" {
		t.Fatalf("token from CLI: %v %+v", err, u)
	}
	out, _, code = runCLI(t, s.DatabaseURL, "user", "list")
	if code != 0 || !strings.Contains(out, "carol") || !strings.Contains(out, "Carol C") {
		t.Fatalf("user list: %d %q", code, out)
	}
	if _, errOut, code := runCLI(t, s.DatabaseURL, "user", "create", "carol"); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("duplicate user: %d %q", code, errOut)
	}
	// The token is stored only as a hash.
	db, err := sql.Open("postgres", s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var leaked int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM api_tokens t WHERE t::text LIKE '%' || $1 || '%'`, token).Scan(&leaked); err != nil || leaked != 0 {
		t.Fatalf("token stored in clear: %d %v", leaked, err)
	}
	var hashed int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM api_tokens WHERE token_hash = sha256(convert_to($1, 'UTF8'))`, token).Scan(&hashed); err != nil || hashed != 1 {
		t.Fatalf("token not stored as its SHA-256: %d %v", hashed, err)
	}
	// Deleting the tenant locks its token out: from another process (the
	// CLI), within 1 s (the server's token cache hears of it through
	// LISTEN/NOTIFY).
	out, errOut, code = runCLI(t, s.DatabaseURL, "user", "delete", "carol")
	if code != 0 || !strings.Contains(out, `"user":"carol"`) {
		t.Fatalf("user delete: %d %q %q", code, out, errOut)
	}
	s.answersWithin(t, time.Second, "GET", "/v1/me", token, 401, 200)
	_, err = carol.Me(t.Context())
	wantAPIError(t, "deleted tenant's token", err, 401, client.CodeUnauthenticated, "")
	if _, _, code := runCLI(t, s.DatabaseURL, "user", "delete", "carol"); code != 1 {
		t.Fatalf("deleting a missing tenant: exit %d, want 1", code)
	}
}

// The Go collector's pace: serve runs at GOGC 400 and a soft memory limit
// of 128 MiB unless the environment sets GOGC or GOMEMLIMIT (and then at
// those), as its /metrics shows.
func TestServeGCPace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env         []string
		want, limit string
	}{
		{nil, "go_gc_gogc_percent 400\n", "go_gc_gomemlimit_bytes 1.34217728e+08\n"},
		{[]string{"GOGC=150", "GOMEMLIMIT=200MiB"}, "go_gc_gogc_percent 150\n", "go_gc_gomemlimit_bytes 2.097152e+08\n"},
		{[]string{"GOMEMLIMIT=off"}, "go_gc_gogc_percent 400\n", "go_gc_gomemlimit_bytes 9.223372036854776e+18\n"},
	} {
		s := startServerWith(t, serverOptions{Env: tc.env})
		body, err := s.client(t, "").Metrics(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), tc.want) {
			t.Errorf("env %v: /metrics lacks %q", tc.env, tc.want)
		}
		if !strings.Contains(string(body), tc.limit) {
			t.Errorf("env %v: /metrics lacks %q", tc.env, tc.limit)
		}
	}
}
