package gc_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/locks"
)

// GC runs back to back, with no minimum age and tiny batches (of every four
// runs, one is a full dry run and one a full run), while 20
// goroutines create, move and delete applications and credentials on a
// small set of URLs (through the API functions, and by an operator's plain
// SQL DELETE of an application or credential row, which releases nothing),
// and also leave locks behind the way a request that dies between acquiring
// a lock and writing its reference would (the orphans GC exists for, which
// the next creates on the same URL race to re-acquire while GC deletes
// them); two more goroutines create short-lived tenants with locks,
// applications and credentials and delete them, with apps.DeleteTenant or
// with a plain SQL DELETE of the tenant row (cascades).
//
// No request may fail, no reference may ever point at a missing lock, every
// application and credential keeps its one reference to its tenant's lock
// on its URL, every unreferenced lock is a GC candidate in every snapshot
// (and a full run never finds one that is not), and after a final quiet GC
// no orphan and no candidate remains.
func TestGCDuringApplicationChurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)

	const (
		tenants        = 4
		urlsPerTenant  = 8
		workers        = 20
		opsPerWorker   = 60
		tenantChurners = 2
		tenantsEach    = 12
	)
	tenantIDs := make([]string, tenants)
	for i := range tenantIDs {
		tenantIDs[i] = dbtest.NewTenant(t, db, fmt.Sprintf("tenant-%d", i)).ID
	}
	rawURL := func(tenant, n int) string {
		return fmt.Sprintf("https://git.example.com/org-%d/repo-%d.git", tenant, n)
	}

	as := svc(db).apps

	// GC loop.
	c := newCollector(db, gc.Config{})
	var (
		stopGC       = make(chan struct{})
		gcDone       = make(chan struct{})
		gcRuns       atomic.Int64
		fullRuns     atomic.Int64
		churnDeleted atomic.Int64
		churnCleared atomic.Int64
		gcErrs       = make(chan error, 1)
	)
	var gcWG sync.WaitGroup
	gcLoop := func(c *gc.Collector, options func(n int) gc.Options) {
		defer gcWG.Done()
		for n := 0; ; n++ {
			select {
			case <-stopGC:
				return
			default:
			}
			o := options(n)
			run, err := c.Collect(ctx, o)
			if err != nil {
				gcErrs <- err
				return
			}
			if run.Status == gc.StatusSkipped {
				continue
			}
			if run.Flagged != 0 {
				gcErrs <- fmt.Errorf("a full run (dry run %v) found %d unreferenced locks without the candidate flag", run.DryRun, run.Flagged)
				return
			}
			if o.Full {
				fullRuns.Add(1)
			}
			if !o.DryRun {
				gcRuns.Add(1)
				churnDeleted.Add(run.Deleted)
				churnCleared.Add(run.Cleared)
			}
		}
	}
	gcWG.Add(1)
	go gcLoop(c, func(n int) gc.Options {
		o := opts(2, 0)
		o.Full = n%4 >= 2
		o.DryRun = n%4 == 2
		return o
	})
	go func() { gcWG.Wait(); close(gcDone) }()

	// Invariant checker: in one consistent snapshot, no reference points at
	// a missing lock, every application and credential references its
	// tenant's lock on its own URL, and every unreferenced lock is flagged.
	var (
		stopCheck  = make(chan struct{})
		checkDone  = make(chan struct{})
		checks     atomic.Int64
		violations atomic.Int64
	)
	go func() {
		defer close(checkDone)
		for {
			select {
			case <-stopCheck:
				return
			default:
			}
			n, err := invariantViolations(ctx, db)
			if err != nil {
				t.Errorf("invariant check: %v", err)
				return
			}
			checks.Add(1)
			violations.Add(int64(n))
		}
	}()

	var (
		wg     sync.WaitGroup
		failed atomic.Int64
		// created, deleted through the API, deleted by plain SQL, moved,
		// leaked; tenants deleted with their rows
		ops     [5]atomic.Int64
		tenantN atomic.Int64
		// deadlocks: plain SQL deletes chosen as a deadlock's victim
		// (and run again)
		deadlocks atomic.Int64
	)
	type row struct {
		credential bool
		id         string
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := w % tenants
			tenantID := tenantIDs[tenant]
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			var mine []row
			fail := func(op string, err error) {
				failed.Add(1)
				t.Errorf("worker %d: %s: %v", w, op, err)
			}
			for i := range opsPerWorker {
				u := rawURL(tenant, rng.IntN(urlsPerTenant))
				// Each worker keeps at most two rows, so URLs keep losing
				// their last reference and leaked locks stay orphans long
				// enough for GC to race the creates that re-acquire them.
				switch p := rng.IntN(100); {
				case len(mine) < 2 && (p < 40 || len(mine) == 0):
					name := fmt.Sprintf("w%d-%d", w, i)
					var r row
					var err error
					if p%2 == 0 {
						var app apps.Application
						app, err = as.CreateApplication(ctx, tenantID, apps.NewApplication{Name: name, RepoURL: u})
						r = row{id: app.ID}
					} else {
						var cred apps.RepositoryCredential
						cred, err = as.CreateRepositoryCredential(ctx, tenantID, apps.NewRepositoryCredential{Name: name, RepoURL: u, SecretRef: "k8s://ns/s"})
						r = row{credential: true, id: cred.ID}
					}
					if err != nil {
						fail("create", err)
						continue
					}
					mine = append(mine, r)
					ops[0].Add(1)
				case p < 60 || len(mine) >= 2 && p < 70:
					k := rng.IntN(len(mine))
					r := mine[k]
					var err error
					if r.credential {
						err = as.DeleteRepositoryCredential(ctx, tenantID, r.id)
					} else {
						err = as.DeleteApplication(ctx, tenantID, r.id)
					}
					if err != nil {
						fail("delete", err)
						continue
					}
					mine = append(mine[:k], mine[k+1:]...)
					ops[1].Add(1)
				case p < 75:
					// An operator deletes the row with plain SQL: the
					// reference goes with it (ON DELETE CASCADE), the lock
					// is not released.
					k := rng.IntN(len(mine))
					r := mine[k]
					table := "applications"
					if r.credential {
						table = "repository_credentials"
					}
					// Postgres may pick the operator's statement as the
					// victim of a deadlock with a create on the same lock
					// (the service's own paths retry those; docs/locks.md,
					// "Locking"): the operator runs it again.
					var err error
					for try := 0; try < 5; try++ {
						if _, err = db.ExecContext(ctx, `DELETE FROM `+table+` WHERE id = $1`, r.id); database.PQCode(err) != database.CodeDeadlockDetected {
							break
						}
						deadlocks.Add(1)
					}
					if err != nil {
						fail("plain SQL delete", err)
						continue
					}
					mine = append(mine[:k], mine[k+1:]...)
					ops[2].Add(1)
				case p < 88:
					// Move a row to another URL: its reference moves to
					// another lock (an UPDATE of lock_id), the old lock is
					// released if nothing else references it.
					r := mine[rng.IntN(len(mine))]
					var err error
					if r.credential {
						_, err = as.UpdateRepositoryCredential(ctx, tenantID, r.id, apps.RepositoryCredentialPatch{RepoURL: &u})
					} else {
						_, err = as.UpdateApplication(ctx, tenantID, r.id, apps.ApplicationPatch{RepoURL: &u})
					}
					if err != nil {
						fail("move", err)
						continue
					}
					ops[3].Add(1)
				default:
					// A request that dies after acquiring: the lock is
					// committed without a reference.
					if err := leak(ctx, db, tenantID, u); err != nil {
						fail("acquire without reference", err)
						continue
					}
					ops[4].Add(1)
				}
			}
		}()
	}
	// Short-lived tenants: locks (referenced and not) that go with their
	// tenant, through apps.DeleteTenant or a plain SQL cascade.
	for w := range tenantChurners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tenantsEach {
				name := fmt.Sprintf("ephemeral-%d-%d", w, i)
				id := dbtest.NewTenant(t, db, name).ID
				u := func(n int) string { return fmt.Sprintf("https://git.example.com/%s/repo-%d.git", name, n) }
				_, err := as.CreateApplication(ctx, id, apps.NewApplication{Name: "a", RepoURL: u(0)})
				if err == nil {
					_, err = as.CreateApplication(ctx, id, apps.NewApplication{Name: "b", RepoURL: u(0)})
				}
				if err == nil {
					_, err = as.CreateRepositoryCredential(ctx, id, apps.NewRepositoryCredential{Name: "c", RepoURL: u(1), SecretRef: "k8s://ns/s"})
				}
				if err == nil {
					err = leak(ctx, db, id, u(2))
				}
				if err == nil && i%2 == 0 {
					_, err = as.DeleteTenant(ctx, name)
				} else if err == nil {
					err = db.WithTx(ctx, func(tx database.Tx) error {
						_, err := tx.ExecContext(ctx, `DELETE FROM cluster_users WHERE id = $1`, id)
						return err
					})
				}
				if err != nil {
					failed.Add(1)
					t.Errorf("tenant %s: %v", name, err)
					continue
				}
				tenantN.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stopGC)
	<-gcDone
	close(stopCheck)
	<-checkDone
	close(gcErrs)
	for err := range gcErrs {
		t.Fatalf("a GC run failed during the churn: %v", err)
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed", n)
	}
	if n := violations.Load(); n != 0 {
		t.Fatalf("%d invariant violations seen in %d checks", n, checks.Load())
	}
	t.Logf("ops: %d creates, %d API deletes, %d plain SQL deletes (%d deadlocks run again), %d moves, %d leaked locks, %d tenants deleted; "+
		"%d GC runs (%d full, dry or not) collected %d locks and cleared %d flags during the churn; %d invariant checks",
		ops[0].Load(), ops[1].Load(), ops[2].Load(), deadlocks.Load(), ops[3].Load(), ops[4].Load(), tenantN.Load(),
		gcRuns.Load(), fullRuns.Load(), churnDeleted.Load(), churnCleared.Load(), checks.Load())
	if gcRuns.Load() < 2 || churnDeleted.Load() == 0 || churnCleared.Load() == 0 || fullRuns.Load() == 0 {
		t.Fatalf("GC ran %d times (%d full), collected %d locks and cleared %d flags during the churn: the race was not exercised",
			gcRuns.Load(), fullRuns.Load(), churnDeleted.Load(), churnCleared.Load())
	}

	// A final quiet GC leaves no orphan, no candidate, and breaks nothing.
	if _, err := c.Collect(ctx, opts(1000, 0)); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM report_orphan_locks`); n != 0 {
		t.Fatalf("%d orphan locks after the final GC", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM RepositoryLockOwner WHERE gc_candidate`); n != 0 {
		t.Fatalf("%d GC candidates after the final GC (all referenced: their flags should be cleared)", n)
	}
	if n, err := invariantViolations(ctx, db); err != nil || n != 0 {
		t.Fatalf("after the final GC: %d violations, %v", n, err)
	}
	left := countRows(t, db, `SELECT (SELECT count(*) FROM applications) + (SELECT count(*) FROM repository_credentials)`)
	if want := int(ops[0].Load() - ops[1].Load() - ops[2].Load()); left != want {
		t.Fatalf("%d applications and credentials left, want %d (creates - deletes)", left, want)
	}
	if n := countRows(t, db, `SELECT count(*) FROM cluster_users WHERE name LIKE 'ephemeral-%'`); n != 0 {
		t.Fatalf("%d short-lived tenants left", n)
	}
	// Every lock GC deleted has its collected event; no lock has two.
	events := countRows(t, db, `SELECT count(*) FROM repository_lock_events WHERE event = 'collected'`)
	if recorded := countRows(t, db, `SELECT coalesce(sum(deleted), 0) FROM gc_runs`); events != recorded {
		t.Fatalf("collected events = %d, runs recorded %d deletions", events, recorded)
	}
	if n := countRows(t, db, `SELECT count(*) FROM (SELECT lock_id FROM repository_lock_events WHERE event = 'collected' GROUP BY lock_id HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d locks collected twice", n)
	}
}

// leak acquires the lock on rawURL for the tenant and commits without a
// reference, as a request that dies after acquiring does.
func leak(ctx context.Context, db *database.DB, tenantID, rawURL string) error {
	ls := svc(db).locks
	return ls.Keyed(ctx, func(k *locks.Keying) error {
		c, err := k.Claim(rawURL)
		if err != nil {
			return err
		}
		return db.WithTx(ctx, func(tx database.Tx) error {
			acq, err := ls.AcquireTx(ctx, tx, tenantID, c)
			if err == nil && !acq.Acquired {
				err = fmt.Errorf("claimed by %s", acq.Owner)
			}
			return err
		})
	})
}

// invariantViolations counts, in one REPEATABLE READ snapshot: references
// to missing locks, applications and credentials without exactly one
// reference, references to a lock of another tenant or another URL, and
// unreferenced locks that are not GC candidates.
func invariantViolations(ctx context.Context, db *database.DB) (int, error) {
	var n int
	err := db.Transact(ctx, database.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, func(tx database.Tx) error {
		return tx.GetContext(ctx, &n, `
			SELECT
			  (SELECT count(*) FROM RepositoryLockApplication ra
			    WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockOwner o WHERE o.id = ra.lock_id))
			+ (SELECT count(*) FROM RepositoryLockRepositoryCredential rc
			    WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockOwner o WHERE o.id = rc.lock_id))
			+ (SELECT count(*) FROM applications a
			    WHERE (SELECT count(*) FROM RepositoryLockApplication ra WHERE ra.application_id = a.id) <> 1)
			+ (SELECT count(*) FROM repository_credentials c
			    WHERE (SELECT count(*) FROM RepositoryLockRepositoryCredential rc WHERE rc.repository_credential_id = c.id) <> 1)
			+ (SELECT count(*) FROM applications a
			    JOIN RepositoryLockApplication ra ON ra.application_id = a.id
			    JOIN RepositoryLockOwner o ON o.id = ra.lock_id
			    WHERE o.cluster_user_id <> a.cluster_user_id OR o.git_repository_url <> a.normalized_url)
			+ (SELECT count(*) FROM repository_credentials c
			    JOIN RepositoryLockRepositoryCredential rc ON rc.repository_credential_id = c.id
			    JOIN RepositoryLockOwner o ON o.id = rc.lock_id
			    WHERE o.cluster_user_id <> c.cluster_user_id OR o.git_repository_url <> c.normalized_url)
			+ (`+dbtest.UnflaggedLocksSQL+`)`)
	})
	return n, err
}
