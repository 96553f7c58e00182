package locks_test

import (
	"context"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// newLocks returns the locks service on db, keying under the built-in
// rules. Build one per pool (it owns the pool's acquire Batcher); the
// pool's BatchStallAfter (dbtest.Pool) applies: New makes the Batcher.
func newLocks(db *database.DB) *locks.Service {
	return locks.New(db, locks.Fixed(normalize.Default()), nil)
}

// release runs ls.Release in a transaction of its own and commits it: a
// release with nothing else in its transaction.
func release(ctx context.Context, db *database.DB, ls *locks.Service, lockID string) (released bool, err error) {
	err = db.WithTx(ctx, func(tx database.Tx) error {
		released, err = ls.Release(ctx, tx, lockID)
		return err
	})
	return released, err
}

// claim keys raw for a claim under the rules ls keys under now (for
// AcquireTx); the test fails when they reject it.
func claim(t testing.TB, ls *locks.Service, raw string) locks.Claim {
	t.Helper()
	c, err := ls.Keying().Claim(raw)
	if err != nil {
		t.Fatalf("claim %s: %v", raw, err)
	}
	return c
}
