package database_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// TestMapErrorConnectionFailures: every way of failing to reach or keep the
// database maps to unavailable; other errors keep their meaning.
func TestMapErrorConnectionFailures(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	read := &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}
	tests := []struct {
		name    string
		err     error
		code    repolock.Code
		message string
	}{
		{"dial refused", fmt.Errorf("begin: %w", dial), repolock.EUnavailable, "the database is unavailable; try again"},
		{"read reset", read, repolock.EUnavailable, "the database is unavailable; try again"},
		{"bare ECONNREFUSED", syscall.ECONNREFUSED, repolock.EUnavailable, "the database is unavailable; try again"},
		{"EOF", fmt.Errorf("query: %w", io.EOF), repolock.EUnavailable, "the database is unavailable; try again"},
		{"unexpected EOF", io.ErrUnexpectedEOF, repolock.EUnavailable, "the database is unavailable; try again"},
		{"bad conn", driver.ErrBadConn, repolock.EUnavailable, "the database is unavailable; try again"},
		{"08006", &pq.Error{Code: "08006"}, repolock.EUnavailable, "the database is unavailable; try again"},
		{"08001", &pq.Error{Code: "08001"}, repolock.EUnavailable, "the database is unavailable; try again"},
		{"57P01 admin shutdown", &pq.Error{Code: "57P01"}, repolock.EUnavailable, "the database is unavailable; try again"},
		{"57P02 crash shutdown", &pq.Error{Code: "57P02"}, repolock.EUnavailable, "the database is unavailable; try again"},
		{"57P03 cannot connect now", &pq.Error{Code: "57P03"}, repolock.EUnavailable, "the database is unavailable; try again"},
		{"53300 too many connections", &pq.Error{Code: "53300"}, repolock.EUnavailable, "the database is unavailable; try again"},
		{"25006 read-only transaction (a standby being promoted)", fmt.Errorf("select: %w", &pq.Error{Code: "25006"}), repolock.EUnavailable, "the database is unavailable; try again"},
		{"0A000 BEGIN READ WRITE on a standby", fmt.Errorf("begin: %w", &pq.Error{Code: "0A000", Message: "cannot set transaction read-write mode during recovery"}),
			repolock.EUnavailable, "the database is unavailable; try again"},
		{"0A000 otherwise stays internal", &pq.Error{Code: "0A000", Message: "unsupported Unicode escape sequence"}, repolock.EInternal, "internal error"},
		{"commit lost", fmt.Errorf("commit: %w: %w", database.ErrCommitOutcomeUnknown, read), repolock.EUnavailable,
			"the database connection was lost while committing: the outcome is unknown; re-read before retrying"},
		{"lib/pq: begin on a connection in the wrong state", fmt.Errorf("begin: %w", errors.New("pq: unexpected transaction status idle in transaction")),
			repolock.EUnavailable, "the database is unavailable; try again"},
		{"lib/pq: begin's command tag", errors.New("unexpected command tag SET"), repolock.EUnavailable, "the database is unavailable; try again"},
		{"lib/pq: a message out of order", errors.New(`pq: unexpected message 'E' in simple query execution`), repolock.EUnavailable, "the database is unavailable; try again"},
		{"unique violation stays", &pq.Error{Code: "23505"}, repolock.EAlreadyExists, "already exists"},
		{"query canceled stays", &pq.Error{Code: "57014"}, repolock.ETimeout, "the operation timed out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !database.IsConnectionError(tc.err) != (tc.code != repolock.EUnavailable) {
				t.Errorf("IsConnectionError = %v", database.IsConnectionError(tc.err))
			}
			got := database.MapError(tc.err)
			if c := repolock.ErrorCode(got); c != tc.code {
				t.Fatalf("code = %s, want %s (%v)", c, tc.code, got)
			}
			if m := repolock.ErrorMessage(got); m != tc.message {
				t.Errorf("message = %q, want %q", m, tc.message)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("the cause is not kept")
			}
		})
	}
	// UnknownOutcome: a lost connection after an autocommit write may
	// have been sent; failing to connect sent nothing.
	for _, tc := range []struct {
		err     error
		unknown bool
	}{
		{read, true},
		{driver.ErrBadConn, true},
		{io.EOF, true},
		{dial, false},
		{syscall.ECONNREFUSED, false},
		{&pq.Error{Code: "53300"}, false},
		{&pq.Error{Code: "57P03"}, false},
		{&pq.Error{Code: "25006"}, false},
		{&pq.Error{Code: "0A000", Message: "cannot set transaction read-write mode during recovery"}, false},
		{&pq.Error{Code: "23505"}, false},
	} {
		got := database.UnknownOutcome(tc.err)
		if errors.Is(got, database.ErrCommitOutcomeUnknown) != tc.unknown || !errors.Is(got, tc.err) {
			t.Errorf("UnknownOutcome(%v) = %v, want unknown=%v", tc.err, got, tc.unknown)
		}
	}
	// An error that is not a database's stays what it is.
	plain := errors.New("something else")
	if got := database.MapError(plain); got != plain || database.IsConnectionError(plain) {
		t.Errorf("MapError(plain) = %v", got)
	}
}

