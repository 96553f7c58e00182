package apps

import (
	"context"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
)

// refs describes one kind of row that references a lock: its table, its
// reference table and the reference's column. The SQL below is assembled
// only from these constants.
type refs struct {
	noun     string
	table    string
	refTable string
	refCol   string
}

var (
	applicationRefs = refs{noun: "application", table: "applications", refTable: "RepositoryLockApplication", refCol: "application_id"}
	credentialRefs  = refs{noun: "repository credential", table: "repository_credentials", refTable: "RepositoryLockRepositoryCredential", refCol: "repository_credential_id"}
)

func (k refs) notFound(id string) error {
	return repolock.Errorf(repolock.ENotFound, "%s %s not found", k.noun, id)
}

// lockRow takes the row lock of the tenant's row id, or answers not found.
func lockRow(ctx context.Context, tx database.Tx, k refs, tenantID, id string) error {
	var got string
	err := tx.GetContext(ctx, &got, `SELECT id FROM `+k.table+` WHERE id = $1 AND cluster_user_id = $2 FOR UPDATE`, id, tenantID)
	if database.IsNoRows(err) {
		return k.notFound(id)
	}
	return database.MapError(err)
}

// moveReference points row id's reference at newLock (creating the
// reference if it was missing) and releases oldLock if nothing else uses it.
// The caller holds the row lock and FOR KEY SHARE on newLock (from Acquire).
func moveReference(ctx context.Context, tx database.Tx, k refs, id, oldLock, newLock string) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO `+k.refTable+` (`+k.refCol+`, lock_id) VALUES ($1, $2)
		ON CONFLICT (`+k.refCol+`) DO UPDATE SET lock_id = EXCLUDED.lock_id`, id, newLock)
	if err != nil {
		return database.MapError(err)
	}
	if oldLock == "" {
		return nil
	}
	_, err = locks.Release(ctx, tx, oldLock)
	return err
}

// deleteReferencing deletes the tenant's row id and its reference, and
// releases the lock if that was its last reference, in one transaction. The
// row lock is taken first, so the reference read afterwards is the current
// one even if a concurrent update just moved it.
func deleteReferencing(ctx context.Context, db *database.DB, k refs, tenantID, id string) error {
	if !validID(id) {
		return k.notFound(id)
	}
	return db.WithTx(ctx, func(tx database.Tx) error {
		if err := lockRow(ctx, tx, k, tenantID, id); err != nil {
			return err
		}
		var lockIDs []string
		err := tx.SelectContext(ctx, &lockIDs, `
			WITH ref AS (DELETE FROM `+k.refTable+` WHERE `+k.refCol+` = $1 RETURNING lock_id),
			gone AS (DELETE FROM `+k.table+` WHERE id = $1)
			SELECT lock_id FROM ref`, id)
		if err != nil {
			return database.MapError(err)
		}
		for _, lockID := range lockIDs {
			if _, err := locks.Release(ctx, tx, lockID); err != nil {
				return err
			}
		}
		return nil
	})
}
