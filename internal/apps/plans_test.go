package apps_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// TestTriggersFindLocksThroughTheIndex: the triggers that a create or a
// delete fires on RepositoryLockOwner (repolock_ownership_locks, the new
// lock left unreferenced; repolock_flag_gc_candidates, the locks a
// reference gained or lost) find their locks by id on a session that ran
// them often while the table was small, after the table has grown. PL/pgSQL
// caches their plans per session: before migration 000032 the generic plan
// made on a few pages read the whole table for every batch of creates, and
// kept doing so as it grew (make bench-http's phase a: 2,213 sequential
// scans reading 22.6M rows in 10 s).
func TestTriggersFindLocksThroughTheIndex(t *testing.T) {
	t.Parallel()
	// One connection: every statement below runs on the session whose
	// cached plans are under test.
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{MaxOpenConns: 1}))
	ctx := context.Background()
	svc, _ := newApps(db)
	u := dbtest.NewTenant(t, db, "")
	cycle := func(name string) {
		t.Helper()
		a, err := svc.CreateApplication(ctx, u.ID, apps.NewApplication{Name: name, RepoURL: "https://github.com/plans/" + name})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.DeleteApplication(ctx, u.ID, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	// insertLocks inserts n locks. asCreate inserts them as a batch of
	// creates does (unreferenced false, with the references to come in
	// the same statement): the insert trigger then checks each new lock
	// (repolock_ownership_locks), and finds these unreferenced.
	insertLocks := func(prefix string, n int, asCreate bool) {
		t.Helper()
		if _, err := db.ExecContext(ctx, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, normalizer_rules, cluster_user_id, gc_candidate, unreferenced)
			SELECT 'example.com/' || $2 || '/r' || g, 3, '', $1, true, NOT $4 FROM generate_series(1, $3) g`, u.ID, prefix, n, asCreate); err != nil {
			t.Fatal(err)
		}
	}
	// A small table whose statistics are known (as autovacuum leaves a
	// new deployment's), then, on this session: batches of 16 new locks
	// (a batch of creates), and creates and deletes through the service.
	// A plan made now is made for a table of a few pages.
	insertLocks("small", 1000, false)
	if _, err := db.ExecContext(ctx, `ANALYZE RepositoryLockOwner`); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		insertLocks(fmt.Sprintf("batch%d", i), 16, true)
		cycle(fmt.Sprintf("warm-%d", i))
	}
	// The table grows by 20,000 locks (no ANALYZE: nothing invalidates
	// the cached plans).
	insertLocks("grow", 20000, false)
	seqScans := func() int64 {
		t.Helper()
		// Flush this session's pending statistics (it is the pool's only
		// one) when it next goes idle, then read them.
		if _, err := db.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := db.GetContext(ctx, &n, `SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_user_tables WHERE relname = 'repositorylockowner'`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := seqScans()
	insertLocks("now", 16, true)
	cycle("now")
	if n := seqScans() - before; n != 0 {
		t.Fatalf("16 new locks, a create and a delete scanned RepositoryLockOwner %d times: their triggers must find locks by id", n)
	}
}
