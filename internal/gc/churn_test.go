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
	"github.com/repolock/repolock/internal/normalize"
)

// GC runs back to back, with no minimum age and tiny batches, while 20
// goroutines create and delete applications on a small set of URLs, and
// also leave locks behind the way a request that dies between acquiring a
// lock and writing its reference would (the orphans GC exists for, which the
// next creates on the same URL race to re-acquire while GC deletes them).
//
// No request may fail, no reference may ever point at a missing lock, every
// application keeps its one reference to its tenant's lock on its URL, and
// after a final quiet GC no orphan remains.
func TestGCDuringApplicationChurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)

	const (
		tenants       = 4
		urlsPerTenant = 8
		workers       = 20
		opsPerWorker  = 60
	)
	tenantIDs := make([]string, tenants)
	for i := range tenantIDs {
		tenantIDs[i] = dbtest.NewTenant(t, db, fmt.Sprintf("tenant-%d", i)).ID
	}
	rawURL := func(tenant, n int) string {
		return fmt.Sprintf("https://git.example.com/org-%d/repo-%d.git", tenant, n)
	}

	// GC loop.
	c := newCollector(db, gc.Config{})
	var (
		stopGC       = make(chan struct{})
		gcDone       = make(chan struct{})
		gcRuns       atomic.Int64
		churnDeleted atomic.Int64
		gcErr        error
	)
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stopGC:
				return
			default:
			}
			run, err := c.Collect(ctx, opts(2, 0))
			if err != nil {
				gcErr = err
				return
			}
			gcRuns.Add(1)
			churnDeleted.Add(run.Deleted)
		}
	}()

	// Invariant checker: in one consistent snapshot, no reference points at
	// a missing lock and every application references its tenant's lock on
	// its own URL.
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
		ops    [3]atomic.Int64 // create, delete, leak
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := w % tenants
			tenantID := tenantIDs[tenant]
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			var mine []string
			fail := func(op string, err error) {
				failed.Add(1)
				t.Errorf("worker %d: %s: %v", w, op, err)
			}
			for i := range opsPerWorker {
				u := rawURL(tenant, rng.IntN(urlsPerTenant))
				// Each worker keeps at most two applications, so URLs keep
				// losing their last reference and leaked locks stay orphans
				// long enough for GC to race the creates that re-acquire them.
				switch p := rng.IntN(100); {
				case len(mine) < 2 && (p < 40 || len(mine) == 0):
					app, err := apps.CreateApplication(ctx, db, tenantID, apps.NewApplication{
						Name: fmt.Sprintf("w%d-app-%d", w, i), RepoURL: u,
					})
					if err != nil {
						fail("create application", err)
						continue
					}
					mine = append(mine, app.ID)
					ops[0].Add(1)
				case p < 70 || len(mine) >= 2:
					k := rng.IntN(len(mine))
					if err := apps.DeleteApplication(ctx, db, tenantID, mine[k]); err != nil {
						fail("delete application", err)
						continue
					}
					mine = append(mine[:k], mine[k+1:]...)
					ops[1].Add(1)
				default:
					// A request that dies after acquiring: the lock is
					// committed without a reference.
					key, err := normalize.RepoURL(u)
					if err != nil {
						fail("normalize", err)
						continue
					}
					err = db.WithTx(ctx, func(tx database.Tx) error {
						acq, err := locks.AcquireRepositoryCredentialURL(ctx, tx, tenantID, string(key))
						ok, owner := acq.Acquired, acq.Owner
						if err == nil && !ok {
							err = fmt.Errorf("claimed by %s", owner)
						}
						return err
					})
					if err != nil {
						fail("acquire without reference", err)
						continue
					}
					ops[2].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stopGC)
	<-gcDone
	close(stopCheck)
	<-checkDone
	if gcErr != nil {
		t.Fatalf("a GC run failed during the churn: %v", gcErr)
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed", n)
	}
	if n := violations.Load(); n != 0 {
		t.Fatalf("%d invariant violations seen in %d checks", n, checks.Load())
	}
	t.Logf("ops: %d creates, %d deletes, %d leaked locks; %d GC runs collected %d locks during the churn; %d invariant checks",
		ops[0].Load(), ops[1].Load(), ops[2].Load(), gcRuns.Load(), churnDeleted.Load(), checks.Load())
	if gcRuns.Load() < 2 || churnDeleted.Load() == 0 {
		t.Fatalf("GC ran %d times and collected %d locks during the churn: the race was not exercised",
			gcRuns.Load(), churnDeleted.Load())
	}

	// A final quiet GC leaves no orphan and breaks nothing.
	if _, err := c.Collect(ctx, opts(1000, 0)); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM report_orphan_locks`); n != 0 {
		t.Fatalf("%d orphan locks after the final GC", n)
	}
	if n, err := invariantViolations(ctx, db); err != nil || n != 0 {
		t.Fatalf("after the final GC: %d violations, %v", n, err)
	}
	left := countRows(t, db, `SELECT count(*) FROM applications`)
	if want := int(ops[0].Load() - ops[1].Load()); left != want {
		t.Fatalf("%d applications left, want %d (creates - deletes)", left, want)
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

// invariantViolations counts, in one REPEATABLE READ snapshot: references
// to missing locks, applications without exactly one reference, and
// references to a lock of another tenant or another URL.
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
			+ (SELECT count(*) FROM applications a
			    JOIN RepositoryLockApplication ra ON ra.application_id = a.id
			    JOIN RepositoryLockOwner o ON o.id = ra.lock_id
			    WHERE o.cluster_user_id <> a.cluster_user_id OR o.git_repository_url <> a.normalized_url)`)
	})
	return n, err
}
