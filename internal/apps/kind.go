package apps

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
)

// kind is all that tells Applications and Repository Credentials apart: a
// table, the reference table that ties a row to its lock, the kind's own
// columns and how they are checked. Everything else, the flow of each
// operation and the text of each statement, is one for both kinds: the
// statements are built from the kind by newKind, from the templates below.
type kind struct {
	noun     string // in not_found messages: "application"
	what     string // in already_exists messages: "an application"
	pageKind string // the page-token kind of the kind's lists
	// table is the kind's table; refTable, with the column refColumn
	// naming the row, holds the row's reference to its lock.
	table, refTable, refColumn string
	// own are the kind's own text columns, in the order of row.own().
	own []column
	// repoURL checks a repo_url and returns its key (under n) and the URL
	// to store.
	repoURL func(n *normalize.Normalizer, raw string) (normalize.Key, string, error)
	// ref is how events name a row of the kind (locks.RefApplication).
	ref locks.Ref
	sql statements
}

// column is one of a kind's own columns and its check.
type column struct {
	name     string
	validate func(string) error
}

// statements are a kind's SQL, built by newKind. Every one that returns rows
// returns the kind's columns and its lock_id (text, "" without a
// reference).
type statements struct {
	// get: $1 id, $2 tenant. locked: $1 id (the caller holds the row lock).
	get, locked string
	// list: $1 tenant, $2 and $3 the cursor (created_at, id), $4 limit.
	list string
	// create writes the row, its reference and its created event
	// (locks.RefCreatedCTE) in one statement, in the transaction that
	// acquired the lock: $1 tenant, $2 name, $3 repo_url, $4
	// normalized_url, then the own columns, then the lock.
	create string
	// createWithNewLock is the fast path of creates: for each row of its
	// input (arrays: keys, rule sets, tenants, shadow lists, rules
	// generations, names, repo_urls, then the own columns; see
	// locks.NewLocksCTE) whose URL nobody holds, one statement (so one implicit
	// transaction and one round trip for a whole batch of creates) creates
	// the lock (locks.NewLockRowsCTE), the row, the reference and the
	// lock's "acquired" event, which names the row
	// (locks.NewLocksEventCTE): no event row of the create's own. It
	// returns the rows it created; none, and writes nothing, for a URL
	// that is taken.
	createWithNewLock string
	// update writes every column an update can change: $1 id, $2 tenant,
	// $3 name, $4 repo_url, $5 normalized_url, then the own columns, then
	// the lock the row references afterwards.
	update string
	// lockRow takes the row lock: $1 id, $2 tenant, after ROW EXCLUSIVE on
	// the locks table (locks.HoldRulesCTE).
	lockRow string
	// setRef points row $1's reference at lock $2, creating it if missing.
	setRef string
	// delete deletes row $1 and its reference, returning the lock ids the
	// reference held with the row's name, key and tenant (deletedRow);
	// a row without a reference gets its deleted event here
	// (locks.RefDeletedUnreferencedCTE), the others from
	// locks.Service.ReleaseRef.
	delete string
}

