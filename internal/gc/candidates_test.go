package gc_test

import (
	"context"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
)

// isCandidate reports the lock's gc_candidate flag; ok is false when the
// lock is gone.
func isCandidate(t testing.TB, q database.Querier, lockID string) (flag, ok bool) {
	t.Helper()
	err := q.GetContext(context.Background(), &flag, `SELECT gc_candidate FROM RepositoryLockOwner WHERE id = $1`, lockID)
	if database.IsNoRows(err) {
		return false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return flag, true
}

// Every way a reference can go away flags its lock in the same transaction,
// whoever does it; the next run collects the lock. Each case starts from a
// lock an hour old, referenced by one application ("app") or one
// credential ("cred"), that a first run has cleared.
func TestReferenceRemovalFlagsTheLock(t *testing.T) {
	t.Parallel()
	type fixture struct {
		db                 *database.DB
		tenant, name       string
		lock, other        string // other: a second lock of the tenant, referenced by "keep"
		app, cred, keepApp string
	}
	tests := []struct {
		name string
		// remove makes the lock unreferenced (or deletes it).
		remove func(t *testing.T, f fixture)
		// gone: the lock went with the removal (nothing left to collect).
		gone bool
		// also: other locks the removal leaves unreferenced.
		also int64
	}{
		{name: "plain SQL DELETE of the application's reference", remove: func(t *testing.T, f fixture) {
			mustExec(t, f.db, `DELETE FROM RepositoryLockApplication WHERE application_id = $1`, f.app)
			mustExec(t, f.db, `DELETE FROM RepositoryLockRepositoryCredential WHERE repository_credential_id = $1`, f.cred)
		}},
		{name: "plain SQL DELETE of the application and credential rows (cascade)", remove: func(t *testing.T, f fixture) {
			mustExec(t, f.db, `DELETE FROM applications WHERE id = $1`, f.app)
			mustExec(t, f.db, `DELETE FROM repository_credentials WHERE id = $1`, f.cred)
		}},
		{name: "both references deleted in one statement each, in one transaction", remove: func(t *testing.T, f fixture) {
			err := f.db.WithTx(context.Background(), func(tx database.Tx) error {
				mustExec(t, tx, `DELETE FROM repository_credentials WHERE cluster_user_id = $1`, f.tenant)
				mustExec(t, tx, `DELETE FROM applications WHERE id = $1`, f.app)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
		{name: "plain SQL UPDATE of lock_id moves the references", remove: func(t *testing.T, f fixture) {
			mustExec(t, f.db, `UPDATE RepositoryLockApplication SET lock_id = $1 WHERE application_id = $2`, f.other, f.app)
			mustExec(t, f.db, `UPDATE RepositoryLockRepositoryCredential SET lock_id = $1 WHERE repository_credential_id = $2`, f.other, f.cred)
		}},
		{name: "upsert of the reference (the apps' ON CONFLICT DO UPDATE)", remove: func(t *testing.T, f fixture) {
			mustExec(t, f.db, `INSERT INTO RepositoryLockApplication (application_id, lock_id) VALUES ($1, $2)
				ON CONFLICT (application_id) DO UPDATE SET lock_id = EXCLUDED.lock_id`, f.app, f.other)
			mustExec(t, f.db, `INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id) VALUES ($1, $2)
				ON CONFLICT (repository_credential_id) DO UPDATE SET lock_id = EXCLUDED.lock_id`, f.cred, f.other)
		}},
		{name: "TRUNCATE of the reference tables", also: 1, remove: func(t *testing.T, f fixture) {
			mustExec(t, f.db, `TRUNCATE RepositoryLockApplication`)
			mustExec(t, f.db, `TRUNCATE RepositoryLockRepositoryCredential`)
		}},
		{name: "API: the application and the credential move to another URL", gone: true, remove: func(t *testing.T, f fixture) {
			u := "https://git.example.com/t/moved-to"
			if _, err := svc(f.db).apps.UpdateApplication(context.Background(), f.tenant, f.app, apps.ApplicationPatch{RepoURL: &u}); err != nil {
				t.Fatal(err)
			}
			if _, err := svc(f.db).apps.UpdateRepositoryCredential(context.Background(), f.tenant, f.cred, apps.RepositoryCredentialPatch{RepoURL: &u}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "API: tenant deletion", gone: true, remove: func(t *testing.T, f fixture) {
			if _, err := svc(f.db).apps.DeleteTenant(context.Background(), f.name); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "plain SQL DELETE of the tenant (cascades)", gone: true, remove: func(t *testing.T, f fixture) {
			mustExec(t, f.db, `DELETE FROM cluster_users WHERE id = $1`, f.tenant)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			f := fixture{db: db, name: "t"}
			f.tenant = dbtest.NewTenant(t, db, f.name).ID
			f.lock = dbtest.NewLock(t, db, f.tenant, "git.example.com/t/lock", time.Hour)
			f.other = dbtest.NewLock(t, db, f.tenant, "git.example.com/t/other", time.Hour)
			f.app = dbtest.NewApplication(t, db, f.tenant, "app", f.lock)
			f.cred = dbtest.NewCredential(t, db, f.tenant, "cred", f.lock)
			f.keepApp = dbtest.NewApplication(t, db, f.tenant, "keep", f.other)
			// Both locks were inserted as candidates; a run clears them.
			run, err := newCollector(db, gc.Config{}).Collect(ctx, opts(1000, time.Minute))
			if err != nil || run.Candidates != 2 || run.Cleared != 2 || run.Deleted != 0 {
				t.Fatalf("first run: %+v, %v; want 2 candidates cleared", run, err)
			}
			if flag, _ := isCandidate(t, db, f.lock); flag {
				t.Fatal("the referenced lock is still a candidate after a run")
			}

			tt.remove(t, f)

			flag, ok := isCandidate(t, db, f.lock)
			if ok != !tt.gone {
				t.Fatalf("lock exists = %v after the removal, want %v", ok, !tt.gone)
			}
			if ok && !flag {
				t.Fatal("the lock lost its references but is not a GC candidate")
			}
			if n := countRows(t, db, dbtest.UnflaggedLocksSQL); n != 0 {
				t.Fatalf("%d unreferenced locks are not candidates", n)
			}
			run, err = newCollector(db, gc.Config{}).Collect(ctx, opts(1000, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := isCandidate(t, db, f.lock); ok {
				t.Fatalf("the unreferenced lock survived a run: %+v", run)
			}
			if want := 1 + tt.also; !tt.gone && run.Deleted != want {
				t.Fatalf("second run deleted %d, want %d", run.Deleted, want)
			}
			if n := countRows(t, db, dbtest.UnflaggedLocksSQL+` OR o.gc_candidate`); n != 0 {
				t.Fatalf("%d candidates or unflagged orphans left after the second run", n)
			}
		})
	}
}

// A lock younger than the minimum age is visited, not collected, and stays
// a candidate until a run finds it old enough.
func TestYoungCandidateStaysFlagged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	tenant := dbtest.NewTenant(t, db, "t").ID
	young := dbtest.NewLock(t, db, tenant, "git.example.com/t/young", 0)
	for range 2 {
		run, err := newCollector(db, gc.Config{}).Collect(ctx, opts(1000, time.Hour))
		if err != nil || run.Candidates != 1 || run.Scanned != 0 || run.Deleted != 0 || run.Cleared != 0 {
			t.Fatalf("run = %+v, %v; want 1 candidate, nothing scanned, deleted or cleared", run, err)
		}
		if flag, ok := isCandidate(t, db, young); !ok || !flag {
			t.Fatalf("young lock: exists %v, candidate %v; want both", ok, flag)
		}
	}
	run, err := newCollector(db, gc.Config{}).Collect(ctx, opts(1000, 0))
	if err != nil || run.Deleted != 1 {
		t.Fatalf("run with min age 0 = %+v, %v; want it collected", run, err)
	}
}

// The race of a reference removal against a run that clears the flag,
// forced both ways with two transactions (pg_stat_activity shows who
// waits, so the test does not depend on timing):
//
//   - "gc first": the run holds the lock row (it is in the batch, and the
//     batch is held up by a test transaction locking repository_lock_events,
//     which the batch's delete writes); the removal's trigger waits for it;
//     the run clears the flag (the reference is still there at its
//     snapshot) and commits; the trigger then flags the lock again.
//   - "delete first": the removal's trigger holds the lock row; the run
//     skips it and clears nothing.
//
// Whichever way, once the removal commits the lock is an unreferenced
// candidate and the next run collects it; rolled back, it is referenced
// again and the next run clears or keeps its flag.
func TestReferenceRemovalVersusClearing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		first       string // "gc" or "delete"
		commit      bool
		wantCleared int64 // by the racing run
	}{
		{first: "gc", commit: true, wantCleared: 1},
		{first: "gc", commit: false, wantCleared: 1},
		{first: "delete", commit: true, wantCleared: 0},
		{first: "delete", commit: false, wantCleared: 0},
	}
	for _, tt := range tests {
		name := tt.first + " first, removal "
		if tt.commit {
			name += "commits"
		} else {
			name += "rolls back"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			tenant := dbtest.NewTenant(t, db, "t").ID
			// The lock under test: referenced, and a candidate (as after a
			// bare acquire followed by an application).
			lock := dbtest.NewLock(t, db, tenant, "git.example.com/t/raced", time.Hour)
			app := dbtest.NewApplication(t, db, tenant, "app", lock)
			// An orphan in the same batch, so the batch writes a collected
			// event.
			dbtest.NewLock(t, db, tenant, "git.example.com/t/orphan", time.Hour)

			removal, removalPID := dbtest.BeginWithPID(t, db)
			remove := func() error {
				_, err := removal.ExecContext(ctx, `DELETE FROM RepositoryLockApplication WHERE application_id = $1`, app)
				return err
			}
			var run gc.Run
			switch tt.first {
			case "gc":
				events, _ := dbtest.BeginWithPID(t, db)
				mustExec(t, events, `LOCK TABLE repository_lock_events IN SHARE MODE`)
				done := make(chan error, 1)
				go func() {
					var err error
					run, err = newCollector(db, gc.Config{}).Collect(ctx, opts(1000, time.Minute))
					done <- err
				}()
				waitForStatement(t, db, `DELETE FROM RepositoryLockOwner o`, func() bool { return len(done) > 0 })
				removed := make(chan error, 1)
				go func() { removed <- remove() }()
				dbtest.WaitUntilBlocked(t, db, removalPID, func() bool { return len(removed) > 0 })
				if err := events.Rollback(); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatalf("the racing run: %v", err)
				}
				if err := <-removed; err != nil {
					t.Fatalf("the removal: %v", err)
				}
			case "delete":
				if err := remove(); err != nil {
					t.Fatal(err)
				}
				// The run must not wait for the removal's row lock.
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				var err error
				if run, err = newCollector(db, gc.Config{}).Collect(cctx, opts(1000, time.Minute)); err != nil {
					t.Fatalf("the racing run: %v", err)
				}
			}
			if run.Candidates != 2 || run.Deleted != 1 || run.Cleared != tt.wantCleared {
				t.Fatalf("racing run = %+v; want 2 candidates, 1 deleted, %d cleared", run, tt.wantCleared)
			}
			end := removal.Commit
			if !tt.commit {
				end = removal.Rollback
			}
			if err := end(); err != nil {
				t.Fatal(err)
			}

			flag, ok := isCandidate(t, db, lock)
			if !ok {
				t.Fatal("the lock is gone")
			}
			if tt.commit && !flag {
				t.Fatal("the removal committed: the unreferenced lock must be a candidate")
			}
			if n := countRows(t, db, dbtest.UnflaggedLocksSQL); n != 0 {
				t.Fatalf("%d unreferenced locks are not candidates", n)
			}
			next, err := newCollector(db, gc.Config{}).Collect(ctx, opts(1000, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			_, ok = isCandidate(t, db, lock)
			if ok == tt.commit {
				t.Fatalf("after the next run (%+v) the lock exists = %v; want %v", next, ok, !tt.commit)
			}
		})
	}
}

// waitForStatement waits until a backend of this database running a
// statement that contains text is waiting for a lock. finished reports
// whether the call that should block has returned: the test fails at once.
func waitForStatement(t *testing.T, db *database.DB, text string, finished func() bool) {
	t.Helper()
	for i := 0; ; i++ {
		if finished() {
			t.Fatalf("the statement %q finished without blocking", text)
		}
		var n int
		if err := db.GetContext(context.Background(), &n, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, $1) > 0
			  AND pid <> pg_backend_pid()`, text); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if i > 6000 {
			t.Fatalf("no backend ever blocked in %q", text)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
