package tests

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"

	_ "github.com/lib/pq"

	"github.com/repolock/repolock/client"
)

// TestRepositoriesEndToEnd drives the repository routes of the real binary:
// create, branch, commit, tag, delete, immediate reuse of the name, then
// `repolock clean` removes every row of the deleted instance and nothing of the
// new one.
func TestRepositoriesEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := t.Context()
	alice := s.tenant(t, "alice")
	bob := s.tenant(t, "bob")
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	r, err := alice.CreateRepository(ctx, client.CreateRepositoryRequest{Name: "warehouse", StorageNamespace: "s3://bucket/warehouse"})
	must("create", err)
	oldUID := r.InstanceUID
	if r.State != "active" || r.DefaultBranch != "main" {
		t.Fatalf("created %+v", r)
	}
	if _, err := bob.GetRepository(ctx, "warehouse"); !client.IsNotFound(err) {
		t.Fatalf("bob GET = %v", err)
	}
	_, err = alice.CreateBranch(ctx, "warehouse", "etl/daily", "main")
	must("branch", err)
	c, err := alice.Commit(ctx, "warehouse", "etl/daily", client.CommitRequest{Message: "load"})
	must("commit", err)
	_, err = alice.CreateTag(ctx, "warehouse", "v1", c.ID)
	must("tag", err)
	log, err := alice.LogPage(ctx, "warehouse", "etl/daily", client.ListOptions{})
	must("log", err)
	if n := len(log.Items); n != 2 {
		t.Fatalf("log has %d commits, want 2", n)
	}

	must("delete", alice.DeleteRepository(ctx, "warehouse"))
	if _, err := alice.GetRepository(ctx, "warehouse"); !client.IsNotFound(err) {
		t.Fatalf("GET after delete = %v", err)
	}
	r2, err := alice.CreateRepository(ctx, client.CreateRepositoryRequest{Name: "warehouse", StorageNamespace: "s3://bucket/warehouse2"})
	must("create again", err)
	newUID := r2.InstanceUID
	if newUID == oldUID {
		t.Fatal("instance uid reused")
	}
	if _, err := alice.GetBranch(ctx, "warehouse", "etl/daily"); !client.IsNotFound(err) {
		t.Fatalf("old branch visible in the new instance: %v", err)
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
		t.Fatalf("repolock clean exited %d: %s %s", code, stdout, stderr)
	}
	var run struct {
		Kind    string         `json:"kind"`
		Cleaner map[string]any `json:"cleaner"`
	}
	if err := json.Unmarshal([]byte(stdout), &run); err != nil {
		t.Fatalf("repolock clean output: %v\n%s", err, stdout)
	}
	want := map[string]any{"scanned": 1.0, "cleaned": 1.0, "failed": 0.0, "stale_initial": 0.0, "rows_deleted": 5.0}
	if fmt.Sprint(run.Cleaner) != fmt.Sprint(want) {
		t.Fatalf("repolock clean cleaner = %v, want %v (output %s)", run.Cleaner, want, stdout)
	}
	if n := rows(oldUID); n != 0 {
		t.Fatalf("old instance rows after clean = %d", n)
	}
	if n := rows(newUID); n != 2 {
		t.Fatalf("new instance rows = %d, want 2", n)
	}
	_, err = alice.GetBranch(ctx, "warehouse", "main")
	must("main branch of the new instance", err)
}
