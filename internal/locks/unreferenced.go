package locks

import (
	"context"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// UnreferencedSQL is the one definition of "nothing references the lock":
// a condition on a RepositoryLockOwner row aliased o, with one NOT EXISTS per
// reference table. A third kind of reference is one more line here.
//
// $1 must be a lower bound of o.id (o.id >= $1): the redundant
// "lock_id >= $1" bounds let the GC's keyset scan start every reference
// index at its cursor instead of at the beginning (the planner does not
// carry o.id > $1 over by itself; measured on 1M locks, 690 ms instead of
// 22 ms for a batch in the middle, see docs/benchmarks/gc.md). Statements on
// one lock pass the lock's id as $1.
const UnreferencedSQL = `NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id AND ra.lock_id >= $1)
      AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id AND rc.lock_id >= $1)`

// deleteUnreferencedSQL deletes the locks of $2 that nothing references,
// re-checking with the statement's own snapshot, and records a "collected"
// event for each. $1 is the smallest id of $2.
const deleteUnreferencedSQL = `
WITH deleted AS (
    DELETE FROM RepositoryLockOwner o
    WHERE o.id = ANY($2::uuid[]) AND o.id >= $1
      AND ` + UnreferencedSQL + `
      -- Issue 25: an open handover offer pins the lock; it stays a
      -- candidate, collected once the offer ends (transfer.go).
      AND ` + NotPinnedSQL + `
    RETURNING o.id, o.git_repository_url, o.cluster_user_id
)
INSERT INTO repository_lock_events (event, lock_id, git_repository_url, owner_user_id, owner_user_name)
SELECT '` + EventCollected + `', d.id, d.git_repository_url, d.cluster_user_id, u.name
FROM deleted d
LEFT JOIN cluster_users u ON u.id = d.cluster_user_id`

// DeleteUnreferenced deletes those of the locks ids that nothing references
// at the time of the statement, records a "collected" event for each, and
// returns how many it deleted. It is the global GC's delete: the caller
// holds row locks on ids (FOR UPDATE), so no reference can be in flight,
// and the foreign keys still refuse a referenced lock (a 23503 error, whose
// *pq.Error stays reachable with database.PQCode).
func (s *Service) DeleteUnreferenced(ctx context.Context, q database.Querier, ids []string) (_ int64, err error) {
	defer repolock.WrapOp(&err, "locks.DeleteUnreferenced")
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := q.ExecContext(ctx, deleteUnreferencedSQL, lowest(ids), pq.Array(ids))
	if err != nil {
		return 0, database.MapError(err)
	}
	n, err := res.RowsAffected()
	return n, database.MapError(err)
}

// clearCandidatesSQL clears the flag of the locks of $2 that something
// references, re-checking with the statement's own snapshot. $1 is the
// smallest id of $2.
const clearCandidatesSQL = `
UPDATE RepositoryLockOwner o SET gc_candidate = false
WHERE o.id = ANY($2::uuid[]) AND o.id >= $1
  AND o.gc_candidate
  AND NOT (` + UnreferencedSQL + `)`

// ClearCandidates clears gc_candidate on those of the locks ids that a
// reference points at now, and returns how many it cleared: the global GC,
// for the candidates it found referenced. The caller holds a row lock on
// every id (FOR NO KEY UPDATE or stronger). That is what makes it safe: a
// transaction removing a reference flags the lock in the same transaction
// (the reference tables' triggers, migration 000013), first taking FOR NO
// KEY UPDATE on it, so either it holds that lock already (and the caller,
// which takes its locks with SKIP LOCKED, does not have this id), or it
// waits for the caller's commit and then flags the lock again. The re-check
// sees every reference removal committed before this statement.
func (s *Service) ClearCandidates(ctx context.Context, q database.Querier, ids []string) (_ int64, err error) {
	defer repolock.WrapOp(&err, "locks.ClearCandidates")
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := q.ExecContext(ctx, clearCandidatesSQL, lowest(ids), pq.Array(ids))
	if err != nil {
		return 0, database.MapError(err)
	}
	n, err := res.RowsAffected()
	return n, database.MapError(err)
}

// FlagCandidates sets gc_candidate on those of the locks ids that do not
// have it, skipping any row another transaction holds a conflicting lock on
// (a reference removal, whose trigger flags the lock itself, or a Release),
// and returns how many it flagged: the repair of a full GC run (api gc
// --full), for the unreferenced locks its scan found. Flagging is always
// safe: a flagged lock that turns out referenced is only visited and
// cleared by the next run.
func (s *Service) FlagCandidates(ctx context.Context, q database.Querier, ids []string) (_ int64, err error) {
	defer repolock.WrapOp(&err, "locks.FlagCandidates")
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := q.ExecContext(ctx, `
		UPDATE RepositoryLockOwner o SET gc_candidate = true
		WHERE o.id IN (
			SELECT id FROM RepositoryLockOwner
			WHERE id = ANY($1::uuid[]) AND NOT gc_candidate
			FOR NO KEY UPDATE SKIP LOCKED)`, pq.Array(ids))
	if err != nil {
		return 0, database.MapError(err)
	}
	n, err := res.RowsAffected()
	return n, database.MapError(err)
}

func lowest(ids []string) string {
	low := ids[0]
	for _, id := range ids[1:] {
		if id < low {
			low = id
		}
	}
	return low
}

// ReleaseAllForTenant deletes every lock of the tenant tenantID (named
// tenantName, for the events) and records a "released" event for each; it
// returns how many. The caller deletes the tenant's references first, in
// the same transaction (internal/apps.DeleteTenant).
func (s *Service) ReleaseAllForTenant(ctx context.Context, q database.Querier, tenantID, tenantName string) (_ int64, err error) {
	defer repolock.WrapOp(&err, "locks.ReleaseAllForTenant")
	var n int64
	err = q.GetContext(ctx, &n, `
		WITH gone AS (
			DELETE FROM RepositoryLockOwner WHERE cluster_user_id = $1
			RETURNING id, git_repository_url
		), event AS (
			INSERT INTO `+eventColumns+`
			SELECT '`+EventReleased+`', gone.id, gone.git_repository_url, $1, $2, $1, $2 FROM gone
		)
		SELECT count(*) FROM gone`, tenantID, tenantName)
	return n, database.MapError(err)
}

// DeleteOldEvents deletes at most limit lock events whose last occurrence
// (last_at of a coalesced denial, else created_at) is more than olderThan
// ago, oldest first, and returns how many it deleted: one batch of the GC's
// retention. It says so to the audit trigger (SET LOCAL
// repolock.retention), so q must be a transaction.
func (s *Service) DeleteOldEvents(ctx context.Context, q database.Querier, olderThan time.Duration, limit int) (_ int64, err error) {
	defer repolock.WrapOp(&err, "locks.DeleteOldEvents")
	if _, err := q.ExecContext(ctx, `SET LOCAL repolock.retention = 'on'`); err != nil {
		return 0, database.MapError(err)
	}
	// Served by repository_lock_events_created_at_idx (last_at is never
	// before created_at, so created_at < cutoff bounds the scan).
	res, err := q.ExecContext(ctx, `
		DELETE FROM repository_lock_events WHERE id IN (
			SELECT id FROM repository_lock_events
			WHERE created_at < now() - make_interval(secs => $1)
			  AND COALESCE(last_at, created_at) < now() - make_interval(secs => $1)
			ORDER BY created_at
			LIMIT $2)`, olderThan.Seconds(), limit)
	if err != nil {
		return 0, database.MapError(err)
	}
	return res.RowsAffected()
}
