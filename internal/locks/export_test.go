package locks

import (
	"context"

	"github.com/repolock/repolock/internal/database"
)

// InsertLocks runs the bare acquire's batched insert (insertLocksSQL) on q
// for keys, all for tenant under rules, in the order given: for tests of
// the statement itself, without the Batcher.
func InsertLocks(ctx context.Context, q database.Querier, tenant, rules string, keys []string) ([]string, error) {
	in := make([]newLock, len(keys))
	for i, k := range keys {
		in[i] = newLock{key: k, rules: rules, tenant: tenant}
	}
	return insertLocks(ctx, inTx{q}, in)
}

// MaxRekeyings is how often Keyed reloads the rules for one call before it
// gives up.
const MaxRekeyings = maxRekeyings
