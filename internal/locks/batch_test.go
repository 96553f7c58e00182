package locks_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
)

const insertBatcher = "locks.insertLocks"

type batchedAcquire struct {
	acq locks.Acquisition
	err error
}

// acquiresInOneBatch runs acquires (label -> tenant, key) on the pool
// queued behind a held acquire of blockerKey by tenant (dbtest.InOneBatch),
// so that they go as one batch unless a failed statement makes the
// Batcher re-run them alone. It returns each label's result.
func acquiresInOneBatch(t *testing.T, db *database.DB, ls *locks.Service, tenant, blockerKey string, acquires map[string][2]string) map[string]batchedAcquire {
	t.Helper()
	acquire := func(tenant, key string) func() batchedAcquire {
		return func() batchedAcquire {
			acq, err := ls.Acquire(context.Background(), tenant, key)
			return batchedAcquire{acq, err}
		}
	}
	calls := map[string]func() batchedAcquire{}
	for label, a := range acquires {
		calls[label] = acquire(a[0], a[1])
	}
	got := dbtest.InOneBatch(t, db, insertBatcher, tenant, blockerKey, acquire(tenant, blockerKey), calls)
	if r := got["held"]; r.err != nil || !r.acq.Acquired {
		t.Errorf("the held acquire: %+v %v", r.acq, r.err)
	}
	return got
}

// TestAcquiresOnThePoolShareABatch: acquires that arrive while an acquire
// runs go to Postgres together (one statement, database.Batcher), and each
// still gets exactly what it would get alone: its own lock, or a denial
// naming the owner when another tenant in the same queue asked for the URL
// too.
func TestAcquiresOnThePoolShareABatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{BatchStallAfter: time.Hour})) // the held batch holds up the queue
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")

	const free = 20
	acquires := map[string][2]string{
		"contested-alice": {alice.ID, "github.com/acme/contested"},
		"contested-bob":   {bob.ID, "github.com/acme/contested"},
	}
	for i := range free {
		acquires[fmt.Sprint("free-", i)] = [2]string{alice.ID, fmt.Sprintf("github.com/acme/r%d", i)}
	}
	got := acquiresInOneBatch(t, db, ls, bob.ID, "github.com/acme/blocker", acquires)
	for i := range free {
		if r := got[fmt.Sprint("free-", i)]; r.err != nil || !r.acq.Acquired || r.acq.LockID == "" {
			t.Errorf("free-%d: %+v %v", i, r.acq, r.err)
		}
	}
	a, b := got["contested-alice"], got["contested-bob"]
	switch {
	case a.err != nil || b.err != nil:
		t.Errorf("contested: %v / %v", a.err, b.err)
	case a.acq.Acquired == b.acq.Acquired:
		t.Errorf("contested: alice %+v, bob %+v: want exactly one owner", a.acq, b.acq)
	case a.acq.Acquired && b.acq.Owner != "alice", b.acq.Acquired && a.acq.Owner != "bob":
		t.Errorf("contested: the denied tenant was not told the owner: %+v / %+v", a.acq, b.acq)
	}

	// The database holds exactly the locks acquired, each with the owner
	// its acquirer was told and one "acquired" event.
	var rows []struct {
		ID     string `db:"id"`
		URL    string `db:"git_repository_url"`
		Tenant string `db:"cluster_user_id"`
		Events int    `db:"events"`
	}
	if err := db.SelectContext(ctx, &rows, `
		SELECT o.id, o.git_repository_url, o.cluster_user_id,
			(SELECT count(*) FROM repository_lock_events e WHERE e.lock_id = o.id AND e.event = 'acquired') AS events
		FROM RepositoryLockOwner o`); err != nil {
		t.Fatal(err)
	}
	if len(rows) != free+2 {
		t.Errorf("%d locks, want %d", len(rows), free+2)
	}
	owner := map[string]string{} // lock id -> tenant told it acquired it
	for label, r := range got {
		if r.acq.Acquired {
			tenant := bob.ID
			if label != "held" {
				tenant = acquires[label][0]
			}
			owner[r.acq.LockID] = tenant
		}
	}
	for _, r := range rows {
		if owner[r.ID] != r.Tenant || r.Events != 1 {
			t.Errorf("lock %s: owner %s with %d acquired events; its acquirer was %q", r.URL, r.Tenant, r.Events, owner[r.ID])
		}
	}
	st := db.BatchStats()[insertBatcher]
	if st.Calls != int64(len(acquires)+1) || st.Batches > 3 {
		t.Errorf("stats %+v: want %d calls in at most 3 batches (the held one, the queue, the contested URL's second)", st, len(acquires)+1)
	}
}

