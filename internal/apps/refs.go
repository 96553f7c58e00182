package apps

import (
	"context"
	"strings"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// refs describes one kind of row that references a lock (applicationRefs,
// credentialRefs): its table, its reference table and the reference's
// column, how its fields are checked, and the SQL that newRefs assembles,
// once and only from these constants, for the functions below. The two kinds
// differ only in their nouns, their tables, their repo_url check and their
// own two columns (extra).
type refs struct {
	noun     string // in not_found messages: "application"
	what     string // in already_exists messages: "an application"
	table    string
	refTable string
	refCol   string
	pageKind string // the locks.Kind of the kind's page tokens
	// repoURL checks a repo_url and returns its key and the URL to store.
	repoURL func(raw string) (normalize.Key, string, error)
	// extra are the kind's own text columns, in the order they are checked
	// and stored (after normalized_url).
	extra [2]column

	// Set by newRefs.
	getSQL, lockedSQL, listSQL, createSQL, createWithNewLockSQL, updateSQL string
}

// column is one of a kind's own columns and its check.
type column struct {
	name     string
	validate func(string) error
}

// The SQL of both kinds. newRefs replaces {table}, {refTable}, {refCol},
// {x0} and {x1} (the extra columns) and {columns} (columnsSQL).
const (
	columnsSQL = `a.id, a.cluster_user_id, a.name, a.repo_url, a.normalized_url, a.{x0}, a.{x1}, a.created_at, a.updated_at`

	selectSQL = `
SELECT {columns}, coalesce(r.lock_id::text, '') AS lock_id
FROM {table} a LEFT JOIN {refTable} r ON r.{refCol} = a.id`

	// createSQL writes the row and its reference in one statement, in the
	// transaction that acquired the lock $7.
	createSQL = `
WITH a AS (
	INSERT INTO {table} (cluster_user_id, name, repo_url, normalized_url, {x0}, {x1})
	VALUES ($1, $2, $3, $4, $5, $6)
	RETURNING *
), ref AS (
	INSERT INTO {refTable} ({refCol}, lock_id) SELECT a.id, $7::uuid FROM a
)
SELECT {columns}, $7::uuid::text AS lock_id FROM a`

	// createWithNewLockSQL is the fast path of a create: when nobody holds
	// the URL, one statement (so one implicit transaction and one round trip)
	// creates the lock, its event, the row and the reference. It returns no
	// row, and writes nothing, when the URL is taken.
	createWithNewLockSQL = `
WITH ` + locks.NewLockCTE + `, a AS (
	INSERT INTO {table} (cluster_user_id, name, repo_url, normalized_url, {x0}, {x1})
	SELECT $3, $4, $5, $1, $6, $7 FROM lock
	RETURNING *
), ref AS (
	INSERT INTO {refTable} ({refCol}, lock_id) SELECT a.id, lock.id FROM a, lock
)
SELECT {columns}, lock.id::text AS lock_id FROM a, lock`

	// updateSQL writes every column an update can change; $8 is the lock the
	// row references afterwards.
	updateSQL = `
UPDATE {table} a
SET name = $3, repo_url = $4, normalized_url = $5, {x0} = $6, {x1} = $7, updated_at = now()
WHERE a.id = $1 AND a.cluster_user_id = $2
RETURNING {columns}, $8::text AS lock_id`
)

// newRefs returns k with its SQL.
func newRefs(k refs) *refs {
	x0, x1 := k.extra[0].name, k.extra[1].name
	columns := strings.NewReplacer("{x0}", x0, "{x1}", x1).Replace(columnsSQL)
	r := strings.NewReplacer("{table}", k.table, "{refTable}", k.refTable, "{refCol}", k.refCol,
		"{x0}", x0, "{x1}", x1, "{columns}", columns)
	sel := r.Replace(selectSQL)
	k.getSQL = sel + ` WHERE a.id = $1 AND a.cluster_user_id = $2`
	k.lockedSQL = sel + ` WHERE a.id = $1`
	k.listSQL = sel + `
	WHERE a.cluster_user_id = $1 AND (a.created_at, a.id) > ($2::timestamptz, $3::uuid)
	ORDER BY a.created_at, a.id
	LIMIT $4`
	k.createSQL = r.Replace(createSQL)
	k.createWithNewLockSQL = r.Replace(createWithNewLockSQL)
	k.updateSQL = r.Replace(updateSQL)
	return &k
}

func (k *refs) notFound(id string) error {
	return repolock.Errorf(repolock.ENotFound, "%s %s not found", k.noun, id)
}

// fields are what the shared code reads of a row, the same in both kinds
// but for extra, the kind's own columns (refs.extra).
type fields struct {
	id                           string
	createdAt                    time.Time
	name, repoURL, normalizedURL string
	extra                        [2]string
	lockID                       string
}

// row is a kind's Go type.
type row interface {
	Application | RepositoryCredential
	fields() fields
}

// change is the input of a create (every field set) or of an update (the
// fields that are not nil), with the raw repo_url.
type change struct {
	name, repoURL *string
	extra         [2]*string
}

// validate checks the fields c sets, in order, and returns the key and the
// URL to store of its repo_url.
func (k *refs) validate(c change) (key normalize.Key, stored string, err error) {
	if c.name != nil {
		if err := ValidateName(*c.name); err != nil {
			return "", "", err
		}
	}
	if c.repoURL != nil {
		if key, stored, err = k.repoURL(*c.repoURL); err != nil {
			return "", "", err
		}
	}
	for i, v := range c.extra {
		if v != nil {
			if err := k.extra[i].validate(*v); err != nil {
				return "", "", err
			}
		}
	}
	return key, stored, nil
}

// acquire acquires key for the tenant in tx. claimedBy is the owner's name
// when another tenant holds it.
func acquire(ctx context.Context, tx database.Tx, tenantID string, key normalize.Key) (lockID, claimedBy string, err error) {
	lockID, ok, owner, err := locks.AcquireRepositoryCredentialURL(ctx, tx, tenantID, string(key))
	if err != nil {
		return "", "", err
	}
	if !ok {
		return "", owner, nil
	}
	return lockID, "", nil
}

// mapWriteError maps the errors of writing a row; what is "an application"
// or "a repository credential".
func mapWriteError(err error, what, name string) error {
	if database.PQCode(err) == database.CodeUniqueViolation && strings.HasSuffix(database.Constraint(err), "_tenant_name_key") {
		return repolock.Wrap(repolock.EAlreadyExists, err, "%s named %q already exists", what, name)
	}
	if database.PQCode(err) == database.CodeForeignKeyViolation && strings.Contains(database.Constraint(err), "cluster_user_id") {
		return repolock.Wrap(repolock.ENotFound, err, "the user no longer exists")
	}
	return database.MapError(err)
}

// createReferenced creates a row of kind k of the tenant (c sets every
// field) and references the tenant's lock on its repository, acquiring it if
// needed.
//
// A URL nobody holds is acquired and the row written in a single prepared
// statement. Otherwise (the tenant already owns the URL, another tenant does,
// or the fast path lost a race) one transaction acquires the lock with
// locks.AcquireRepositoryCredentialURL and writes the row and its reference.
func createReferenced[T row](ctx context.Context, db *database.DB, k *refs, tenantID string, c change) (T, error) {
	var zero, r T
	key, stored, err := k.validate(c)
	if err != nil {
		return zero, err
	}
	name, x0, x1 := *c.name, *c.extra[0], *c.extra[1]
	err = db.GetPrepared(ctx, &r, k.createWithNewLockSQL, string(key), normalize.Version, tenantID, name, stored, x0, x1)
	if err == nil {
		return r, nil
	}
	if !database.IsNoRows(err) {
		return zero, mapWriteError(err, k.what, name)
	}
	var claimedBy string
	err = db.WithTx(ctx, func(tx database.Tx) error {
		lockID, owner, err := acquire(ctx, tx, tenantID, key)
		if err != nil {
			return err
		}
		if claimedBy = owner; claimedBy != "" {
			return nil // commit the denial event; nothing else was written
		}
		err = tx.GetContext(ctx, &r, k.createSQL, tenantID, name, stored, string(key), x0, x1, lockID)
		return mapWriteError(err, k.what, name)
	})
	if err != nil {
		return zero, err
	}
	if claimedBy != "" {
		return zero, locks.ClaimedError(claimedBy)
	}
	return r, nil
}

// getReferenced returns the tenant's row id of kind k.
func getReferenced[T row](ctx context.Context, q database.Querier, k *refs, tenantID, id string) (T, error) {
	var r T
	if !validID(id) {
		return r, k.notFound(id)
	}
	err := q.GetContext(ctx, &r, k.getSQL, id, tenantID)
	if database.IsNoRows(err) {
		var zero T
		return zero, k.notFound(id)
	}
	return r, database.MapError(err)
}

// listReferenced returns one page of the tenant's rows of kind k in creation
// order and the token of the next page ("" after the last).
func listReferenced[T row](ctx context.Context, q database.Querier, k *refs, tenantID string, pageSize int, pageToken string) ([]T, string, error) {
	after, err := locks.DecodePageToken(k.pageKind, pageToken)
	if err != nil {
		return nil, "", err
	}
	out := []T{}
	err = q.SelectContext(ctx, &out, k.listSQL, tenantID, after.CreatedAt, after.ID, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	var next string
	if len(out) > pageSize {
		out = out[:pageSize]
		last := out[len(out)-1].fields()
		next = locks.EncodePageToken(k.pageKind, locks.Cursor{CreatedAt: last.createdAt, ID: last.id})
	}
	return out, next, nil
}

// updateReferenced changes the fields c sets of the tenant's row id of kind
// k. A new repo_url on another repository moves the row to the tenant's lock
// on it (acquiring it, or failing with repository_claimed) and releases the
// old lock if nothing else references it. A change that changes nothing
// returns the row unchanged.
func updateReferenced[T row](ctx context.Context, db *database.DB, k *refs, tenantID, id string, c change) (T, error) {
	var zero T
	if !validID(id) {
		return zero, k.notFound(id)
	}
	key, stored, err := k.validate(c)
	if err != nil {
		return zero, err
	}
	var (
		r         T
		claimedBy string
	)
	err = db.WithTx(ctx, func(tx database.Tx) error {
		claimedBy = ""
		// Lock the row and then, in a new statement (so with a snapshot
		// taken after any concurrent change to it committed), read it with
		// its reference. Every change to a row's reference happens under
		// this row lock.
		if err := lockRow(ctx, tx, k, tenantID, id); err != nil {
			return err
		}
		var cur T
		if err := tx.GetContext(ctx, &cur, k.lockedSQL, id); err != nil {
			return database.MapError(err)
		}
		was := cur.fields()
		next := was
		setIf(&next.name, c.name)
		for i, v := range c.extra {
			setIf(&next.extra[i], v)
		}
		if c.repoURL != nil {
			next.repoURL, next.normalizedURL = stored, string(key)
		}
		if next == was {
			r = cur
			return nil
		}
		if next.normalizedURL != was.normalizedURL {
			lockID, owner, err := acquire(ctx, tx, tenantID, normalize.Key(next.normalizedURL))
			if err != nil {
				return err
			}
			if claimedBy = owner; claimedBy != "" {
				return nil // commit the denial event; nothing else was written
			}
			next.lockID = lockID
		}
		err := tx.GetContext(ctx, &r, k.updateSQL,
			id, tenantID, next.name, next.repoURL, next.normalizedURL, next.extra[0], next.extra[1], next.lockID)
		if err != nil {
			return mapWriteError(err, k.what, next.name)
		}
		if next.lockID != was.lockID {
			return moveReference(ctx, tx, k, id, was.lockID, next.lockID)
		}
		return nil
	})
	if err != nil {
		return zero, err
	}
	if claimedBy != "" {
		return zero, locks.ClaimedError(claimedBy)
	}
	return r, nil
}

func setIf(dst *string, v *string) {
	if v != nil {
		*dst = *v
	}
}

// lockRow takes the row lock of the tenant's row id, or answers not found.
func lockRow(ctx context.Context, tx database.Tx, k *refs, tenantID, id string) error {
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
func moveReference(ctx context.Context, tx database.Tx, k *refs, id, oldLock, newLock string) error {
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
func deleteReferencing(ctx context.Context, db *database.DB, k *refs, tenantID, id string) error {
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
