package database_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// TestTransactRetriesRealSerializationFailures runs concurrent SERIALIZABLE
// read-modify-write transactions on one row. Postgres aborts most of them with
// 40001; Transact must retry them all so that no increment is lost.
func TestTransactRetriesRealSerializationFailures(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{Retry: database.RetryPolicy{MaxAttempts: 200, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}))
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL); INSERT INTO counter VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 8, 10
	var attempts atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				errs <- db.Transact(ctx, database.TxOptions{Isolation: sql.LevelSerializable}, func(tx database.Tx) error {
					attempts.Add(1)
					var n int
					if err := tx.GetContext(ctx, &n, `SELECT n FROM counter WHERE id = 1`); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, `UPDATE counter SET n = $1 WHERE id = 1`, n+1)
					return err
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("transaction failed: %v", err)
		}
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT n FROM counter WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if n != workers*perWorker {
		t.Fatalf("counter = %d, want %d (lost updates)", n, workers*perWorker)
	}
	if attempts.Load() <= workers*perWorker {
		t.Logf("no conflicts happened this run (%d attempts); the retry path was not exercised", attempts.Load())
	}
}

// TestTransactInjectedFaults injects retryable and non-retryable errors.
func TestTransactInjectedFaults(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{Retry: database.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Microsecond, MaxDelay: time.Millisecond}}))
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (v int)`); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int
		if err := db.GetContext(ctx, &n, `SELECT count(*) FROM t`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insertThenFail := func(failures int, fault error) (int, error) {
		calls := 0
		err := db.WithTx(ctx, func(tx database.Tx) error {
			calls++
			if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err != nil {
				return err
			}
			if calls <= failures {
				return fault
			}
			return nil
		})
		return calls, err
	}

	tests := []struct {
		name      string
		failures  int
		fault     error
		wantCalls int
		wantCode  repolock.Code // "" = success
		wantRows  int
	}{
		{"serialization failure is retried", 2, &pq.Error{Code: database.CodeSerializationFailure}, 3, "", 1},
		{"deadlock is retried", 1, &pq.Error{Code: database.CodeDeadlockDetected}, 2, "", 1},
		{"retries stop at MaxAttempts", 10, &pq.Error{Code: database.CodeSerializationFailure}, 4, repolock.EConflict, 0},
		{"unique violation is not retried", 10, &pq.Error{Code: database.CodeUniqueViolation}, 1, repolock.EAlreadyExists, 0},
		{"domain error passes through, rolled back", 10, repolock.Errorf(repolock.EInvalid, "bad"), 1, repolock.EInvalid, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.ExecContext(ctx, `DELETE FROM t`); err != nil {
				t.Fatal(err)
			}
			calls, err := insertThenFail(tc.failures, tc.fault)
			if calls != tc.wantCalls {
				t.Errorf("fn ran %d times, want %d", calls, tc.wantCalls)
			}
			if got := repolock.ErrorCode(err); got != tc.wantCode {
				t.Errorf("error code %q (%v), want %q", got, err, tc.wantCode)
			}
			if n := count(); n != tc.wantRows {
				t.Errorf("%d rows committed, want %d", n, tc.wantRows)
			}
		})
	}
}

func TestTransactRollsBackOnPanic(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (v int)`); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_ = db.WithTx(ctx, func(tx database.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	var n int
	if err := db.GetContext(ctx, &n, `SELECT count(*) FROM t`); err != nil || n != 0 {
		t.Fatalf("rows after panic: %d %v", n, err)
	}
}

func TestTransactStopsRetryingWhenContextIsDone(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{Retry: database.RetryPolicy{MaxAttempts: 1000, BaseDelay: 50 * time.Millisecond, MaxDelay: 50 * time.Millisecond}}))
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := db.WithTx(ctx, func(tx database.Tx) error {
		calls++
		if calls == 3 {
			cancel()
		}
		return &pq.Error{Code: database.CodeSerializationFailure}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if calls != 3 {
		t.Fatalf("fn ran %d times after cancellation, want 3", calls)
	}
}

// TestTransactContextEndedBeforeCommit: ctx ends inside fn and database/sql
// rolls the transaction back on its own (Tx.awaitDone), so COMMIT finds it
// done (sql.ErrTxDone). That is ctx's error, not an internal one (the HTTP
// API answered 500 to a request that timed out there), and nothing is
// applied.
func TestTransactContextEndedBeforeCommit(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	bg := context.Background()
	if _, err := db.ExecContext(bg, `CREATE TABLE t (v int)`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	err := db.WithTx(ctx, func(tx database.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err != nil {
			return err
		}
		cancel()
		// Wait until database/sql has rolled the transaction back: then
		// every use of tx answers sql.ErrTxDone.
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := tx.ExecContext(bg, `SELECT 1`)
			if errors.Is(err, sql.ErrTxDone) {
				return nil // COMMIT now meets a finished transaction
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the transaction was not rolled back after cancel: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var n int
	if err := db.GetContext(bg, &n, `SELECT count(*) FROM t`); err != nil || n != 0 {
		t.Fatalf("rows after the rollback: %d %v", n, err)
	}
}

// TestMapErrorRealPostgresErrors provokes each constraint class on a real
// server and checks the domain code.
func TestMapErrorRealPostgresErrors(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE parent (id int PRIMARY KEY);
		CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES parent (id),
			v int CHECK (v >= 0), s varchar(3));
		INSERT INTO parent VALUES (1);
		INSERT INTO child VALUES (1, 1, 0, 'a');`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		sql  string
		want repolock.Code
	}{
		{"23505 unique", `INSERT INTO parent VALUES (1) RETURNING 1`, repolock.EAlreadyExists},
		{"23503 foreign key on insert", `INSERT INTO child VALUES (2, 99, 0, 'a') RETURNING 1`, repolock.EConflict},
		{"23503 foreign key on delete", `DELETE FROM parent WHERE id = 1 RETURNING 1`, repolock.EConflict},
		{"23514 check", `INSERT INTO child VALUES (3, 1, -1, 'a') RETURNING 1`, repolock.EInvalid},
		{"23502 not null", `INSERT INTO child VALUES (4, NULL, 0, 'a') RETURNING 1`, repolock.EInvalid},
		{"22001 too long", `INSERT INTO child VALUES (5, 1, 0, 'abcd') RETURNING 1`, repolock.EInvalid},
		{"22P02 invalid text", `SELECT 'x'::int`, repolock.EInvalid},
		{"no rows", `SELECT id FROM parent WHERE id = 42`, repolock.ENotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var id int
			err := db.QueryRowContext(ctx, tc.sql).Scan(&id)
			mapped := database.MapError(err)
			if got := repolock.ErrorCode(mapped); got != tc.want {
				t.Fatalf("code %q (%v), want %q", got, err, tc.want)
			}
			if msg := repolock.ErrorMessage(mapped); msg == "" || containsAny(msg, "INSERT", "SELECT", "pq:") {
				t.Fatalf("message leaks SQL or driver text: %q", msg)
			}
		})
	}
	for _, code := range []string{"53300", "57P01", "57P03", "08006"} {
		if got := repolock.ErrorCode(database.MapError(&pq.Error{Code: pqerror.Code(code)})); got != repolock.EUnavailable {
			t.Errorf("%s maps to %q, want unavailable", code, got)
		}
	}
	if database.MapError(nil) != nil {
		t.Fatal("MapError(nil) != nil")
	}
	if err := database.MapError(context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancellation must stay recognisable: %v", err)
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
