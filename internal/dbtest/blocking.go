package dbtest

import (
	"context"
	"database/sql"
	"errors"
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
	for i := 0; ; i++ {
		if finished() {
			t.Fatalf("backend %d finished without blocking on a lock", pid)
		}
		var waiting bool
		if err := db.GetContext(context.Background(), &waiting,
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if i > 6000 {
			t.Fatalf("backend %d never blocked on a lock", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitForBatcher waits until cond holds of the stats of db's Batcher named
// name (database.DB.BatchStats; zero stats while it does not exist yet),
// for tests that hold a batch in flight and queue calls behind it. It
// polls; there is no timing assumption beyond the 30 s deadline.
func WaitForBatcher(t testing.TB, db *database.DB, name string, what string, cond func(database.BatchStats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(db.BatchStats()[name]) {
		if time.Now().After(deadline) {
			t.Fatalf("batcher %s: timed out waiting until %s (stats %+v)", name, what, db.BatchStats()[name])
		}
		time.Sleep(time.Millisecond)
	}
}

// WaitUntilBlockedAny waits until some backend of db's database other than
// the holder's (pid) waits for a lock: for a statement run by code that
// does not expose its connection (a Batcher's).
func WaitUntilBlockedAny(t testing.TB, db *database.DB, holder int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.GetContext(context.Background(), &n, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> $1 AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`, holder); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no backend blocked on a lock within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
