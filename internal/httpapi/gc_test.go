package httpapi_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// orphan creates an unreferenced lock of the tenant ownerID, an hour old.
func (e *apiEnv) orphan(ownerID, url string) {
	e.t.Helper()
	e.exec(`INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at)
		VALUES ($1, 1, $2, now() - interval '1 hour')`, url, ownerID)
}

func TestGCAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	aliceID, _ := e.newTenant("alice")
	e.orphan(aliceID, "git.example.com/a/one")
	e.orphan(aliceID, "git.example.com/a/two")

	// Dry run: reports, deletes nothing.
	status, dry := e.call(http.MethodPost, "/v1/admin/gc?dry_run=true", adminToken, nil)
	if status != http.StatusOK || dry["status"] != "succeeded" || dry["trigger"] != "api" || dry["dry_run"] != true ||
		dry["scanned"] != 2.0 || dry["deleted"] != 0.0 || dry["min_age_seconds"] != 60.0 || dry["batch_size"] != 1000.0 ||
		dry["full"] != false || dry["candidates"] != 2.0 {
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
	status, run := e.call(http.MethodPost, "/v1/admin/gc?batch_size=1&min_age=30m", adminToken, nil)
	if status != http.StatusOK || run["status"] != "succeeded" || run["dry_run"] != false ||
		run["scanned"] != 2.0 || run["deleted"] != 2.0 || run["batches"] != 2.0 ||
		run["min_age_seconds"] != 1800.0 || run["batch_size"] != 1.0 || run["would_collect"] != nil {
		t.Fatalf("collection: %d %v", status, run)
	}
	var left int
	if err := e.db.GetContext(t.Context(), &left, `SELECT count(*) FROM RepositoryLockOwner`); err != nil || left != 0 {
		t.Fatalf("locks left = %d, %v", left, err)
	}

	// Recorded runs, newest first, paginated.
	status, page := e.call(http.MethodGet, "/v1/admin/gc/runs", adminToken, nil)
	items, _ := page["items"].([]any)
	if status != http.StatusOK || len(items) != 2 || page["next_page_token"] != "" ||
		items[0].(map[string]any)["id"] != run["id"] || items[1].(map[string]any)["id"] != dry["id"] {
		t.Fatalf("runs: %d %v", status, page)
	}
	var ids []any
	token := ""
	for i := 0; i < 3; i++ {
		status, page := e.call(http.MethodGet, "/v1/admin/gc/runs?page_size=1&page_token="+token, adminToken, nil)
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
	status, one := e.call(http.MethodGet, "/v1/admin/gc/runs/"+run["id"].(string), adminToken, nil)
	if status != http.StatusOK || one["deleted"] != 2.0 || one["finished_at"] != run["finished_at"] {
		t.Fatalf("get run: %d %v (want %v)", status, one, run)
	}

	// Another holder has the lease: skipped, not an error.
	e.exec(`INSERT INTO gc_leases (name, holder, expires_at) VALUES ('gc', 'other-replica', now() + interval '1 hour')`)
	status, skipped := e.call(http.MethodPost, "/v1/admin/gc", adminToken, nil)
	if status != http.StatusOK || skipped["status"] != "skipped" || skipped["reason"] != "another collection is running" || skipped["id"] != nil {
		t.Fatalf("concurrent run: %d %v", status, skipped)
	}

	// Metrics.
	_, _, metrics := e.raw(http.MethodGet, "/metrics", "", "", nil)
	for _, want := range []string{
		"repolock_gc_collected_locks_total 2",
		"repolock_locks_collected_total 2", // the dry run counts nothing
		`repolock_gc_runs_total{dry_run="false",kind="gc",result="skipped"} 1`,
		`repolock_gc_runs_total{dry_run="false",kind="gc",result="succeeded"} 1`,
		`repolock_gc_runs_total{dry_run="true",kind="gc",result="succeeded"} 1`,
		`repolock_gc_last_success_timestamp_seconds{kind="gc"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}

	// A full (repair) dry run: the flags are sound, nothing to flag.
	e.exec(`DELETE FROM gc_leases`)
	e.orphan(aliceID, "git.example.com/a/three")
	status, full := e.call(http.MethodPost, "/v1/admin/gc?full=true&dry_run=true", adminToken, nil)
	if status != http.StatusOK || full["status"] != "succeeded" || full["full"] != true || full["dry_run"] != true ||
		full["scanned"] != 1.0 || full["flagged"] != 0.0 || full["cleared"] != 0.0 {
		t.Fatalf("full dry run: %d %v", status, full)
	}
}

func TestGCAPIErrors(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	tests := []struct {
		method, path, token string
		status              int
		code, message       string
	}{
		{"POST", "/v1/admin/gc", "", 401, "unauthenticated", "missing Authorization: Bearer token"},
		{"POST", "/v1/admin/gc", "tenant", 403, "forbidden", "admin routes need the admin token"},
		{"GET", "/v1/admin/gc/runs", "tenant", 403, "forbidden", "admin routes need the admin token"},
		{"POST", "/v1/admin/gc?dry_run=maybe", adminToken, 400, "invalid_argument", "dry_run must be true or false"},
		{"POST", "/v1/admin/gc?full=yes", adminToken, 400, "invalid_argument", "full must be true or false"},
		{"POST", "/v1/admin/gc?batch_size=0", adminToken, 400, "invalid_argument", "batch_size must be an integer from 1 to 100000"},
		{"POST", "/v1/admin/gc?batch_size=x", adminToken, 400, "invalid_argument", "batch_size must be an integer from 1 to 100000"},
		{"POST", "/v1/admin/gc?min_age=-1s", adminToken, 400, "invalid_argument", "min_age must be a non-negative duration such as 90s or 5m"},
		{"POST", "/v1/admin/gc?min_age=soon", adminToken, 400, "invalid_argument", "min_age must be a non-negative duration such as 90s or 5m"},
		{"GET", "/v1/admin/gc/runs?page_token=zzz", adminToken, 400, "invalid_argument", "page_token is not valid for this list"},
		{"GET", "/v1/admin/gc/runs?page_size=0", adminToken, 400, "invalid_argument", "page_size must be an integer from 1 to 500"},
		{"GET", "/v1/admin/gc/runs/not-a-uuid", adminToken, 404, "not_found", "gc run not-a-uuid not found"},
		{"GET", "/v1/admin/gc/runs/00000000-0000-0000-0000-000000000001", adminToken, 404, "not_found", "gc run 00000000-0000-0000-0000-000000000001 not found"},
	}
	for _, tt := range tests {
		token := tt.token
		if token == "tenant" {
			token = alice
		}
		status, body := e.call(tt.method, tt.path, token, nil)
		expectError(t, tt.method+" "+tt.path, status, body, tt.status, tt.code, tt.message)
	}
	var runs int
	if err := e.db.GetContext(t.Context(), &runs, `SELECT count(*) FROM gc_runs`); err != nil || runs != 0 {
		t.Fatalf("rejected requests recorded %d runs (%v)", runs, err)
	}
}
