package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/users"
)

// gcEnv is a real server on a fresh database, with the database at hand for
// seeding.
type gcEnv struct {
	t           *testing.T
	db          *database.DB
	ts          *httptest.Server
	tenantID    string
	tenantToken string
}

func newGCEnv(t *testing.T) *gcEnv {
	t.Helper()
	db := dbtest.New(t)
	srv, err := httpapi.New(httpapi.Config{
		DB:         db,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		AdminToken: adminToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	u, token, err := users.Create(context.Background(), db, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	return &gcEnv{t: t, db: db, ts: ts, tenantID: u.ID, tenantToken: token}
}

func (e *gcEnv) exec(query string, args ...any) {
	e.t.Helper()
	if _, err := e.db.ExecContext(context.Background(), query, args...); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
}

// orphan creates an unreferenced lock of the tenant, an hour old.
func (e *gcEnv) orphan(url string) {
	e.t.Helper()
	e.exec(`INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at)
		VALUES ($1, 1, $2, now() - interval '1 hour')`, url, e.tenantID)
}

func (e *gcEnv) do(method, path, token string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.StatusCode, res.Header, body
}

func (e *gcEnv) json(method, path, token string) (int, map[string]any) {
	e.t.Helper()
	status, _, body := e.do(method, path, token)
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		e.t.Fatalf("%s %s: %d, not JSON: %s", method, path, status, body)
	}
	return status, m
}

func wantAPIError(t *testing.T, what string, status int, body map[string]any, wantStatus int, wantCode, wantMessage string) {
	t.Helper()
	errObj, _ := body["error"].(map[string]any)
	if status != wantStatus || errObj["code"] != wantCode || (wantMessage != "" && errObj["message"] != wantMessage) {
		t.Fatalf("%s: %d %v; want %d %s %q", what, status, body, wantStatus, wantCode, wantMessage)
	}
}

func TestGCAPI(t *testing.T) {
	t.Parallel()
	e := newGCEnv(t)
	e.orphan("git.example.com/a/one")
	e.orphan("git.example.com/a/two")

	// Dry run: reports, deletes nothing.
	status, dry := e.json(http.MethodPost, "/v1/admin/gc?dry_run=true", adminToken)
	if status != http.StatusOK || dry["status"] != "succeeded" || dry["trigger"] != "api" || dry["dry_run"] != true ||
		dry["scanned"] != 2.0 || dry["deleted"] != 0.0 || dry["min_age_seconds"] != 60.0 || dry["batch_size"] != 1000.0 {
		t.Fatalf("dry run: %d %v", status, dry)
	}
	var urls []string
	for _, c := range dry["would_collect"].([]any) {
		urls = append(urls, c.(map[string]any)["git_repository_url"].(string))
	}
	if strings.Join(urls, " ") != "git.example.com/a/one git.example.com/a/two" &&
		strings.Join(urls, " ") != "git.example.com/a/two git.example.com/a/one" {
		t.Fatalf("would collect %v", urls)
	}

	// The collection.
	status, run := e.json(http.MethodPost, "/v1/admin/gc?batch_size=1&min_age=30m", adminToken)
	if status != http.StatusOK || run["status"] != "succeeded" || run["dry_run"] != false ||
		run["scanned"] != 2.0 || run["deleted"] != 2.0 || run["batches"] != 2.0 ||
		run["min_age_seconds"] != 1800.0 || run["batch_size"] != 1.0 || run["would_collect"] != nil {
		t.Fatalf("collection: %d %v", status, run)
	}
	var left int
	if err := e.db.GetContext(context.Background(), &left, `SELECT count(*) FROM RepositoryLockOwner`); err != nil || left != 0 {
		t.Fatalf("locks left = %d, %v", left, err)
	}

	// Recorded runs, newest first, paginated.
	status, page := e.json(http.MethodGet, "/v1/admin/gc/runs", adminToken)
	items, _ := page["items"].([]any)
	if status != http.StatusOK || len(items) != 2 || page["next_page_token"] != "" ||
		items[0].(map[string]any)["id"] != run["id"] || items[1].(map[string]any)["id"] != dry["id"] {
		t.Fatalf("runs: %d %v", status, page)
	}
	var ids []any
	token := ""
	for i := 0; i < 3; i++ {
		status, page := e.json(http.MethodGet, "/v1/admin/gc/runs?page_size=1&page_token="+token, adminToken)
		if status != http.StatusOK {
			t.Fatalf("page: %d %v", status, page)
		}
		for _, it := range page["items"].([]any) {
			ids = append(ids, it.(map[string]any)["id"])
		}
		if token = page["next_page_token"].(string); token == "" {
			break
		}
	}
	if !reflect.DeepEqual(ids, []any{run["id"], dry["id"]}) {
		t.Fatalf("paged ids = %v", ids)
	}
	status, one := e.json(http.MethodGet, "/v1/admin/gc/runs/"+run["id"].(string), adminToken)
	if status != http.StatusOK || one["deleted"] != 2.0 || one["finished_at"] != run["finished_at"] {
		t.Fatalf("get run: %d %v (want %v)", status, one, run)
	}

	// Another holder has the lease: skipped, not an error.
	e.exec(`INSERT INTO gc_leases (name, holder, expires_at) VALUES ('gc', 'other-replica', now() + interval '1 hour')`)
	status, skipped := e.json(http.MethodPost, "/v1/admin/gc", adminToken)
	if status != http.StatusOK || skipped["status"] != "skipped" || skipped["reason"] != "another collection is running" || skipped["id"] != nil {
		t.Fatalf("concurrent run: %d %v", status, skipped)
	}

	// Metrics.
	_, _, metrics := e.do(http.MethodGet, "/metrics", "")
	for _, want := range []string{
		"repolock_gc_collected_locks_total 2",
		`repolock_gc_runs_total{dry_run="false",kind="gc",result="skipped"} 1`,
		`repolock_gc_runs_total{dry_run="false",kind="gc",result="succeeded"} 1`,
		`repolock_gc_runs_total{dry_run="true",kind="gc",result="succeeded"} 1`,
		`repolock_gc_last_success_timestamp_seconds{kind="gc"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}

func TestGCAPIErrors(t *testing.T) {
	t.Parallel()
	e := newGCEnv(t)
	tests := []struct {
		method, path, token string
		status              int
		code, message       string
	}{
		{"POST", "/v1/admin/gc", "", 401, "unauthenticated", "missing Authorization: Bearer token"},
		{"POST", "/v1/admin/gc", "tenant", 403, "forbidden", "admin routes need the admin token"},
		{"GET", "/v1/admin/gc/runs", "tenant", 403, "forbidden", "admin routes need the admin token"},
		{"POST", "/v1/admin/gc?dry_run=maybe", adminToken, 400, "invalid_argument", "dry_run must be true or false"},
		{"POST", "/v1/admin/gc?batch_size=0", adminToken, 400, "invalid_argument", "batch_size must be an integer from 1 to 100000"},
		{"POST", "/v1/admin/gc?batch_size=x", adminToken, 400, "invalid_argument", "batch_size must be an integer from 1 to 100000"},
		{"POST", "/v1/admin/gc?min_age=-1s", adminToken, 400, "invalid_argument", "min_age must be a non-negative duration such as 90s or 5m"},
		{"POST", "/v1/admin/gc?min_age=soon", adminToken, 400, "invalid_argument", "min_age must be a non-negative duration such as 90s or 5m"},
		{"GET", "/v1/admin/gc/runs?page_token=zzz", adminToken, 400, "invalid_argument", "page_token is not valid"},
		{"GET", "/v1/admin/gc/runs?page_size=0", adminToken, 400, "invalid_argument", "page_size must be an integer from 1 to 500"},
		{"GET", "/v1/admin/gc/runs/not-a-uuid", adminToken, 404, "not_found", "gc run not-a-uuid not found"},
		{"GET", "/v1/admin/gc/runs/00000000-0000-0000-0000-000000000001", adminToken, 404, "not_found", "gc run 00000000-0000-0000-0000-000000000001 not found"},
	}
	for _, tt := range tests {
		token := tt.token
		if token == "tenant" {
			token = e.tenantToken
		}
		status, body := e.json(tt.method, tt.path, token)
		wantAPIError(t, tt.method+" "+tt.path, status, body, tt.status, tt.code, tt.message)
	}
	var runs int
	if err := e.db.GetContext(context.Background(), &runs, `SELECT count(*) FROM gc_runs`); err != nil || runs != 0 {
		t.Fatalf("rejected requests recorded %d runs (%v)", runs, err)
	}
}
