package locks

import (
	"context"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/normalize"
)

// The statements of re-keying (internal/rekey) that touch locks and record
// lock events. They follow the lock protocol of this package: the lock being
// re-keyed is taken FOR UPDATE (waiting for every acquirer holding FOR KEY
// SHARE), a target lock of the same tenant is taken FOR KEY SHARE or created
// with INSERT ... ON CONFLICT DO NOTHING, and an emptied lock is deleted by
// Release.

// StaleSQL is the condition on a RepositoryLockOwner row aliased o that
// makes it stale under rules version $1: keyed by an older version. Locks
// of a newer version (a newer binary during a rolling upgrade) are not
// stale. Aliases make no lock stale: an alias change re-keys the locks it
// moves in the transaction that applies it (internal/rekey).
const StaleSQL = `(o.normalizer_version < $1)`

// Stale is one lock keyed under other rules.
type Stale struct {
	ID                string        `db:"id" json:"lock_id"`
	Key               normalize.Key `db:"git_repository_url" json:"key"`
	NormalizerVersion int           `db:"normalizer_version" json:"normalizer_version"`
	NormalizerRules   string        `db:"normalizer_rules" json:"normalizer_rules"`
	TenantID          string        `db:"cluster_user_id" json:"user_id"`
	TenantName        string        `db:"user_name" json:"user"`
}

// Target is who holds a key re-keying wants to move references to.
type Target struct {
	// LockID is the tenant's lock on the key (created or reused), "" when
	// another tenant holds it.
	LockID string
	// Created is true when the lock was created for the move.
	Created bool
	// The other tenant's lock, when LockID is "".
	OwnerLockID, OwnerID, OwnerName string
}

const otherOwnerSQL = `
SELECT o.id, o.cluster_user_id, u.name
FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE o.git_repository_url = $1 AND o.cluster_user_id <> $2`

// AcquireForRekey is AcquireTx for re-keying, under
// n's rules: it creates the tenant's lock on key (with its "acquired"
// event, so that acquired and released events of a key still alternate; the
// move itself is recorded by RecordRekeyed) or takes FOR KEY SHARE on the
// tenant's existing one, or, when another tenant holds key, returns that
// lock and owner without recording a denial (the tenant asked for nothing).
func (s *Service) AcquireForRekey(ctx context.Context, q database.Querier, k *Keying, tenantID string, key normalize.Key) (_ Target, err error) {
	defer repolock.WrapOp(&err, "locks.AcquireForRekey")
	c, err := k.KeyClaim(key)
	if err != nil {
		return Target{}, err
	}
	for attempt := 0; attempt < maxAcquireAttempts; attempt++ {
		ids, err := insertLocks(ctx, inTx{q}, []newLock{{key: string(key), rules: c.rules(), tenant: tenantID, gen: c.gen}})
		if err != nil {
			return Target{}, mapAcquireError(err)
		}
		if ids[0] != "" {
			return Target{LockID: ids[0], Created: true}, nil
		}
		var id string
		err = q.GetContext(ctx, &id, ownLockSQL, string(key), tenantID)
		if err == nil {
			return Target{LockID: id}, nil
		}
		if !database.IsNoRows(err) {
			return Target{}, database.MapError(err)
		}
		var o struct {
			ID     string `db:"id"`
			UserID string `db:"cluster_user_id"`
			Name   string `db:"name"`
		}
		err = q.GetContext(ctx, &o, otherOwnerSQL, key, tenantID)
		if err == nil {
			return Target{OwnerLockID: o.ID, OwnerID: o.UserID, OwnerName: o.Name}, nil
		}
		if !database.IsNoRows(err) {
			return Target{}, database.MapError(err)
		}
		// No lock on key: another tenant's reservation may cover it (the
		// insert refuses it). Re-keying does not create a lock there.
		var r struct {
			Prefix string `db:"prefix"`
			Name   string `db:"name"`
		}
		err = q.GetContext(ctx, &r, reservedBySQL, string(key), tenantID)
		if err == nil {
			return Target{}, ReservedError(r.Name, r.Prefix)
		}
		if !database.IsNoRows(err) {
			return Target{}, database.MapError(err)
		}
	}
	return Target{}, repolock.Errorf(repolock.EConflict,
		"the lock on %s changed hands %d times while re-keying; try again", key, maxAcquireAttempts)
}

// RecordRekeyed records a "rekeyed" event: references of the tenant's lock
// on fromKey moved to its lock toLockID on key.
func (s *Service) RecordRekeyed(ctx context.Context, q database.Querier, toLockID string, key, fromKey normalize.Key, tenantID string) (err error) {
	defer repolock.WrapOp(&err, "locks.RecordRekeyed")
	_, err = q.ExecContext(ctx, `
		INSERT INTO repository_lock_events
			(event, lock_id, git_repository_url, rekeyed_from, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name)
		SELECT '`+EventRekeyed+`', $1, $2, $3, u.id, u.name, u.id, u.name
		FROM cluster_users u WHERE u.id = $4`, toLockID, key, fromKey, tenantID)
	return database.MapError(err)
}

