package locks

import (
	"context"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// Events of Applications and Repository Credentials (migration 000027),
// recorded by the statements internal/apps runs, built here: a tenant's
// watch sees its Applications and Credentials come and go, not only the
// locks they make and free.
//
// One row per operation. A create that makes a new lock writes no row of
// its own: the lock's "acquired" row names it (NewLocksEventCTE); nor does
// a delete that releases the lock: the "released" row names it
// (ReleaseRef). The kinds below are for the others: a create that joins a
// lock its tenant holds, a delete that leaves the lock referenced.
const (
	EventApplicationCreated = "application_created" // an Application was created on a lock its tenant held
	EventApplicationDeleted = "application_deleted" // an Application was deleted; its lock stays
	EventCredentialCreated  = "credential_created"  // a Repository Credential was created on a lock its tenant held
	EventCredentialDeleted  = "credential_deleted"  // a Repository Credential was deleted; its lock stays
)

// Ref is the kind of row that references locks, as events name it:
// RefApplication or RefCredential.
type Ref struct {
	// Created and Deleted are its event kinds.
	Created, Deleted string
	// idColumn and nameColumn are the event columns that name the row.
	idColumn, nameColumn string
}

// The two kinds of references.
var (
	RefApplication = Ref{Created: EventApplicationCreated, Deleted: EventApplicationDeleted,
		idColumn: "application_id", nameColumn: "application_name"}
	RefCredential = Ref{Created: EventCredentialCreated, Deleted: EventCredentialDeleted,
		idColumn: "credential_id", nameColumn: "credential_name"}
)

// refEventColumns are the columns an event of a referencing row fills.
func (r Ref) eventColumns() string {
	return `repository_lock_events
	(event, lock_id, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name, ` + r.idColumn + `, ` + r.nameColumn + `)`
}

// NewLocksEventCTE records the "acquired" event of each lock NewLocksCTE
// created, naming the row that references it: a common table expression
// named lock_event, for a statement that has the CTE named lock
// (NewLocksCTE) and, after it, a CTE named a, the rows of ref's kind it
// inserted (columns id, name, normalized_url: the lock's key, and
// cluster_user_id). A row of a whose lock was not created here writes
// nothing (the statement writes no row then). So a create that makes its
// lock writes one event row, the lock's, which names it.
func NewLocksEventCTE(r Ref) string {
	return `lock_event AS (
	INSERT INTO ` + r.eventColumns() + `
	SELECT '` + EventAcquired + `', lock.id, lock.git_repository_url, lock.cluster_user_id, u.name, lock.cluster_user_id, u.name, a.id, a.name
	FROM a JOIN lock ON lock.git_repository_url = a.normalized_url AND lock.cluster_user_id = a.cluster_user_id
	CROSS JOIN LATERAL (SELECT u.name FROM cluster_users u WHERE u.id = lock.cluster_user_id OFFSET 0) u
)`
}

// RefCreatedCTE records r.Created for the rows of a CTE named a (as in
// NewLocksEventCTE), all on the lock whose id is the SQL expression lock:
// a CTE named ref_event, for the statement that writes a row and its
// reference to a lock acquired earlier in its transaction
// (Service.AcquireTx).
func RefCreatedCTE(r Ref, lock string) string {
	return `ref_event AS (
	INSERT INTO ` + r.eventColumns() + `
	SELECT '` + r.Created + `', ` + lock + `::uuid, a.normalized_url, a.cluster_user_id, u.name, a.cluster_user_id, u.name, a.id, a.name
	FROM a CROSS JOIN LATERAL (SELECT u.name FROM cluster_users u WHERE u.id = a.cluster_user_id OFFSET 0) u
)`
}

// RefDeletedUnreferencedCTE records r.Deleted, with no lock, for the rows
// of a CTE named gone (the deleted rows: id, name, normalized_url,
// cluster_user_id) when the CTE named ref (their deleted references) has
// no row: a row deleted without a reference frees no lock, so no
// ReleaseRef names it. A CTE named ref_event.
func RefDeletedUnreferencedCTE(r Ref) string {
	return `ref_event AS (
	INSERT INTO ` + r.eventColumns() + `
	SELECT '` + r.Deleted + `', NULL, gone.normalized_url, gone.cluster_user_id, u.name, gone.cluster_user_id, u.name, gone.id, gone.name
	FROM gone CROSS JOIN LATERAL (SELECT u.name FROM cluster_users u WHERE u.id = gone.cluster_user_id OFFSET 0) u
	WHERE NOT EXISTS (SELECT 1 FROM ref)
)`
}

// releaseRefSQL is releaseSQL for a release caused by the deletion of a
// referencing row ($2 its id, $3 its name): the "released" event names
// the row; when the lock stays (still referenced, or pinned), the row's
// deleted event ($4) is recorded on it instead. One row either way.
func releaseRefSQL(r Ref) string {
	return `
WITH gone AS (
	DELETE FROM RepositoryLockOwner o
	WHERE o.id = $1 AND ` + UnreferencedSQL + `
	  AND ` + NotPinnedSQL + `
	RETURNING o.id, o.git_repository_url, o.cluster_user_id
), event AS (
	INSERT INTO ` + r.eventColumns() + `
	SELECT '` + EventReleased + `', gone.id, gone.git_repository_url, gone.cluster_user_id, u.name, gone.cluster_user_id, u.name, $2::uuid, $3::text
	FROM gone LEFT JOIN cluster_users u ON u.id = gone.cluster_user_id
	UNION ALL
	SELECT $4::text, o.id, o.git_repository_url, o.cluster_user_id, u.name, o.cluster_user_id, u.name, $2::uuid, $3::text
	FROM RepositoryLockOwner o LEFT JOIN cluster_users u ON u.id = o.cluster_user_id
	WHERE o.id = $1 AND NOT EXISTS (SELECT 1 FROM gone)
)
SELECT count(*) FROM gone`
}

// refDeletedSQL records r.Deleted ($1) for a row ($2 id, $3 name, of
// tenant $4) whose lock ($5, on key $6) is already gone.
func refDeletedSQL(r Ref) string {
	return `INSERT INTO ` + r.eventColumns() + `
	SELECT $1, $5::uuid, $6, $4, u.name, $4, u.name, $2::uuid, $3 FROM cluster_users u WHERE u.id = $4`
}

// Deleted is a referencing row just deleted, as ReleaseRef names it.
type Deleted struct {
	ID, Name, TenantID, Key string
}

// ReleaseRef is Release for the lock that the row d of kind r referenced,
// called in the transaction that deleted the row and its reference: the
// "released" event names the row, and when the lock stays (other rows
// reference it, or a handover offer pins it) r.Deleted is recorded
// instead. Either way the deletion is one event row.
func (s *Service) ReleaseRef(ctx context.Context, tx database.Tx, lockID string, r Ref, d Deleted) (released bool, err error) {
	defer repolock.WrapOp(&err, "locks.ReleaseRef")
	if _, err := uuid.Parse(lockID); err != nil {
		return false, repolock.Errorf(repolock.EInvalid, "lock id is not valid")
	}
	var id string
	if err := tx.GetContext(ctx, &id, lockForReleaseSQL, lockID); err != nil {
		if !database.IsNoRows(err) {
			return false, database.MapError(err)
		}
		// The lock is gone already: the row's deletion is still an event.
		_, err := tx.ExecContext(ctx, refDeletedSQL(r), r.Deleted, d.ID, d.Name, d.TenantID, lockID, d.Key)
		return false, database.MapError(err)
	}
	var n int
	if err := tx.GetContext(ctx, &n, releaseRefSQL(r), lockID, d.ID, d.Name, r.Deleted); err != nil {
		if database.PQCode(err) == database.CodeForeignKeyViolation {
			return false, nil // as in Release
		}
		return false, database.MapError(err)
	}
	return n == 1, nil
}