// TestAcquiresBatchFailureIsolated: an acquire by a tenant that does not
// exist fails the statement of its whole batch (a foreign key): the Batcher
// re-runs each acquire alone, so that only that one fails (not found).
func TestAcquiresBatchFailureIsolated(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{BatchStallAfter: time.Hour})) // the held batch holds up the queue
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	acquires := map[string][2]string{"ghost": {uuid.NewString(), "github.com/acme/ghost"}}
	for i := range 8 {
		acquires[fmt.Sprint("free-", i)] = [2]string{alice.ID, fmt.Sprintf("github.com/acme/r%d", i)}
	}
	got := acquiresInOneBatch(t, db, ls, alice.ID, "github.com/acme/blocker", acquires)
	for label, r := range got {
		switch {
		case label == "ghost" && !repolock.IsCode(r.err, repolock.ENotFound):
			t.Errorf("ghost: %+v %v, want not found", r.acq, r.err)
		case label != "ghost" && (r.err != nil || !r.acq.Acquired):
			t.Errorf("%s: %+v %v", label, r.acq, r.err)
		}
	}
}

// TestStalledAcquireDoesNotHoldUpOthers: an acquire whose batch waits for
// a row another transaction holds (an uncommitted lock on its URL) holds up
// the acquires queued behind it only briefly (database.Batcher's
// StallAfter): they complete while it still waits.
func TestStalledAcquireDoesNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	blocker, pid := dbtest.BeginWithPID(t, db)
	if _, err := blocker.ExecContext(ctx, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		VALUES ('github.com/acme/blocker', 2, $1)`, alice.ID); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() {
		_, err := ls.Acquire(ctx, alice.ID, "github.com/acme/blocker")
		stuck <- err
	}()
	dbtest.WaitUntilBlockedAny(t, db, pid)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			acq, err := ls.Acquire(ctx, alice.ID, fmt.Sprintf("github.com/acme/r%d", i))
			if err == nil && !acq.Acquired {
				err = fmt.Errorf("r%d not acquired", i)
			}
			errs <- err
		}()
	}
	for range 8 {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case err := <-stuck:
			t.Fatalf("the stuck acquire returned (%v) before the others", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the acquires queued behind a stuck batch did not complete within 30 s")
		}
	}
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-stuck; err != nil {
		t.Fatalf("the stuck acquire, once released: %v", err)
	}
}

// TestBatchStatementsDoNotDeadlock: two batched inserts of the same keys in
// opposite orders, at the same time, each in its own transaction, never
// deadlock: the statement inserts in key order, so the second waits for the
// first's keys in that order. (Inserted in the order given, the two would
// each hold a key the other wants.)
func TestBatchStatementsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	const rounds, n = 10, 400
	for r := range rounds {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("github.com/acme/round-%d-%03d", r, i)
		}
		reversed := slices.Clone(keys)
		slices.Reverse(reversed)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		created := make([]int, 2)
		start := make(chan struct{})
		for g, ks := range [][]string{keys, reversed} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ids, err := locks.InsertLocks(ctx, db, alice.ID, "2", ks)
				errs[g] = err
				for _, id := range ids {
					if id != "" {
						created[g]++
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		for g, err := range errs {
			if err != nil {
				t.Fatalf("round %d, statement %d: %v", r, g, err)
			}
		}
		if created[0]+created[1] != n {
			t.Fatalf("round %d: created %d + %d locks, want %d in all", r, created[0], created[1], n)
		}
	}
}