// The templates of a kind's statements. In them {table}, {refTable} and
// {refColumn} are the kind's names; {own} lists its own columns, prefixed
// {a.own} and {input.own}; {own.params} are their parameters, {own.set}
// their assignments and {own.arrays} their input arrays; {lock} is the
// parameter after them.
const (
	rowColumns = `a.id, a.cluster_user_id, a.name, a.repo_url, a.normalized_url, {a.own}, a.created_at, a.updated_at`
	fromRow    = `FROM {table} a LEFT JOIN {refTable} r ON r.{refColumn} = a.id`

	getTemplate = `
	SELECT ` + rowColumns + `, coalesce(r.lock_id::text, '') AS lock_id
	` + fromRow + `
	WHERE a.id = $1 AND a.cluster_user_id = $2`
	lockedTemplate = `
	SELECT ` + rowColumns + `, coalesce(r.lock_id::text, '') AS lock_id
	` + fromRow + `
	WHERE a.id = $1`
	listTemplate = `
	SELECT ` + rowColumns + `, coalesce(r.lock_id::text, '') AS lock_id
	` + fromRow + `
	WHERE a.cluster_user_id = $1 AND (a.created_at, a.id) > ($2::timestamptz, $3::uuid)
	ORDER BY a.created_at, a.id
	LIMIT $4`
	createTemplate = `
	WITH a AS (
		INSERT INTO {table} (cluster_user_id, name, repo_url, normalized_url, {own})
		VALUES ($1, $2, $3, $4, {own.params})
		RETURNING *
	), ref AS (
		INSERT INTO {refTable} ({refColumn}, lock_id) SELECT a.id, {lock}::uuid FROM a
	), {refCreatedCTE}
	SELECT ` + rowColumns + `, {lock}::uuid::text AS lock_id FROM a`
	// The input CTE: one row per create. Keys are distinct, and so are
	// (tenant, name) pairs (newRowKeys).
	createWithNewLockTemplate = `
	WITH input AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::bigint[], $6::text[], $7::text[], {own.arrays})
			AS i(key, rules, tenant, shadows, gen, name, repo_url, {own})
	), ` + locks.NewLockRowsCTE + `, a AS (
		INSERT INTO {table} (cluster_user_id, name, repo_url, normalized_url, {own})
		SELECT input.tenant, input.name, input.repo_url, lock.git_repository_url, {input.own}
		FROM input JOIN lock ON lock.git_repository_url = input.key AND lock.cluster_user_id = input.tenant
		ORDER BY input.tenant, input.name
		RETURNING *
	), ref AS (
		INSERT INTO {refTable} ({refColumn}, lock_id)
		SELECT a.id, lock.id FROM a JOIN lock ON lock.git_repository_url = a.normalized_url AND lock.cluster_user_id = a.cluster_user_id
	), {newLocksEventCTE}
	SELECT ` + rowColumns + `, lock.id::text AS lock_id
	FROM a JOIN lock ON lock.git_repository_url = a.normalized_url AND lock.cluster_user_id = a.cluster_user_id`
	updateTemplate = `
	UPDATE {table} a
	SET name = $3, repo_url = $4, normalized_url = $5, {own.set}, updated_at = now()
	WHERE a.id = $1 AND a.cluster_user_id = $2
	RETURNING ` + rowColumns + `, {lock}::text AS lock_id`
	lockRowTemplate = `WITH ` + locks.HoldRulesCTE + `
	SELECT id FROM {table} WHERE id = $1 AND cluster_user_id = $2 FOR UPDATE`
	setRefTemplate = `
	INSERT INTO {refTable} ({refColumn}, lock_id) VALUES ($1, $2)
	ON CONFLICT ({refColumn}) DO UPDATE SET lock_id = EXCLUDED.lock_id`
	deleteTemplate = `
	WITH ref AS (DELETE FROM {refTable} WHERE {refColumn} = $1 RETURNING lock_id),
	gone AS (DELETE FROM {table} WHERE id = $1 RETURNING id, name, normalized_url, cluster_user_id),
	{refDeletedUnreferencedCTE}
	SELECT ref.lock_id::text AS lock_id, gone.name, gone.normalized_url, gone.cluster_user_id::text AS tenant
	FROM ref CROSS JOIN gone`
)

// newKind returns k with its statements built from the templates. The
// create and update statements number the own columns' parameters after
// the shared ones ($5... and $6...), and the lock after those.
func newKind(k kind) *kind {
	own := make([]string, len(k.own))
	for i, c := range k.own {
		own[i] = c.name
	}
	prefixed := func(p string) string { return p + strings.Join(own, ", "+p) }
	params := func(first int, f func(i int, col string) string) string {
		out := make([]string, len(own))
		for i, c := range own {
			out[i] = f(first+i, c)
		}
		return strings.Join(out, ", ")
	}
	dollar := func(i int, _ string) string { return fmt.Sprintf("$%d", i) }
	build := func(template string, lock int) string {
		template = strings.NewReplacer(
			"{refCreatedCTE}", locks.RefCreatedCTE(k.ref, "{lock}"),
			"{newLocksEventCTE}", locks.NewLocksEventCTE(k.ref),
			"{refDeletedUnreferencedCTE}", locks.RefDeletedUnreferencedCTE(k.ref),
		).Replace(template)
		return strings.NewReplacer(
			"{table}", k.table, "{refTable}", k.refTable, "{refColumn}", k.refColumn,
			"{own}", strings.Join(own, ", "), "{a.own}", prefixed("a."), "{input.own}", prefixed("input."),
			"{own.params}", params(5, dollar),
			"{own.set}", params(6, func(i int, c string) string { return fmt.Sprintf("%s = $%d", c, i) }),
			"{own.arrays}", params(8, func(i int, _ string) string { return fmt.Sprintf("$%d::text[]", i) }),
			"{lock}", fmt.Sprintf("$%d", lock),
		).Replace(template)
	}
	k.sql = statements{
		get:               build(getTemplate, 0),
		locked:            build(lockedTemplate, 0),
		list:              build(listTemplate, 0),
		create:            build(createTemplate, 5+len(own)),
		createWithNewLock: build(createWithNewLockTemplate, 0),
		update:            build(updateTemplate, 6+len(own)),
		lockRow:           build(lockRowTemplate, 0),
		setRef:            build(setRefTemplate, 0),
		delete:            build(deleteTemplate, 0),
	}
	return &k
}

