package tests

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	_ "github.com/lib/pq"
)

// TestRepositoriesEndToEnd drives the repository routes of the real binary:
// create, branch, commit, tag, delete, immediate reuse of the name, then
// `api clean` removes every row of the deleted instance and nothing of the
// new one.
func TestRepositoriesEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	alice := s.createTenant(t, "alice")
	bob := s.createTenant(t, "bob")

	must := func(want int, method, path, token string, body any) map[string]any {
		t.Helper()
		st, resp := s.do(t, method, path, token, body)
		if st != want {
			t.Fatalf("%s %s = %d %v, want %d", method, path, st, resp, want)
		}
		return resp
	}

	r := must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice,
		map[string]any{"name": "warehouse", "storage_namespace": "s3://bucket/warehouse"})
	oldUID := r["instance_uid"].(string)
	if r["state"] != "active" || r["default_branch"] != "main" {
		t.Fatalf("created %v", r)
	}
	if st, resp := s.do(t, http.MethodGet, "/v1/repositories/warehouse", bob, nil); st != http.StatusNotFound || errorCode(resp) != "not_found" {
		t.Fatalf("bob GET = %d %v", st, resp)
	}
	must(http.StatusCreated, http.MethodPost, "/v1/repositories/warehouse/branches", alice, map[string]any{"name": "etl/daily", "source": "main"})
	c := must(http.StatusCreated, http.MethodPost, "/v1/repositories/warehouse/branches/etl%2Fdaily/commits", alice, map[string]any{"message": "load"})
	must(http.StatusCreated, http.MethodPost, "/v1/repositories/warehouse/tags", alice, map[string]any{"name": "v1", "commit_id": c["id"]})
	log := must(http.StatusOK, http.MethodGet, "/v1/repositories/warehouse/branches/etl%2Fdaily/log", alice, nil)
	if n := len(log["items"].([]any)); n != 2 {
		t.Fatalf("log has %d commits, want 2", n)
	}

	must(http.StatusNoContent, http.MethodDelete, "/v1/repositories/warehouse", alice, nil)
	if st, resp := s.do(t, http.MethodGet, "/v1/repositories/warehouse", alice, nil); st != http.StatusNotFound || errorCode(resp) != "not_found" {
		t.Fatalf("GET after delete = %d %v", st, resp)
	}
	r2 := must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice,
		map[string]any{"name": "warehouse", "storage_namespace": "s3://bucket/warehouse2"})
	newUID := r2["instance_uid"].(string)
	if newUID == oldUID {
		t.Fatal("instance uid reused")
	}
	if st, _ := s.do(t, http.MethodGet, "/v1/repositories/warehouse/branches/etl%2Fdaily", alice, nil); st != http.StatusNotFound {
		t.Fatalf("old branch visible in the new instance: %d", st)
	}

	db, err := sql.Open("postgres", s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows := func(uid string) int {
		t.Helper()
		var n int
		err := db.QueryRow(`SELECT count(*) FROM kv WHERE convert_from(partition_key, 'UTF8') LIKE '%/warehouse-' || $1 || '%'`, uid).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Old instance: 2 commits, 2 branches, 1 tag (staging partitions are
	// empty: there is no staging route).
	if n := rows(oldUID); n != 5 {
		t.Fatalf("old instance rows before clean = %d, want 5", n)
	}

	stdout, stderr, code := runCLI(t, s.DatabaseURL, "clean")
	if code != 0 {
		t.Fatalf("api clean exited %d: %s %s", code, stdout, stderr)
	}
	var run struct {
		Kind    string         `json:"kind"`
		Cleaner map[string]any `json:"cleaner"`
	}
	if err := json.Unmarshal([]byte(stdout), &run); err != nil {
		t.Fatalf("api clean output: %v\n%s", err, stdout)
	}
	want := map[string]any{"scanned": 1.0, "cleaned": 1.0, "failed": 0.0, "stale_initial": 0.0, "rows_deleted": 5.0}
	if fmt.Sprint(run.Cleaner) != fmt.Sprint(want) {
		t.Fatalf("api clean cleaner = %v, want %v (output %s)", run.Cleaner, want, stdout)
	}
	if n := rows(oldUID); n != 0 {
		t.Fatalf("old instance rows after clean = %d", n)
	}
	if n := rows(newUID); n != 2 {
		t.Fatalf("new instance rows = %d, want 2", n)
	}
	must(http.StatusOK, http.MethodGet, "/v1/repositories/warehouse/branches/main", alice, nil)
}