// MarkCurrent records that the lock lockID, whose key is unchanged under
// n's rules, was re-checked under them. The caller holds it FOR UPDATE.
func (s *Service) MarkCurrent(ctx context.Context, q database.Querier, n *normalize.Normalizer, lockID string) (err error) {
	defer repolock.WrapOp(&err, "locks.MarkCurrent")
	_, err = q.ExecContext(ctx, `
		UPDATE RepositoryLockOwner
		SET normalizer_version = split_part($2::text, ':', 1)::integer, normalizer_rules = split_part($2::text, ':', 2)
		WHERE id = $1`, lockID, RuleSet(n))
	return database.MapError(err)
}

// rekeyInPlaceSQL gives locks new keys where they are ($1 ids, $2 the keys
// they had, $3 their new keys, $4 the rules version) and records a
// "rekeyed" event for each (rekeyed_from: the old key). A new key another
// lock holds fails the statement (unique violation): the caller re-plans.
const rekeyInPlaceSQL = `
WITH m AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[]) AS m(id, from_key, to_key)
), moved AS (
	UPDATE RepositoryLockOwner o
	SET git_repository_url = m.to_key, normalizer_version = $4, normalizer_rules = ''
	FROM m WHERE o.id = m.id AND o.git_repository_url = m.from_key
	RETURNING o.id, o.git_repository_url, m.from_key, o.cluster_user_id
)
INSERT INTO repository_lock_events
	(event, lock_id, git_repository_url, rekeyed_from, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name)
SELECT '` + EventRekeyed + `', moved.id, moved.git_repository_url, moved.from_key, moved.cluster_user_id, u.name, moved.cluster_user_id, u.name
FROM moved JOIN cluster_users u ON u.id = moved.cluster_user_id`

// RekeyInPlace moves the locks ids (the caller holds them FOR UPDATE) from
// the keys from to the keys to, under rules version version, recording a
// "rekeyed" event each: for a lock whose every reference moves to one new
// key that no lock holds. It is the set-based step of re-keying; the lock
// ids, and so the references, stay. It returns how many moved.
func (s *Service) RekeyInPlace(ctx context.Context, q database.Querier, version int, ids []string, from, to []normalize.Key) (_ int64, err error) {
	defer repolock.WrapOp(&err, "locks.RekeyInPlace")
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := q.ExecContext(ctx, rekeyInPlaceSQL, pq.StringArray(ids), keyArray(from), keyArray(to), version)
	if err != nil {
		return 0, database.MapError(err)
	}
	return res.RowsAffected()
}

// MarkCurrentMany records that the locks ids (held FOR UPDATE by the
// caller), whose keys are unchanged under rules version version, were
// re-checked under it: one statement for a batch.
func (s *Service) MarkCurrentMany(ctx context.Context, q database.Querier, version int, ids []string) (err error) {
	defer repolock.WrapOp(&err, "locks.MarkCurrentMany")
	if len(ids) == 0 {
		return nil
	}
	_, err = q.ExecContext(ctx, `
		UPDATE RepositoryLockOwner SET normalizer_version = $2, normalizer_rules = ''
		WHERE id = ANY ($1::uuid[])`, pq.StringArray(ids), version)
	return database.MapError(err)
}

// HoldRulesCTE is a common table expression (named hold_rules) that makes
// the statement it starts take ROW EXCLUSIVE on RepositoryLockOwner before
// anything else, as a claim does: an UPDATE that matches no row, whose
// table lock is taken when the statement is planned, before any row lock
// it takes. A transaction that will change a reference starts with it
// (internal/apps takes its row lock in the same statement), so that it
// waits for a rules change in progress (SHARE ROW EXCLUSIVE) before it
// holds a row the change needs, instead of holding the row and then
// waiting for the table: that order deadlocked with every alias change
// (the database broke the cycle a second later, sometimes by aborting the
// change).
const HoldRulesCTE = `hold_rules AS (UPDATE RepositoryLockOwner SET gc_candidate = gc_candidate WHERE false)`

// GuardRules holds off changes of the rules (they take SHARE ROW EXCLUSIVE
// on RepositoryLockOwner) until the caller's transaction q ends, and fails
// with ErrRulesChanged when the stored rules are no longer those of
// generation gen: the first statement of a transaction that moves or
// creates locks under rules it loaded before.
func (s *Service) GuardRules(ctx context.Context, q database.Querier, gen int64) (err error) {
	defer repolock.WrapOp(&err, "locks.GuardRules")
	if _, err := q.ExecContext(ctx, `LOCK TABLE RepositoryLockOwner IN ROW EXCLUSIVE MODE`); err != nil {
		return database.MapError(err)
	}
	var ok bool
	if err := q.GetContext(ctx, &ok, `SELECT repolock_rules_guard($1)`, gen); err != nil {
		return mapAcquireError(err)
	}
	return nil
}

func keyArray(ks []normalize.Key) pq.StringArray {
	out := make(pq.StringArray, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}
