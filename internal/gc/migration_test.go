package gc_test

import (
	"context"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// Migration 000013 on a database with locks: exactly the unreferenced ones
// become GC candidates, new locks default to candidates, the triggers work;
// down (to the version before it) removes the column, the index, the
// triggers and the run columns, and up works again.
func TestCandidateMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := database.Open(ctx, dbtest.NewDatabase(t, false), database.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mg, err := database.NewMigrator(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mg.Close() })
	versions, err := database.Versions()
	if err != nil {
		t.Fatal(err)
	}
	// The version before 000013 (numbers may have gaps).
	var before uint
	for _, v := range versions {
		if v < 13 {
			before = v
		}
	}
	if err := mg.To(before); err != nil {
		t.Fatal(err)
	}

	// At the version before: referenced and unreferenced locks.
	mustExec(t, db, `INSERT INTO cluster_users (name) VALUES ('t')`)
	mustExec(t, db, `
		INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		SELECT 'git.example.com/t/' || k, 2, (SELECT id FROM cluster_users)
		FROM unnest(ARRAY['app', 'cred', 'both', 'orphan-1', 'orphan-2']) k`)
	for _, ref := range []struct{ table, refTable, col, key string }{
		{"applications", "RepositoryLockApplication", "application_id", "app"},
		{"repository_credentials", "RepositoryLockRepositoryCredential", "repository_credential_id", "cred"},
		{"applications", "RepositoryLockApplication", "application_id", "both"},
		{"repository_credentials", "RepositoryLockRepositoryCredential", "repository_credential_id", "both"},
	} {
		mustExec(t, db, `
			WITH row AS (
				INSERT INTO `+ref.table+` (cluster_user_id, name, repo_url, normalized_url)
				SELECT cluster_user_id, $1, git_repository_url, git_repository_url FROM RepositoryLockOwner WHERE git_repository_url = $2
				RETURNING id, normalized_url)
			INSERT INTO `+ref.refTable+` (`+ref.col+`, lock_id)
			SELECT row.id, o.id FROM row JOIN RepositoryLockOwner o ON o.git_repository_url = row.normalized_url`,
			ref.key+"-"+ref.table, "git.example.com/t/"+ref.key)
	}

	if err := mg.Up(); err != nil {
		t.Fatal(err)
	}
	want := []string{"git.example.com/t/orphan-1", "git.example.com/t/orphan-2"}
	if got := candidateURLs(t, db); !equalStrings(got, want) {
		t.Fatalf("candidates after up = %v, want %v", got, want)
	}
	// New locks are candidates by default; the triggers flag a lock that
	// loses its references.
	mustExec(t, db, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		SELECT 'git.example.com/t/new', 2, id FROM cluster_users`)
	mustExec(t, db, `DELETE FROM applications WHERE name = 'app-applications'`)
	want = []string{"git.example.com/t/app", "git.example.com/t/new", "git.example.com/t/orphan-1", "git.example.com/t/orphan-2"}
	if got := candidateURLs(t, db); !equalStrings(got, want) {
		t.Fatalf("candidates = %v, want %v", got, want)
	}
	var plan string
	if err := db.GetContext(ctx, &plan, `SELECT indexdef FROM pg_indexes WHERE indexname = 'repositorylockowner_gc_candidate_idx'`); err != nil {
		t.Fatal(err)
	}
	if want := "CREATE INDEX repositorylockowner_gc_candidate_idx ON public.repositorylockowner USING btree (id) WHERE gc_candidate"; plan != want {
		t.Fatalf("index = %q, want %q", plan, want)
	}

	// Down to the version before 000013 (through the later migrations,
	// whose downs come first).
	if err := mg.To(before); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT count(*) FROM information_schema.columns WHERE table_name = 'repositorylockowner' AND column_name = 'gc_candidate'`,
		`SELECT count(*) FROM information_schema.columns WHERE table_name IN ('gc_runs', 'report_gc_runs') AND column_name IN ('full_scan', 'candidates', 'cleared', 'flagged')`,
		`SELECT count(*) FROM pg_indexes WHERE indexname = 'repositorylockowner_gc_candidate_idx'`,
		`SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%\_gc\_%'`,
		`SELECT count(*) FROM pg_proc WHERE proname = 'repolock_flag_gc_candidates'`,
	} {
		if n := countRows(t, db, q); n != 0 {
			t.Fatalf("after down: %s = %d, want 0", q, n)
		}
	}
	if n := countRows(t, db, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'report_gc_runs'`); n != 20 {
		t.Fatalf("report_gc_runs has %d columns after down, want its 20", n)
	}
	// Without the triggers, reference removals work as before; up again
	// flags what is unreferenced then ("both" keeps its credential).
	mustExec(t, db, `DELETE FROM applications`)
	mustExec(t, db, `DELETE FROM repository_credentials WHERE name = 'cred-repository_credentials'`)
	if err := mg.Up(); err != nil {
		t.Fatal(err)
	}
	want = []string{"git.example.com/t/app", "git.example.com/t/cred", "git.example.com/t/new", "git.example.com/t/orphan-1", "git.example.com/t/orphan-2"}
	if got := candidateURLs(t, db); !equalStrings(got, want) {
		t.Fatalf("candidates after up again = %v, want %v", got, want)
	}
}