func (k *kind) notFound(id string) error {
	return repolock.Errorf(repolock.ENotFound, "%s %s not found", k.noun, id)
}

// row is a kind's Go type.
type row interface {
	Application | RepositoryCredential
	fields() fields
}

// fields are what the shared code reads of a row: the columns both kinds
// have, and the values of the kind's own columns (kind.own).
type fields struct {
	id, tenantID                 string
	createdAt                    time.Time
	name, repoURL, normalizedURL string
	own                          []string
	lockID                       string
}

func (f fields) equal(g fields) bool {
	return f.id == g.id && f.tenantID == g.tenantID && f.createdAt.Equal(g.createdAt) &&
		f.name == g.name && f.repoURL == g.repoURL && f.normalizedURL == g.normalizedURL &&
		slices.Equal(f.own, g.own) && f.lockID == g.lockID
}

// change is the input of a create (every field set) or of an update (the
// fields that are not nil), with the raw repo_url; own holds the kind's
// own columns, as kind.own lists them.
type change struct {
	name, repoURL *string
	own           []*string
}

// validate checks the fields c sets, in order, and returns the key (under
// n, the deployment's rules) and the URL to store of its repo_url.
func (k *kind) validate(n *normalize.Normalizer, c change) (key normalize.Key, stored string, err error) {
	if c.name != nil {
		if err := ValidateName(*c.name); err != nil {
			return "", "", err
		}
	}
	if c.repoURL != nil {
		if key, stored, err = k.repoURL(n, *c.repoURL); err != nil {
			return "", "", err
		}
	}
	for i, v := range c.own {
		if v != nil {
			if err := k.own[i].validate(*v); err != nil {
				return "", "", err
			}
		}
	}
	return key, stored, nil
}

// acquire acquires the claim's repository for the tenant in tx. denied is
// the error to give the caller when the claim was refused (another
// tenant's lock or reservation: locks.Acquisition.DeniedError). The caller
// counts the decision (locks.Metrics.Claimed) once tx has committed.
func (s *Service) acquire(ctx context.Context, tx database.Tx, tenantID string, c locks.Claim) (acq locks.Acquisition, denied, err error) {
	acq, err = s.locks.AcquireTx(ctx, tx, tenantID, c)
	if err != nil {
		return locks.Acquisition{}, nil, err
	}
	return acq, acq.DeniedError(), nil
}

// mapWriteError maps the errors of writing a row; what is "an application"
// or "a repository credential".
func mapWriteError(err error, what, name string) error {
	if rerr := locks.MapRulesError(err); rerr != err {
		return rerr
	}
	if database.PQCode(err) == database.CodeUniqueViolation && strings.HasSuffix(database.Constraint(err), "_tenant_name_key") {
		return repolock.Wrap(repolock.EAlreadyExists, err, "%s named %q already exists", what, name)
	}
	if database.PQCode(err) == database.CodeForeignKeyViolation && strings.Contains(database.Constraint(err), "cluster_user_id") {
		return repolock.Wrap(repolock.ENotFound, err, "the user no longer exists")
	}
	return database.MapError(err)
}

