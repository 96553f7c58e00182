package reports_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/reports"
)

// noDrift fails t unless Verify finds every figure exact.
func noDrift(t testing.TB, rs *reports.Service, when string) reports.Verification {
	t.Helper()
	v, err := rs.Verify(context.Background())
	if err != nil {
		t.Fatalf("%s: verify: %v", when, err)
	}
	if len(v.Drift) > 0 {
		t.Fatalf("%s: drift: %+v", when, v.Drift)
	}
	return v
}

// figuresOf reads tenant's row of report_ownership.
func figuresOf(t testing.TB, db *database.DB, tenant string) reports.Figures {
	t.Helper()
	var f reports.Figures
	if err := db.GetContext(context.Background(), &f, `
		SELECT locks, applications, credentials, unreferenced_locks FROM report_ownership WHERE tenant_id = $1`, tenant); err != nil {
		t.Fatal(err)
	}
	return f
}

// The figures are exact after every kind of write: each step below changes
// the tables through one path (the services as api serve runs them, a GC
// run, a fold, or an operator's SQL, including one statement that changes
// the lock table and both reference tables at once), and Verify recounts.
func TestOwnershipFiguresEveryPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := locks.New(db, locks.Fixed(normalize.Default()), nil)
	as := apps.New(db, ls)
	rs := reports.New(db)
	collector := gc.New(db, ls, gc.Config{Holder: "figures", Logger: slog.New(slog.DiscardHandler)})
	alice := dbtest.NewTenant(t, db, "").ID
	bob := dbtest.NewTenant(t, db, "")
	carol := dbtest.NewTenant(t, db, "")

	var appID, credID, sharedLock, bareLock string
	lockOf := func(url string) string {
		var id string
		if err := db.GetContext(ctx, &id, `SELECT id FROM RepositoryLockOwner WHERE git_repository_url = $1`, url); err != nil {
			t.Fatal(err)
		}
		return id
	}
	steps := []struct {
		name string
		do   func() error
		want *reports.Figures // alice's, when checked
	}{
		{"bare acquires, one group-commit batch each", func() error {
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for i := range 3 {
				wg.Go(func() {
					_, err := ls.Acquire(ctx, alice, fmt.Sprintf("https://git.example.com/fig/bare%d", i))
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					return err
				}
			}
			bareLock = lockOf("git.example.com/fig/bare0")
			return nil
		}, &reports.Figures{Locks: 3, UnreferencedLocks: 3}},
		{"application on a new URL (lock and reference in one statement)", func() error {
			a, err := as.CreateApplication(ctx, alice, apps.NewApplication{Name: "app", RepoURL: "https://git.example.com/fig/shared"})
			appID, sharedLock = a.ID, a.LockID
			return err
		}, &reports.Figures{Locks: 4, Applications: 1, UnreferencedLocks: 3}},
		{"application on an acquired lock", func() error {
			_, err := as.CreateApplication(ctx, alice, apps.NewApplication{Name: "app2", RepoURL: "https://git.example.com/fig/bare0"})
			return err
		}, &reports.Figures{Locks: 4, Applications: 2, UnreferencedLocks: 2}},
		{"credential on a referenced lock", func() error {
			c, err := as.CreateRepositoryCredential(ctx, alice, apps.NewRepositoryCredential{Name: "cred", RepoURL: "git@git.example.com:fig/shared.git", SecretRef: "vault:x"})
			credID = c.ID
			return err
		}, &reports.Figures{Locks: 4, Applications: 2, Credentials: 1, UnreferencedLocks: 2}},
		{"delete the application (the credential keeps the lock)", func() error {
			return as.DeleteApplication(ctx, alice, appID)
		}, &reports.Figures{Locks: 4, Applications: 1, Credentials: 1, UnreferencedLocks: 2}},
		{"delete the credential (its lock is released)", func() error {
			return as.DeleteRepositoryCredential(ctx, alice, credID)
		}, &reports.Figures{Locks: 3, Applications: 1, UnreferencedLocks: 2}},
		{"fold", func() error { _, err := rs.Fold(ctx); return err },
			&reports.Figures{Locks: 3, Applications: 1, UnreferencedLocks: 2}},
		{"transfer a referenced lock, deleting its references (both kinds in one statement)", func() error {
			if _, err := as.CreateRepositoryCredential(ctx, alice, apps.NewRepositoryCredential{Name: "cred2", RepoURL: "https://git.example.com/fig/bare0", SecretRef: "vault:x"}); err != nil {
				return err
			}
			_, err := ls.Transfer(ctx, locks.TransferRequest{LockID: bareLock, To: bob.Name, References: locks.ReferencesDelete, Actor: "test"})
			return err
		}, &reports.Figures{Locks: 2, UnreferencedLocks: 2}},
		{"GC collects the unreferenced locks", func() error {
			o := gc.DefaultOptions(gc.TriggerCLI)
			o.MinAge = 0
			_, err := collector.Collect(ctx, o)
			return err
		}, &reports.Figures{}},
		{"SQL: one statement deletes a lock and its references of both kinds", func() error {
			l := dbtest.NewLock(t, db, alice, "git.example.com/fig/sql", 0)
			dbtest.NewApplication(t, db, alice, "sql-app", l)
			dbtest.NewCredential(t, db, alice, "sql-cred", l)
			sharedLock = l
			_, err := db.ExecContext(ctx, `
				WITH ra AS (DELETE FROM RepositoryLockApplication WHERE lock_id = $1),
				     rc AS (DELETE FROM RepositoryLockRepositoryCredential WHERE lock_id = $1)
				DELETE FROM RepositoryLockOwner WHERE id = $1`, l)
			return err
		}, &reports.Figures{Applications: 1, Credentials: 1}},
		{"SQL: a lock and its reference inserted in one statement, then the reference moved", func() error {
			_, err := db.ExecContext(ctx, `
				WITH l AS (INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
				           VALUES ('git.example.com/fig/sql2', 1, $1) RETURNING id),
				     a AS (SELECT id FROM applications WHERE cluster_user_id = $1 AND name = 'sql-app')
				INSERT INTO RepositoryLockApplication (application_id, lock_id) SELECT a.id, l.id FROM a, l`, alice)
			if err != nil {
				return err
			}
			l2 := dbtest.NewLock(t, db, alice, "git.example.com/fig/sql3", 0)
			_, err = db.ExecContext(ctx, `UPDATE RepositoryLockApplication SET lock_id = $1 WHERE lock_id = $2`, l2, lockOf("git.example.com/fig/sql2"))
			return err
		}, &reports.Figures{Locks: 2, Applications: 1, Credentials: 1, UnreferencedLocks: 1}},
		{"SQL: every lock of alice moved to carol", func() error {
			_, err := db.ExecContext(ctx, `UPDATE RepositoryLockOwner SET cluster_user_id = $1 WHERE cluster_user_id = $2`, carol.ID, alice)
			return err
		}, &reports.Figures{Applications: 1, Credentials: 1}},
		{"SQL: TRUNCATE of a reference table", func() error {
			_, err := db.ExecContext(ctx, `TRUNCATE RepositoryLockApplication`)
			return err
		}, &reports.Figures{Applications: 1, Credentials: 1}},
		{"tenant deletion cascades", func() error {
			if _, err := as.CreateApplication(ctx, carol.ID, apps.NewApplication{Name: "c", RepoURL: "https://git.example.com/fig/carol"}); err != nil {
				return err
			}
			_, err := as.DeleteTenant(ctx, carol.Name)
			return err
		}, nil},
		{"fold after the deletion drops the deleted tenant's deltas", func() error {
			_, err := rs.Fold(ctx)
			return err
		}, nil},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		noDrift(t, rs, s.name)
		if s.want != nil {
			if got := figuresOf(t, db, alice); got != *s.want {
				t.Fatalf("%s: alice's figures %+v, want %+v", s.name, got, *s.want)
			}
		}
	}
	_ = sharedLock
	if n := countRows(t, db, `SELECT count(*) FROM report_ownership_deltas`); n != 0 {
		t.Fatalf("%d deltas left after the last fold", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM report_ownership_totals WHERE cluster_user_id = $1`, carol.ID); n != 0 {
		t.Fatalf("the deleted tenant kept its totals row")
	}
}

// A batch of N acquires of one tenant (one group-commit statement) appends
// ONE delta row, not N.
func TestOwnershipDeltaPerStatement(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "").ID
	bob := dbtest.NewTenant(t, db, "").ID
	mustExec(t, db, `SELECT repolock_ownership_fold()`)
	// The shape of a group-commit batch: one INSERT of many locks.
	mustExec(t, db, `
		INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		SELECT 'git.example.com/batch/r' || i, 2, $1 FROM generate_series(0, 49) i`, alice)
	if n := countRows(t, db, `SELECT count(*) FROM report_ownership_deltas`); n != 1 {
		t.Fatalf("a statement of 50 acquires appended %d delta rows, want 1", n)
	}
	// Two tenants in one statement: one row each.
	mustExec(t, db, `UPDATE RepositoryLockOwner SET cluster_user_id = $1 WHERE git_repository_url LIKE 'git.example.com/batch/r1%'`, bob)
	if n := countRows(t, db, `SELECT count(*) FROM report_ownership_deltas`); n != 3 {
		t.Fatalf("moving locks between two tenants appended %d delta rows, want 2 more", n-1)
	}
	// An update that changes no figure (the GC's flag) appends nothing.
	mustExec(t, db, `UPDATE RepositoryLockOwner SET gc_candidate = NOT gc_candidate`)
	if n := countRows(t, db, `SELECT count(*) FROM report_ownership_deltas`); n != 3 {
		t.Fatalf("an update of the GC flag appended %d delta rows", n-3)
	}
	noDrift(t, reports.New(db), "after the batch")
}

// Two folds racing: the second waits for the deltas the first deleted and,
// once the first commits, skips them; every delta is added once.
func TestFoldRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	rs := reports.New(db)
	alice := dbtest.NewTenant(t, db, "").ID
	for i := range 5 {
		dbtest.NewLock(t, db, alice, fmt.Sprintf("git.example.com/race/r%d", i), 0)
	}
	first, _ := dbtest.BeginWithPID(t, db)
	var n1 int64
	if err := first.GetContext(ctx, &n1, `SELECT repolock_ownership_fold()`); err != nil {
		t.Fatal(err)
	}
	second, pid := dbtest.BeginWithPID(t, db)
	var n2 atomic.Int64
	var done atomic.Bool
	errc := make(chan error, 1)
	go func() {
		var n int64
		err := second.GetContext(ctx, &n, `SELECT repolock_ownership_fold()`)
		n2.Store(n)
		done.Store(true)
		errc <- err
	}()
	dbtest.WaitUntilBlocked(t, db, pid, done.Load)
	// A delta committed meanwhile: the second fold's snapshot is older, it
	// is for the next fold.
	dbtest.NewLock(t, db, alice, "git.example.com/race/late", 0)
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := second.Commit(); err != nil {
		t.Fatal(err)
	}
	if n1 == 0 || n2.Load() != 0 {
		t.Fatalf("first fold took %d deltas, second %d: want >0 and 0", n1, n2.Load())
	}
	if f := figuresOf(t, db, alice); f.Locks != 6 || f.UnreferencedLocks != 6 {
		t.Fatalf("figures %+v, want 6 locks, 6 unreferenced", f)
	}
	noDrift(t, rs, "after the race")

	// And many folds at once against many writers.
	ls := locks.New(db, locks.Fixed(normalize.Default()), nil)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var folded atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := rs.Fold(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				folded.Add(n)
			}
		})
	}
	var writers sync.WaitGroup
	for w := range 8 {
		writers.Go(func() {
			for i := range 40 {
				if _, err := ls.Acquire(ctx, alice, fmt.Sprintf("https://git.example.com/race/w%d-%d", w, i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	if _, err := rs.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	if f := figuresOf(t, db, alice); f.Locks != 6+320 {
		t.Fatalf("figures %+v, want %d locks", f, 6+320)
	}
	if n := countRows(t, db, `SELECT count(*) FROM report_ownership_deltas`); n != 0 {
		t.Fatalf("%d deltas left", n)
	}
	noDrift(t, rs, "after concurrent folds")
}

// A reference inserted while the lock's last other reference is deleted
// concurrently: the deleting trigger cannot see the new reference, so it
// waits for the inserter (FOR UPDATE against the foreign key's FOR KEY
// SHARE) and re-checks; the lock stays counted referenced.
func TestUnreferencedFlagRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	rs := reports.New(db)
	alice := dbtest.NewTenant(t, db, "").ID
	l := dbtest.NewLock(t, db, alice, "git.example.com/flag/r", time.Hour)
	old := dbtest.NewApplication(t, db, alice, "old", l)
	inserter, _ := dbtest.BeginWithPID(t, db)
	var newApp string
	if err := inserter.GetContext(ctx, &newApp, `
		INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
		VALUES ($1, 'new', 'git.example.com/flag/r', 'git.example.com/flag/r') RETURNING id`, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := inserter.ExecContext(ctx, `INSERT INTO RepositoryLockApplication (application_id, lock_id) VALUES ($1, $2)`, newApp, l); err != nil {
		t.Fatal(err)
	}
	deleter, pid := dbtest.BeginWithPID(t, db)
	var done atomic.Bool
	errc := make(chan error, 1)
	go func() {
		_, err := deleter.ExecContext(ctx, `DELETE FROM applications WHERE id = $1`, old)
		done.Store(true)
		errc <- err
	}()
	dbtest.WaitUntilBlocked(t, db, pid, done.Load)
	if err := inserter.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := deleter.Commit(); err != nil {
		t.Fatal(err)
	}
	var unref bool
	if err := db.GetContext(ctx, &unref, `SELECT unreferenced FROM RepositoryLockOwner WHERE id = $1`, l); err != nil {
		t.Fatal(err)
	}
	if unref {
		t.Fatal("the lock is counted unreferenced while an application references it")
	}
	noDrift(t, rs, "after the race")
}
