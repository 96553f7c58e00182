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
