package apps

import (
	"context"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
)

// refs describes one kind of row that references a lock (applicationRefs,
// credentialRefs): its nouns, how its fields are checked, and its SQL. The
// generic create/get/list/update/delete flow below is shared; each kind
// writes its own statements out literally (apps.go, credentials.go), with
// the same parameters in the same order.
type refs struct {
	noun     string // in not_found messages: "application"
	what     string // in already_exists messages: "an application"
	pageKind string // the page-token kind of the kind's lists
	// repoURL checks a repo_url and returns its key and the URL to store.
	repoURL func(n *normalize.Normalizer, raw string) (normalize.Key, string, error)
	// extra are the kind's own text columns, in the order they are checked
	// and stored (after normalized_url).
	extra [2]column
	sql   refsSQL
}

// refsSQL are a kind's statements. Every one that returns rows returns the
// kind's columns and its lock_id (text, "" without a reference).
type refsSQL struct {
	// get: $1 id, $2 tenant. locked: $1 id (the caller holds the row lock).
	get, locked string
	// list: $1 tenant, $2 and $3 the cursor (created_at, id), $4 limit.
	list string
	// create writes the row and its reference in one statement, in the
	// transaction that acquired the lock: $1 tenant, $2 name, $3 repo_url,
	// $4 normalized_url, $5 and $6 the extra columns, $7 the lock.
	create string
	// createWithNewLock is the fast path of creates: for each row of
	// newRowsInput whose URL nobody holds, one statement (so one implicit
	// transaction and one round trip for a whole batch of creates) creates
	// the lock and its event (locks.NewLocksCTE), the row and the
	// reference. It returns the rows it created; none, and writes nothing
	// for it, for a URL that is taken.
	createWithNewLock string
	// update writes every column an update can change: $1 id, $2 tenant,
	// $3 name, $4 repo_url, $5 normalized_url, $6 and $7 the extra columns,
	// $8 the lock the row references afterwards.
	update string
	// lockRow takes the row lock: $1 id, $2 tenant.
	lockRow string
	// setRef points row $1's reference at lock $2, creating it if missing.
	setRef string
	// delete deletes row $1 and its reference, returning the lock ids the
	// reference held.
	delete string
}

// column is one of a kind's own columns and its check.
type column struct {
	name     string
	validate func(string) error
}

func (k *refs) notFound(id string) error {
	return repolock.Errorf(repolock.ENotFound, "%s %s not found", k.noun, id)
}

