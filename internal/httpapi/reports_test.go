package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"
)

func TestReportsAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	aliceID, alice := e.newTenant("alice")
	ctx := t.Context()
	// alice owns one referenced and one orphan lock; bob owns nothing.
	var bobID, appLock string
	if err := e.db.GetContext(ctx, &bobID, `INSERT INTO cluster_users (name) VALUES ('bob') RETURNING id`); err != nil {
		t.Fatal(err)
	}
	e.orphan(aliceID, "git.example.com/a/orphan")
	if err := e.db.GetContext(ctx, &appLock, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		VALUES ('git.example.com/a/used', 1, $1) RETURNING id`, aliceID); err != nil {
		t.Fatal(err)
	}
	e.exec(`WITH a AS (INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
		VALUES ($1, 'app', 'git.example.com/a/used', 'git.example.com/a/used') RETURNING id)
		INSERT INTO RepositoryLockApplication (application_id, lock_id) SELECT id, $2 FROM a`, aliceID, appLock)

	// The list of reports.
	status, list := e.call(http.MethodGet, "/v1/admin/reports", adminToken, nil)
	var names []any
	for _, it := range list["items"].([]any) {
		names = append(names, it.(map[string]any)["name"])
	}
	valid := []any{"ownership", "locks", "orphan_locks", "denials", "gc_runs", "normalizer_versions", "rekey_conflicts", "transfers", "reservations"}
	if status != http.StatusOK || !reflect.DeepEqual(names, valid) {
		t.Fatalf("reports: %d %v", status, list)
	}

	// JSON (the default).
	status, hdr, body := e.raw(http.MethodGet, "/v1/admin/reports/ownership", adminToken, "", nil)
	want := `{"report":"ownership","columns":["tenant_id","tenant_name","locks","applications","credentials","unreferenced_locks"],"items":[` +
		`{"tenant_id":"` + aliceID + `","tenant_name":"alice","locks":2,"applications":1,"credentials":0,"unreferenced_locks":1},` +
		`{"tenant_id":"` + bobID + `","tenant_name":"bob","locks":0,"applications":0,"credentials":0,"unreferenced_locks":0}]}` + "\n"
	if status != http.StatusOK || hdr.Get("Content-Type") != "application/json; charset=UTF-8" || string(body) != want {
		t.Fatalf("ownership json: %d %q\n%s\nwant\n%s", status, hdr.Get("Content-Type"), body, want)
	}

	// CSV, limited.
	status, hdr, body = e.raw(http.MethodGet, "/v1/admin/reports/ownership?format=csv&limit=1", adminToken, "", nil)
	want = "tenant_id,tenant_name,locks,applications,credentials,unreferenced_locks\n" + aliceID + ",alice,2,1,0,1\n"
	if status != http.StatusOK || hdr.Get("Content-Type") != "text/csv; charset=utf-8" ||
		hdr.Get("Content-Disposition") != `attachment; filename="ownership.csv"` || string(body) != want {
		t.Fatalf("ownership csv: %d %v\n%s\nwant\n%s", status, hdr, body, want)
	}

	// orphan_locks names the orphan only.
	status, _, body = e.raw(http.MethodGet, "/v1/admin/reports/orphan_locks", adminToken, "", nil)
	var orphans struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(body, &orphans); err != nil || status != http.StatusOK || len(orphans.Items) != 1 ||
		orphans.Items[0]["git_repository_url"] != "git.example.com/a/orphan" || orphans.Items[0]["eligible"] != true ||
		orphans.Items[0]["owner_name"] != "alice" {
		t.Fatalf("orphan_locks: %d %s", status, body)
	}

	tests := []struct {
		path, token   string
		status        int
		code, message string
	}{
		{"/v1/admin/reports/nope", adminToken, 404, "not_found", `no report named "nope"; valid names: ownership, locks, orphan_locks, denials, gc_runs, normalizer_versions, rekey_conflicts, transfers, reservations`},
		{"/v1/admin/reports/locks?format=xml", adminToken, 400, "invalid_argument", "format must be one of json, csv"},
		{"/v1/admin/reports/locks?format=table", adminToken, 400, "invalid_argument", "format must be one of json, csv"},
		{"/v1/admin/reports/locks?limit=0", adminToken, 400, "invalid_argument", "limit must be a positive integer"},
		{"/v1/admin/reports/locks", alice, 403, "forbidden", "admin routes need the admin token"},
		{"/v1/admin/reports", "", 401, "unauthenticated", "missing Authorization: Bearer token"},
	}
	for _, tt := range tests {
		status, body := e.call(http.MethodGet, tt.path, tt.token, nil)
		expectError(t, tt.path, status, body, tt.status, tt.code, tt.message)
		if tt.status == 404 {
			if got := body["error"].(map[string]any)["valid_names"]; !reflect.DeepEqual(got, valid) {
				t.Fatalf("valid_names = %v, want %v", got, valid)
			}
		}
	}
}

// GET /v1/admin/reports/ownership/verify: ok without drift; with a corrupted
// total, ok false and the tenant's reported and actual figures.
func TestVerifyOwnershipAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	aliceID, alice := e.newTenant("alice")
	e.orphan(aliceID, "git.example.com/a/orphan")
	status, body := e.call(http.MethodGet, "/v1/admin/reports/ownership/verify", adminToken, nil)
	if status != http.StatusOK || body["ok"] != true || body["tenants"] != float64(1) || len(body["drift"].([]any)) != 0 {
		t.Fatalf("verify: %d %v", status, body)
	}
	e.exec(`SELECT repolock_ownership_fold()`)
	e.exec(`UPDATE report_ownership_totals SET credentials = credentials + 2 WHERE cluster_user_id = $1`, aliceID)
	status, body = e.call(http.MethodGet, "/v1/admin/reports/ownership/verify", adminToken, nil)
	drift, _ := body["drift"].([]any)
	if status != http.StatusOK || body["ok"] != false || len(drift) != 1 {
		t.Fatalf("verify with drift: %d %v", status, body)
	}
	d := drift[0].(map[string]any)
	want := map[string]any{"tenant_id": aliceID, "tenant_name": "alice", "bad_flags": float64(0),
		"reported": map[string]any{"locks": float64(1), "applications": float64(0), "credentials": float64(2), "unreferenced_locks": float64(1)},
		"actual":   map[string]any{"locks": float64(1), "applications": float64(0), "credentials": float64(0), "unreferenced_locks": float64(1)}}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("drift %v, want %v", d, want)
	}
	status, body = e.call(http.MethodGet, "/v1/admin/reports/ownership/verify", alice, nil)
	expectError(t, "verify as a tenant", status, body, 403, "forbidden", "admin routes need the admin token")
}

// A report that fails after its first rows were sent (here: its database
// session is terminated mid-stream) is aborted, never a short body with
// 200: CSV has no end marker, so a client could not tell.
func TestReportFailingMidStreamIsAborted(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	e.tenant("owner")
	// Enough rows that the stream cannot sit in socket buffers whole.
	var tenantID string
	if err := e.db.GetContext(t.Context(), &tenantID, `SELECT id FROM cluster_users WHERE name = 'owner'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(t.Context(), `
		INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		SELECT 'github.com/o/r' || g, 2, $1 FROM generate_series(1, 50000) g`, tenantID); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.ts.URL+"/v1/admin/reports/locks?format=csv", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The first rows arrived; now end the report's session.
	buf := make([]byte, 4096)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	var killed int
	if err := e.db.GetContext(t.Context(), &killed, `
		SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE '%report_locks%' AND pid <> pg_backend_pid()) t`); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("terminated %d report sessions, want 1", killed)
	}
	rest, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("the report ended cleanly after its session was killed (%d more bytes): a short report looks complete", len(rest))
	}
}