// create creates a row of kind k of the tenant (c sets every field) and
// references the tenant's lock on its repository, acquiring it if needed.
//
// A URL nobody holds is acquired and the row written in a single prepared
// statement, through the kind's Batcher fast (concurrent creates share it).
// Otherwise (the tenant already owns the URL, another tenant does, or the
// fast path lost a race) one transaction acquires the lock with
// locks.Service.AcquireTx and writes the row and its reference. The whole
// runs under the keying rules in force (locks.Service.Keyed): again under
// the new ones if they change meanwhile.
func create[T row](ctx context.Context, s *Service, k *kind, fast *database.Batcher[newRow, createdRow[T]], tenantID string, c change) (T, error) {
	var (
		r   T
		acq locks.Acquisition
	)
	err := s.locks.Keyed(ctx, func(keying *locks.Keying) error {
		var err error
		r, acq, err = createKeyed(ctx, s, k, fast, keying, tenantID, c)
		return err
	})
	// Counted once the claim's transaction committed (or the fast path's
	// statement did): a retry under new rules counts once.
	switch {
	case err == nil, acq.Owner != "":
		s.locks.Metrics().Claimed(acq)
	case repolock.IsCode(err, repolock.EInvalid):
		s.locks.Metrics().Invalid()
	}
	return r, err
}

// createKeyed is create under keying. Its Acquisition is the claim's
// decision: Owner set when it was denied (with the error to give), Acquired
// when the row was written.
func createKeyed[T row](ctx context.Context, s *Service, k *kind, fast *database.Batcher[newRow, createdRow[T]], keying *locks.Keying, tenantID string, c change) (T, locks.Acquisition, error) {
	var zero, r T
	var none locks.Acquisition
	key, stored, err := k.validate(keying.Current, c)
	if err != nil {
		return zero, none, err
	}
	claim, err := keying.Claim(*c.repoURL)
	if err != nil {
		return zero, none, err
	}
	own := make([]string, len(c.own))
	for i, v := range c.own {
		own[i] = *v
	}
	created, err := fast.Do(ctx, newRow{
		key: string(key), rules: locks.RuleSet(keying.Current), tenant: tenantID, shadows: claim.ShadowList(),
		gen: keying.Generation, name: *c.name, repoURL: stored, own: own,
	})
	if err != nil {
		return zero, none, mapWriteError(err, k.what, *c.name)
	}
	if created.ok {
		return created.row, locks.Acquisition{Key: key, Acquired: true, New: true}, nil
	}
	var (
		denied error
		acq    locks.Acquisition
	)
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		var err error
		acq, denied, err = s.acquire(ctx, tx, tenantID, claim)
		if err != nil {
			return err
		}
		if denied != nil {
			return nil // commit the denial event; nothing else was written
		}
		args := append([]any{tenantID, *c.name, stored, string(key)}, anys(own)...)
		err = tx.GetContext(ctx, &r, k.sql.create, append(args, acq.LockID)...)
		return mapWriteError(err, k.what, *c.name)
	})
	if err != nil {
		return zero, none, err
	}
	if denied != nil {
		return zero, acq, denied
	}
	return r, acq, nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// newRow is one create's row of createWithNewLock's input.
type newRow struct {
	key, rules, tenant, shadows, name, repoURL string
	gen                                        int64
	own                                        []string
}

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

// newCreateBatcher returns the Batcher of kind k's fast path: creates
// running at once share one statement (createWithNewLock) and one commit.
func newCreateBatcher[T row](db *database.DB, k *kind) *database.Batcher[newRow, createdRow[T]] {
	return database.NewBatcher(db, "apps.create."+strings.ReplaceAll(k.noun, " ", "_"), database.BatchConfig[newRow]{Keys: newRowKeys},
		func(ctx context.Context, in []newRow) ([]createdRow[T], error) {
			return createBatch[T](ctx, db, k, in)
		})
}