// fields are what the shared code reads of a row, the same in both kinds
// but for extra, the kind's own columns (refs.extra).
type fields struct {
	id, tenantID                 string
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

// validate checks the fields c sets, in order, and returns the key (under
// the normalizer of ctx, with the deployment's aliases) and the URL to store
// of its repo_url.
func (k *refs) validate(ctx context.Context, c change) (key normalize.Key, stored string, err error) {
	if c.name != nil {
		if err := ValidateName(*c.name); err != nil {
			return "", "", err
		}
	}
	if c.repoURL != nil {
		if key, stored, err = k.repoURL(normalize.FromContext(ctx), *c.repoURL); err != nil {
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
	acq, err := locks.AcquireRepositoryCredentialURL(ctx, tx, tenantID, string(key))
	if err != nil {
		return "", "", err
	}
	return acq.LockID, acq.Owner, nil
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
	key, stored, err := k.validate(ctx, c)
	if err != nil {
		return zero, err
	}
	name, x0, x1 := *c.name, *c.extra[0], *c.extra[1]
	r, created, err := createWithNewLock[T](ctx, db, k, newRow{
		key: string(key), rules: locks.RuleSet(normalize.FromContext(ctx)), tenant: tenantID,
		name: name, repoURL: stored, x0: x0, x1: x1,
	})
	if err != nil {
		return zero, mapWriteError(err, k.what, name)
	}
	if created {
		return r, nil
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
		err = tx.GetContext(ctx, &r, k.sql.create, tenantID, name, stored, string(key), x0, x1, lockID)
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

// newRowsInput is the input CTE of createWithNewLock: one row per create,
// from arrays $1 keys, $2 rule sets (locks.RuleSet), $3 tenants, $4 names,
// $5 repo_urls as stored, $6 and $7 the kind's extra columns. Keys are
// distinct, and so are (tenant, name) pairs.
const newRowsInput = `input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[])
		AS i(key, rules, tenant, name, repo_url, x0, x1)
)`

// newRow is one create's row of newRowsInput.
type newRow struct{ key, rules, tenant, name, repoURL, x0, x1 string }

// newRowKeys are what two creates of one batch may not share: the lock key
// and the (tenant, name) pair.
func newRowKeys(r newRow) []string {
	return []string{"k\x00" + r.key, "n\x00" + r.tenant + "\x00" + r.name}
}

// createdRow is a create's outcome on the fast path: the row, or ok false
// when the URL was taken.
type createdRow[T row] struct {
	row T
	ok  bool
}

// createWithNewLock runs the fast path of one create through the pool's
// Batcher for kind k: creates running at once share one statement and one
// commit.
func createWithNewLock[T row](ctx context.Context, db *database.DB, k *refs, r newRow) (T, bool, error) {
	name := "apps.create." + strings.ReplaceAll(k.noun, " ", "_")
	//lint:ignore SA1019 until this package's service owns its Batcher (issue 23)
	b := database.BatcherFor(db, name, func() *database.Batcher[newRow, createdRow[T]] {
		return database.NewBatcher(db, name, database.BatchConfig[newRow]{Keys: newRowKeys},
			func(ctx context.Context, in []newRow) ([]createdRow[T], error) {
				return createBatch[T](ctx, db, k, in)
			})
	})
	c, err := b.Do(ctx, r)
	return c.row, c.ok, err
}

// createBatch runs createWithNewLock's statement for a batch of creates
// and matches its rows to them by (tenant, name), unique in a batch.
func createBatch[T row](ctx context.Context, db *database.DB, k *refs, in []newRow) ([]createdRow[T], error) {
	var cols [7]pq.StringArray
	for i := range cols {
		cols[i] = make(pq.StringArray, len(in))
	}
	type tenantName struct{ tenant, name string }
	index := make(map[tenantName]int, len(in))
	for i, r := range in {
		cols[0][i], cols[1][i], cols[2][i], cols[3][i], cols[4][i], cols[5][i], cols[6][i] = r.key, r.rules, r.tenant, r.name, r.repoURL, r.x0, r.x1
		index[tenantName{r.tenant, r.name}] = i
	}
	var rows []T
	if err := db.SelectPrepared(ctx, &rows, k.sql.createWithNewLock, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6]); err != nil {
		return nil, err
	}
	out := make([]createdRow[T], len(in))
	for _, row := range rows {
		f := row.fields()
		if i, ok := index[tenantName{f.tenantID, f.name}]; ok {
			out[i] = createdRow[T]{row: row, ok: true}
		}
	}
	return out, nil
}

// getReferenced returns the tenant's row id of kind k.
func getReferenced[T row](ctx context.Context, q database.Querier, k *refs, tenantID, id string) (T, error) {
	var r T
	if !validID(id) {
		return r, k.notFound(id)
	}
	err := q.GetContext(ctx, &r, k.sql.get, id, tenantID)
	if database.IsNoRows(err) {
		var zero T
		return zero, k.notFound(id)
	}
	return r, database.MapError(err)
}

// listReferenced returns one page of the tenant's rows of kind k in creation
// order and the token of the next page ("" after the last).
func listReferenced[T row](ctx context.Context, q database.Querier, k *refs, tenantID string, pageSize int, pageToken string) ([]T, string, error) {
	after, err := pagetoken.DecodeTimeID(k.pageKind, tenantID, pageToken)
	if err != nil {
		return nil, "", err
	}
	out := []T{}
	err = q.SelectContext(ctx, &out, k.sql.list, tenantID, after.CreatedAt, after.ID, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	var next string
	if len(out) > pageSize {
		out = out[:pageSize]
		last := out[len(out)-1].fields()
		next = pagetoken.Encode(k.pageKind, tenantID, pagetoken.TimeID{CreatedAt: last.createdAt, ID: last.id})
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
	key, stored, err := k.validate(ctx, c)
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
		if err := tx.GetContext(ctx, &cur, k.sql.locked, id); err != nil {
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
		err := tx.GetContext(ctx, &r, k.sql.update,
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
	err := tx.GetContext(ctx, &got, k.sql.lockRow, id, tenantID)
	if database.IsNoRows(err) {
		return k.notFound(id)
	}
	return database.MapError(err)
}

// moveReference points row id's reference at newLock (creating the
// reference if it was missing) and releases oldLock if nothing else uses it.
// The caller holds the row lock and FOR KEY SHARE on newLock (from Acquire).
func moveReference(ctx context.Context, tx database.Tx, k *refs, id, oldLock, newLock string) error {
	_, err := tx.ExecContext(ctx, k.sql.setRef, id, newLock)
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
		err := tx.SelectContext(ctx, &lockIDs, k.sql.delete, id)
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