// TestOpenRefusedIsUnavailable: a database that refuses connections is an
// connection error (unavailable once mapped) from Open, and New does not connect at all.
func TestOpenRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	p, url := dbtest.NewProxy(t, dbtest.AdminURL())
	p.Refuse()
	if _, err := database.Open(t.Context(), url, database.PoolConfig{}); !database.IsConnectionError(err) || !repolock.IsCode(database.MapError(err), repolock.EUnavailable) {
		t.Fatalf("Open through a refusing proxy: %v, want a connection error", err)
	}
	db, err := database.New(url, database.PoolConfig{MaxOpenConns: 3})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer db.Close()
	if c := db.Config(); c.MaxOpenConns != 3 || c.MaxIdleConns != 3 {
		t.Fatalf("pool config %+v: idle must default to open", c)
	}
	if err := db.Ping(t.Context(), 5*time.Second); err == nil {
		t.Fatal("ping through a refusing proxy succeeded")
	}
	p.Restore()
	if err := db.Ping(t.Context(), 5*time.Second); err != nil {
		t.Fatalf("ping after restore: %v", err)
	}
}

// TestTransactAfterConnectionsReset: every pooled connection is reset
// (RST), as after a database restart or a network cut; the first
// transaction afterwards succeeds (the broken idle connections are
// discarded, not handed out one by one), and one that is cut while its
// COMMIT is in flight says the outcome is unknown, though it committed.
func TestTransactAfterConnectionsReset(t *testing.T) {
	t.Parallel()
	_, direct := dbtest.NewWithURL(t)
	p, url := dbtest.NewProxy(t, direct)
	const size = 8
	db, err := database.Open(t.Context(), url, database.PoolConfig{MaxOpenConns: size})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	fill := func() {
		// Hold size connections at once so the pool keeps size idle
		// (fresh ones: a connection broken in the last round may still
		// be idle).
		db.DiscardIdle()
		conns := make([]interface{ Close() error }, 0, size)
		for range size {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			_ = c.Close()
		}
		if idle := db.Stats().Idle; idle != size {
			t.Fatalf("idle = %d, want %d", idle, size)
		}
	}
	for i := range 3 {
		fill()
		p.Reset()
		before := db.Discards()
		err := db.WithTx(ctx, func(tx database.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO t VALUES ($1)`, i)
			return err
		})
		if err != nil {
			t.Fatalf("round %d: first transaction after the reset: %v", i, err)
		}
		t.Logf("round %d: discards %d", i, db.Discards()-before)
	}

	// A connection lost inside the transaction, before COMMIT: nothing
	// was applied, so Transact runs fn again on a fresh connection.
	calls := 0
	before := db.Discards()
	err = db.WithTx(ctx, func(tx database.Tx) error {
		calls++
		if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (50)`); err != nil {
			return err
		}
		if calls == 1 {
			p.Reset()
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (51)`)
		return err
	})
	if err != nil || calls != 2 || db.Discards() == before {
		t.Fatalf("reset inside the transaction: err %v, calls %d, discards %d; want nil, 2, >0", err, calls, db.Discards()-before)
	}

	cut := p.CutNextCommit()
	err = db.WithTx(ctx, func(tx database.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (100)`)
		return err
	})
	<-cut
	if !repolock.IsCode(err, repolock.EUnavailable) || !strings.Contains(repolock.ErrorMessage(err), "the outcome is unknown; re-read before retrying") {
		t.Fatalf("commit cut: %v (%q), want unavailable, outcome unknown", err, repolock.ErrorMessage(err))
	}
	if d := repolock.ErrorDetails(err); d["outcome"] != "unknown" {
		t.Fatalf("commit cut: details %v, want outcome unknown", d)
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT count(*) FROM t WHERE id = 100`); err != nil || n != 1 {
		t.Fatalf("the cut commit was applied: count %d, %v (want 1: the server answered before the cut)", n, err)
	}
	if err := db.GetContext(ctx, &n, `SELECT count(*) FROM t`); err != nil || n != 6 {
		t.Fatalf("rows = %d, %v; want 6", n, err)
	}
}

// TestQueryConnectionErrorDiscardsIdle: a statement run through the pool
// (no transaction, no HTTP server) whose connection is cut fails with a
// connection error, and the pool itself closes its idle connections then
// (after a restart or a network cut they are broken too). Only the
// statement's own connection is cut here, so without the discard the
// others would still be idle.
func TestQueryConnectionErrorDiscardsIdle(t *testing.T) {
	t.Parallel()
	_, direct := dbtest.NewWithURL(t)
	p, url := dbtest.NewProxy(t, direct)
	const size = 4
	db, err := database.Open(t.Context(), url, database.PoolConfig{MaxOpenConns: size})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	// fill leaves size fresh idle connections.
	fill := func() {
		db.DiscardIdle()
		conns := make([]interface{ Close() error }, 0, size)
		for range size {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			_ = c.Close()
		}
		if idle := db.Stats().Idle; idle != size {
			t.Fatalf("idle = %d, want %d", idle, size)
		}
	}
	for _, tc := range []struct {
		name string
		run  func(i int) error
	}{
		{"ExecContext", func(i int) error {
			_, err := db.ExecContext(ctx, `INSERT INTO t VALUES ($1)`, i)
			return err
		}},
		{"GetContext", func(i int) error {
			var n int
			return db.GetContext(ctx, &n, `SELECT count(*) FROM t WHERE id <> $1`, i)
		}},
		{"SelectContext", func(i int) error {
			var ids []int
			return db.SelectContext(ctx, &ids, `SELECT id FROM t WHERE id <> $1`, i)
		}},
		{"QueryRowxContext", func(i int) error {
			var n int
			return db.QueryRowxContext(ctx, `SELECT count(*) FROM t WHERE id <> $1`, i).Scan(&n)
		}},
		{"GetPrepared", func(i int) error {
			var n int
			return db.GetPrepared(ctx, &n, `SELECT count(*) FROM t WHERE id <> $1`, i)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fill()
			before := db.Stats().MaxIdleClosed
			cut := p.CutNextStatement()
			err := tc.run(1000)
			<-cut
			if !database.IsConnectionError(err) {
				t.Fatalf("statement on a cut connection: %v, want a connection error", err)
			}
			st := db.Stats()
			if st.Idle != 0 || st.MaxIdleClosed-before != size-1 {
				t.Fatalf("after the connection error: %d idle, %d closed as idle; want 0 idle, %d closed (the other connections discarded)",
					st.Idle, st.MaxIdleClosed-before, size-1)
			}
			if err := tc.run(2000); err != nil && !repolock.IsCode(database.MapError(err), repolock.EAlreadyExists) {
				t.Fatalf("the next statement: %v", err)
			}
		})
	}
}