// createBatch runs createWithNewLock's statement for a batch of creates
// and matches its rows to them by (tenant, name), unique in a batch.
func createBatch[T row](ctx context.Context, db *database.DB, k *kind, in []newRow) ([]createdRow[T], error) {
	// Columns: key, rules, tenant, shadows, (gens apart), name, repo_url,
	// then the own columns.
	cols := make([]pq.StringArray, 6+len(k.own))
	for i := range cols {
		cols[i] = make(pq.StringArray, len(in))
	}
	gens := make(pq.Int64Array, len(in))
	type tenantName struct{ tenant, name string }
	index := make(map[tenantName]int, len(in))
	for i, r := range in {
		cols[0][i], cols[1][i], cols[2][i], cols[3][i], cols[4][i], cols[5][i] = r.key, r.rules, r.tenant, r.shadows, r.name, r.repoURL
		gens[i] = r.gen
		for j, v := range r.own {
			cols[6+j][i] = v
		}
		index[tenantName{r.tenant, r.name}] = i
	}
	args := []any{cols[0], cols[1], cols[2], cols[3], gens}
	for _, c := range cols[4:] {
		args = append(args, c)
	}
	var rows []T
	if err := db.SelectPrepared(ctx, &rows, k.sql.createWithNewLock, args...); err != nil {
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

// get returns the tenant's row id of kind k.
func get[T row](ctx context.Context, s *Service, k *kind, tenantID, id string) (T, error) {
	var r T
	if !validID(id) {
		return r, k.notFound(id)
	}
	err := s.db.GetContext(ctx, &r, k.sql.get, id, tenantID)
	if database.IsNoRows(err) {
		var zero T
		return zero, k.notFound(id)
	}
	return r, database.MapError(err)
}

// list returns one page of the tenant's rows of kind k in creation order
// and the token of the next page ("" after the last).
func list[T row](ctx context.Context, s *Service, k *kind, tenantID string, pageSize int, pageToken string) ([]T, string, error) {
	if pageSize < 1 {
		return nil, "", repolock.Errorf(repolock.EInvalid, "page_size must be positive")
	}
	after, err := pagetoken.DecodeTimeID(k.pageKind, tenantID, pageToken)
	if err != nil {
		return nil, "", err
	}
	out := []T{}
	err = s.db.SelectContext(ctx, &out, k.sql.list, tenantID, after.CreatedAt, after.ID, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	out, next := pagetoken.Trim(out, pageSize, func(last T) string {
		f := last.fields()
		return pagetoken.Encode(k.pageKind, tenantID, pagetoken.TimeID{CreatedAt: f.createdAt, ID: f.id})
	})
	return out, next, nil
}

// update changes the fields c sets of the tenant's row id of kind k. A new
// repo_url on another repository moves the row to the tenant's lock on it
// (acquiring it, or failing with repository_claimed) and releases the old
// lock if nothing else references it. A change that changes nothing
// returns the row unchanged.
func update[T row](ctx context.Context, s *Service, k *kind, tenantID, id string, c change) (T, error) {
	var (
		r   T
		out updated
	)
	err := s.locks.Keyed(ctx, func(keying *locks.Keying) error {
		var err error
		r, out, err = updateKeyed[T](ctx, s, k, keying, tenantID, id, c)
		return err
	})
	// Counted once the transaction committed.
	m := s.locks.Metrics()
	switch {
	case out.claimed && (err == nil || out.acq.Owner != ""):
		m.Claimed(out.acq)
	case c.repoURL != nil && repolock.IsCode(err, repolock.EInvalid):
		m.Invalid()
	}
	if err == nil && out.released {
		m.Released(1)
	}
	return r, err
}

// updated is what an update decided about locks: whether it claimed a
// repository (and the claim's outcome) and released the old lock.
type updated struct {
	claimed, released bool
	acq               locks.Acquisition
}

func updateKeyed[T row](ctx context.Context, s *Service, k *kind, keying *locks.Keying, tenantID, id string, c change) (T, updated, error) {
	var zero T
	if !validID(id) {
		return zero, updated{}, k.notFound(id)
	}
	key, stored, err := k.validate(keying.Current, c)
	if err != nil {
		return zero, updated{}, err
	}
	var (
		r      T
		denied error
		out    updated
	)
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		denied, out = nil, updated{}
		// Lock the row and then, in a new statement (so with a snapshot
		// taken after any concurrent change to it committed), read it with
		// its reference. Every change to a row's reference happens under
		// this row lock.
		if err := s.lockRow(ctx, tx, k, tenantID, id); err != nil {
			return err
		}
		var cur T
		if err := tx.GetContext(ctx, &cur, k.sql.locked, id); err != nil {
			return database.MapError(err)
		}
		was := cur.fields()
		next := was
		next.own = slices.Clone(was.own)
		setIf(&next.name, c.name)
		for i, v := range c.own {
			setIf(&next.own[i], v)
		}
		if c.repoURL != nil {
			next.repoURL, next.normalizedURL = stored, string(key)
		}
		if next.equal(was) {
			r = cur
			return nil
		}
		if next.normalizedURL != was.normalizedURL {
			claim, err := keying.Claim(*c.repoURL)
			if err != nil {
				return err
			}
			acq, deny, err := s.acquire(ctx, tx, tenantID, claim)
			if err != nil {
				return err
			}
			out.claimed, out.acq = true, acq
			if denied = deny; denied != nil {
				return nil // commit the denial event; nothing else was written
			}
			next.lockID = acq.LockID
		} else if next.repoURL != was.repoURL {
			// Another spelling of the same key: no claim, but the key is
			// this replica's, so the rules it keyed under must still be
			// the stored ones (re-keying relies on every reference written
			// being on its own key under the rules in force).
			if err := s.locks.GuardRules(ctx, tx, keying.Generation); err != nil {
				return err
			}
		}
		args := append([]any{id, tenantID, next.name, next.repoURL, next.normalizedURL}, anys(next.own)...)
		if err := tx.GetContext(ctx, &r, k.sql.update, append(args, next.lockID)...); err != nil {
			return mapWriteError(err, k.what, next.name)
		}
		if next.lockID != was.lockID {
			out.released, err = s.moveReference(ctx, tx, k, id, was.lockID, next.lockID)
			return err
		}
		return nil
	})
	if err != nil {
		return zero, out, err
	}
	if denied != nil {
		return zero, out, denied
	}
	return r, out, nil
}

func setIf(dst *string, v *string) {
	if v != nil {
		*dst = *v
	}
}

// lockRow takes the row lock of the tenant's row id, or answers not found.
func (s *Service) lockRow(ctx context.Context, tx database.Tx, k *kind, tenantID, id string) error {
	var got string
	err := tx.GetContext(ctx, &got, k.sql.lockRow, id, tenantID)
	if database.IsNoRows(err) {
		return k.notFound(id)
	}
	return database.MapError(err)
}

// moveReference points row id's reference at newLock (creating the
// reference if it was missing) and releases oldLock if nothing else uses it.
// The caller holds the row lock and FOR KEY SHARE on newLock (from
// AcquireTx).
func (s *Service) moveReference(ctx context.Context, tx database.Tx, k *kind, id, oldLock, newLock string) (released bool, err error) {
	_, err = tx.ExecContext(ctx, k.sql.setRef, id, newLock)
	if err != nil {
		return false, database.MapError(err)
	}
	if oldLock == "" {
		return false, nil
	}
	return s.locks.Release(ctx, tx, oldLock)
}

// deletedRow is a row of a kind's delete statement.
type deletedRow struct {
	LockID   string `db:"lock_id"`
	Name     string `db:"name"`
	Key      string `db:"normalized_url"`
	TenantID string `db:"tenant"`
}

// remove deletes the tenant's row id and its reference, and releases the
// lock if that was its last reference, in one transaction. The row lock is
// taken first, so the reference read afterwards is the current one even if
// a concurrent update just moved it.
func (s *Service) remove(ctx context.Context, k *kind, tenantID, id string) error {
	if !validID(id) {
		return k.notFound(id)
	}
	var released int64
	err := s.db.WithTx(ctx, func(tx database.Tx) error {
		released = 0
		if err := s.lockRow(ctx, tx, k, tenantID, id); err != nil {
			return err
		}
		var refs []deletedRow
		err := tx.SelectContext(ctx, &refs, k.sql.delete, id)
		if err != nil {
			return database.MapError(err)
		}
		for _, r := range refs {
			d := locks.Deleted{ID: id, Name: r.Name, TenantID: r.TenantID, Key: r.Key}
			ok, err := s.locks.ReleaseRef(ctx, tx, r.LockID, k.ref, d)
			if err != nil {
				return err
			}
			if ok {
				released++
			}
		}
		return nil
	})
	if err == nil {
		s.locks.Metrics().Released(released)
	}
	return err
}
