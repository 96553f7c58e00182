package syncstate

import (
	"context"
	"database/sql"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// HostGuard is the guarding key of a host's cursor writes (events and
// connections): the lease key its indexer holds, in its tenant, to write
// the cursor with its fencing token (docs/leases.md).
func HostGuard(host string) string { return "sync/hosts/" + host }

// fenceSQL admits a fenced write in the caller's transaction when $3 is
// the last token issued for the lease key $2 of tenant $1 (lease_tokens),
// and raises kv_fences to it. The kv_fences row lock, held to commit,
// orders the fenced writes of one guard: one whose token fell behind
// while it waited is refused.
const fenceSQL = `WITH issued AS (
		SELECT token FROM lease_tokens WHERE cluster_user_id = $1 AND key = $2
	), fence AS (
		INSERT INTO kv_fences AS f (cluster_user_id, guard, token)
		SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM issued WHERE token = $3)
		ON CONFLICT (cluster_user_id, guard) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token
		RETURNING 1
	)
	SELECT EXISTS (SELECT 1 FROM fence), (SELECT token FROM issued)`

// checkFence runs fenceSQL for a write of host guarded by token (0:
// unguarded) in tx: fenced for a stale token, invalid_argument for one
// never issued.
func checkFence(ctx context.Context, tx database.Tx, tenantID, host string, token int64) error {
	if token == 0 {
		return nil
	}
	guard := HostGuard(host)
	var (
		admitted bool
		issued   sql.NullInt64
	)
	if err := tx.QueryRowContext(ctx, fenceSQL, tenantID, guard, token).Scan(&admitted, &issued); err != nil {
		return database.MapError(err)
	}
	if admitted {
		return nil
	}
	if !issued.Valid || issued.Int64 < token {
		return repolock.Errorf(repolock.EInvalid, "fencing token %d was never issued for the lease key %s", token, guard)
	}
	return repolock.Errorf(repolock.EFenced, "fencing token %d is stale: a newer lease on %s was granted", token, guard)
}

func validateToken(token int64) error {
	if token < 0 {
		return repolock.Errorf(repolock.EInvalid, "fencing token must be positive")
	}
	return nil
}
