package gc_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/locks"
)

// TestHandoverAcceptedWhileGCRuns: old, unreferenced locks offered for
// handover (so pinned) are accepted while the GC runs in a loop. The GC
// never collects a pinned lock, an accepted lock restarts its grace period,
// so no lock ever disappears (an observer counts them all the time), every
// lock ends owned by the recipient, and every unreferenced lock stays a GC
// candidate.
func TestHandoverAcceptedWhileGCRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := svc(db).locks
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	const n = 60
	ids := make([]string, n)
	offers := make([]string, n)
	for i := range ids {
		ids[i] = dbtest.NewLock(t, db, alice.ID, fmt.Sprintf("github.com/handover-gc/repo-%d", i), time.Hour)
		h, err := ls.OfferHandover(ctx, locks.OfferRequest{TenantID: alice.ID, LockID: ids[i], To: "bob", ExpiresIn: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		offers[i] = h.ID
	}

	c := newCollector(db, gc.Config{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	var runs, deleted atomic.Int64
	wg.Add(2)
	go func() { // GC loop: every run sees the old locks as candidates.
		defer wg.Done()
		for !stop.Load() {
			run, err := c.Collect(ctx, opts(7, time.Minute))
			if err != nil {
				errs <- err
				return
			}
			if run.Status != gc.StatusSkipped {
				runs.Add(1)
				deleted.Add(run.Deleted)
			}
		}
	}()
	go func() { // observer: no lock ever goes missing.
		defer wg.Done()
		for !stop.Load() {
			var count int
			if err := db.GetContext(ctx, &count, `SELECT count(*) FROM RepositoryLockOwner`); err != nil {
				errs <- err
				return
			}
			if count != n {
				errs <- fmt.Errorf("%d locks, want %d: the GC collected an offered or accepted lock", count, n)
				return
			}
		}
	}()
	for i := range offers {
		if _, err := ls.AcceptHandover(ctx, bob.ID, "bob", offers[i]); err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
	}
	// Let the GC run over the accepted locks too.
	for start := runs.Load(); runs.Load() < start+3 && len(errs) == 0; {
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d GC runs during the handovers", runs.Load())
	if deleted.Load() != 0 {
		t.Errorf("GC deleted %d locks", deleted.Load())
	}
	var bobs, unflagged int
	if err := db.GetContext(ctx, &bobs, `SELECT count(*) FROM RepositoryLockOwner WHERE cluster_user_id = $1`, bob.ID); err != nil || bobs != n {
		t.Errorf("bob owns %d locks (%v), want %d", bobs, err, n)
	}
	if err := db.GetContext(ctx, &unflagged, dbtest.UnflaggedLocksSQL); err != nil || unflagged != 0 {
		t.Errorf("%d unreferenced locks without the candidate flag (%v)", unflagged, err)
	}
}

// TestGCExpiresHandovers: an expired offer no longer pins its lock; the GC
// deletes it (handover_expired) and collects the lock in the same run,
// while an open offer's lock stays.
func TestGCExpiresHandovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := svc(db).locks
	alice := dbtest.NewTenant(t, db, "alice")
	dbtest.NewTenant(t, db, "bob")
	expired := dbtest.NewLock(t, db, alice.ID, "github.com/expire/old", time.Hour)
	open := dbtest.NewLock(t, db, alice.ID, "github.com/expire/open", time.Hour)
	for _, id := range []string{expired, open} {
		if _, err := ls.OfferHandover(ctx, locks.OfferRequest{TenantID: alice.ID, LockID: id, To: "bob", ExpiresIn: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, db, `UPDATE lock_handovers SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour' WHERE lock_id = $1`, expired)
	run, err := newCollector(db, gc.Config{}).Collect(ctx, opts(10, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if run.Deleted != 1 {
		t.Errorf("deleted %d, want 1 (the expired offer's lock)", run.Deleted)
	}
	var left []string
	if err := db.SelectContext(ctx, &left, `SELECT id::text FROM RepositoryLockOwner`); err != nil || len(left) != 1 || left[0] != open {
		t.Errorf("locks left %v (%v), want only the open offer's", left, err)
	}
	var evs int
	if err := db.GetContext(ctx, &evs, `SELECT count(*) FROM repository_lock_events WHERE event = 'handover_expired' AND lock_id = $1`, expired); err != nil || evs != 1 {
		t.Errorf("handover_expired events: %d %v", evs, err)
	}
}
