package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/database"
)

// BeginWithPID begins a transaction on db and returns it with the pid of
// its backend, for tests that force an interleaving of two transactions and
// wait for one to block (WaitUntilBlocked). The transaction is rolled back
// when t ends unless the test ended it.
func BeginWithPID(t testing.TB, db *database.DB) (database.Tx, int) {
	t.Helper()
	tx, err := db.BeginTxx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			t.Error(err)
		}
	})
	var pid int
	if err := tx.GetContext(context.Background(), &pid, `SELECT pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// WaitUntilBlocked waits until the backend pid is waiting for a lock. It
// polls pg_stat_activity (Postgres reports lock waits nowhere else); there is
// no timing assumption beyond the 30 s deadline. finished reports whether
// the call expected to block has already returned, which means it did not
// block: the test fails at once.
func WaitUntilBlocked(t testing.TB, db *database.DB, pid int, finished func() bool) {
	t.Helper()
	poll(t, fmt.Sprintf("backend %d blocks on a lock", pid), func() bool {
		if finished() {
			t.Fatalf("backend %d finished without blocking on a lock", pid)
		}
		var waiting bool
		if err := db.GetContext(context.Background(), &waiting,
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid); err != nil {
			t.Fatal(err)
		}
		return waiting
	})
}

// poll waits until cond holds, checking every few milliseconds; the test
// fails if it does not within 30 s (a deadline for hangs, not a timing
// assumption).
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// WaitForBatcher waits until cond holds of the stats of db's Batcher named
// name (database.DB.BatchStats; zero stats while it does not exist yet),
// for tests that hold a batch in flight and queue calls behind it. It
// polls; there is no timing assumption beyond the 30 s deadline.
func WaitForBatcher(t testing.TB, db *database.DB, name string, what string, cond func(database.BatchStats) bool) {
	t.Helper()
	poll(t, "batcher "+name+": "+what, func() bool { return cond(db.BatchStats()[name]) })
}

// WaitUntilBlockedAny waits until some backend of db's database other than
// the holder's (pid) waits for a lock: for a statement run by code that
// does not expose its connection (a Batcher's).
func WaitUntilBlockedAny(t testing.TB, db *database.DB, holder int) {
	t.Helper()
	poll(t, "a backend blocks on a lock", func() bool { return BlockedAny(t, db, holder) })
}

// BlockedAny reports whether some backend of db's database other than the
// holder's (pid) waits for a lock now: for a test that fails when a
// statement waits where it must not.
func BlockedAny(t testing.TB, db *database.DB, holder int) bool {
	t.Helper()
	var blocked bool
	if err := db.GetContext(context.Background(), &blocked, `
		SELECT EXISTS (SELECT FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> $1 AND pid <> pg_backend_pid() AND wait_event_type = 'Lock')`, holder); err != nil {
		t.Fatal(err)
	}
	return blocked
}

// QueueBehindHeldBatch holds a batch of db's Batcher named batcher in
// flight and queues calls behind it, so that they go to Postgres as one
// batch. It inserts the lock on key for tenant in a transaction left
// uncommitted, calls held (which must start, in a goroutine, a call of the
// Batcher that inserts key: its statement blocks on that row), waits until
// it blocks, calls queue (which must start n calls in goroutines and
// return n), waits until all n wait in the Batcher, and rolls the
// transaction back, which lets the held call and then the queue go.
//
// db's Batchers must have a long StallAfter (a pool built with
// dbtest.Pool(database.PoolConfig{BatchStallAfter: time.Hour})): otherwise
// a batch starts beside the held one after database.DefaultBatchStallAfter.
func QueueBehindHeldBatch(t testing.TB, db *database.DB, batcher, tenant, key string, held func(), queue func() int) {
	t.Helper()
	QueueBehindBlockedBatch(t, db, batcher, insertLock(t, tenant, key), held, queue)
}

// insertLock is the blocking write of QueueBehindHeldBatch and InOneBatch:
// an uncommitted lock row on key, which an acquire of key must wait for.
func insertLock(t testing.TB, tenant, key string) func(database.Tx) {
	return func(blocker database.Tx) {
		if _, err := blocker.ExecContext(context.Background(), `
			INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id) VALUES ($1, 2, $2)`,
			key, tenant); err != nil {
			t.Fatal(err)
		}
	}
}

// QueueBehindBlockedBatch is QueueBehindHeldBatch with the blocking write
// of the caller's choice: block runs it in the transaction left
// uncommitted (a row the held call's statement must wait for), which is
// rolled back once the queue waits.
func QueueBehindBlockedBatch(t testing.TB, db *database.DB, batcher string, block func(database.Tx), held func(), queue func() int) {
	t.Helper()
	if d := db.Config().BatchStallAfter; d < time.Minute {
		t.Fatalf("dbtest: QueueBehindHeldBatch: the pool's BatchStallAfter is %v: build it with "+
			"dbtest.Pool(database.PoolConfig{BatchStallAfter: time.Hour}), or a batch starts beside the held one", d)
	}
	blocker, pid := BeginWithPID(t, db)
	block(blocker)
	held()
	WaitUntilBlockedAny(t, db, pid)
	n := queue()
	WaitForBatcher(t, db, batcher, fmt.Sprintf("%d calls wait", n), func(s database.BatchStats) bool { return s.Waiting == n })
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
}

// InOneBatch runs held and then calls (by label), each in its own
// goroutine, with QueueBehindHeldBatch: held must insert key through db's
// Batcher named batcher, and every call must go through it too. It returns
// each label's result, held's as "held".
func InOneBatch[R any](t testing.TB, db *database.DB, batcher, tenant, key string, held func() R, calls map[string]func() R) map[string]R {
	t.Helper()
	return InOneBlockedBatch(t, db, batcher, insertLock(t, tenant, key), held, calls)
}

// InOneBlockedBatch is InOneBatch with the blocking write of the caller's
// choice (QueueBehindBlockedBatch): held's statement must wait for the
// row block writes.
func InOneBlockedBatch[R any](t testing.TB, db *database.DB, batcher string, block func(database.Tx), held func() R, calls map[string]func() R) map[string]R {
	t.Helper()
	type labeled struct {
		label string
		r     R
	}
	results := make(chan labeled, len(calls)+1)
	start := func(label string, f func() R) { go func() { results <- labeled{label, f()} }() }
	QueueBehindBlockedBatch(t, db, batcher, block,
		func() { start("held", held) },
		func() int {
			for label, f := range calls {
				start(label, f)
			}
			return len(calls)
		})
	got := make(map[string]R, len(calls)+1)
	for range len(calls) + 1 {
		r := <-results
		got[r.label] = r.r
	}
	return got
}
