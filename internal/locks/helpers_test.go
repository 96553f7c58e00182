package locks_test

import (
	"context"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// newLocks returns the locks service on db, keying under the built-in
// rules. Build one per pool (it owns the pool's acquire Batcher), after
// any db.SetBatchStallAfter: New makes the Batcher.
func newLocks(db *database.DB) *locks.Service {
	return locks.New(db, normalize.Static(normalize.Default()))
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
