// Package locks implements ownership locks (design 002): a normalized Git
// repository URL belongs to at most one tenant at a time. The lock is a row of
// RepositoryLockOwner, unique on git_repository_url; Applications and
// Repository Credentials hold reference rows to it (RepositoryLockApplication,
// RepositoryLockRepositoryCredential), and the lock is deleted by Release when
// its last reference is gone.
//
// Concurrency, under READ COMMITTED:
//
//   - Acquire (and AcquireTx) creates a lock with a single
//     INSERT ... ON CONFLICT DO NOTHING, so two tenants racing for a new URL
//     are decided by the unique index, never by a SELECT-then-INSERT window.
//   - When the caller already owns the URL, Acquire takes FOR KEY SHARE on the
//     lock row. That is the lock the foreign-key check of the caller's
//     reference insert takes anyway, taken earlier: from that moment until the
//     caller's transaction ends, the lock row cannot be deleted.
//   - Release takes FOR UPDATE on the lock row first (waiting for every
//     transaction that holds FOR KEY SHARE, that is, every acquirer about to
//     write a reference) and only then, in a new statement with a new
//     snapshot, deletes the row if nothing references it. An acquirer that
//     comes after a committed Release finds no row, loops and creates a fresh
//     lock.
//
// The foreign keys from the reference tables (ON DELETE NO ACTION) are the
// backstop: whatever the code does, a referenced lock cannot be deleted.
//
// GC candidates (migration 000013): every lock that nothing references has
// gc_candidate = true, so that the global GC (internal/gc) reads only those
// rows. A lock is inserted as a candidate (the bare acquire's insert, and
// the column's default) unless the same statement writes its reference
// (NewLocksCTE); a transaction that removes a reference flags the lock in
// the reference tables' triggers, after taking FOR NO KEY UPDATE on it; and
// only the GC clears the flag (ClearCandidates), holding a row lock that
// conflicts with the trigger's and taken with SKIP LOCKED, on a lock it
// sees referenced. So a removal either holds the row first (the GC skips
// the lock), or committed first (the GC sees no reference and keeps the
// flag), or waits for the GC's commit and then flags the lock again with a
// new statement. None of these row locks conflicts with the FOR KEY SHARE
// of this protocol: acquiring and writing a reference never wait for them.
// The full argument is in the package doc of internal/gc ("Candidates").
package locks

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
)

// Lock is a tenant's ownership lock on a normalized repository URL, with the
// number of Applications and Repository Credentials that reference it.
type Lock struct {
	ID                    string        `db:"id" json:"id"`
	NormalizedURL         normalize.Key `db:"git_repository_url" json:"normalized_url"`
	NormalizerVersion     int           `db:"normalizer_version" json:"normalizer_version"`
	OwnerID               string        `db:"cluster_user_id" json:"-"`
	Applications          int           `db:"applications" json:"applications"`
	RepositoryCredentials int           `db:"repository_credentials" json:"repository_credentials"`
	CreatedAt             time.Time     `db:"created_at" json:"created_at"`
}

// Event names recorded in repository_lock_events. Every statement that
// records an event lives in this package and spells the name with these
// constants.
const (
	EventAcquired  = "acquired"  // a tenant created a lock
	EventDenied    = "denied"    // a tenant asked for a URL another tenant owns
	EventReleased  = "released"  // a lock lost its last reference (or its tenant was deleted)
	EventCollected = "collected" // the global GC deleted an unreferenced lock
	EventRekeyed   = "rekeyed"   // re-keying moved references of an older lock (rekeyed_from) to this one
)

// eventColumns are the columns every event insert fills.
const eventColumns = `repository_lock_events
	(event, lock_id, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name)`

// maxAcquireAttempts bounds Acquire's loop. Each extra round is caused by a
// lock that was deleted between two of Acquire's statements; needing more
// than a handful means the lock is changing hands continuously.
const maxAcquireAttempts = 16

// ClaimedError is the error a caller denied a URL gets: code
// repository_claimed (HTTP 409), and the owner's name in the message and in
// Details["owner"].
func ClaimedError(owner string) error {
	return &repolock.Error{
		Code:    repolock.ERepositoryClaimed,
		Message: "a repository URL is already claimed by another user: " + owner,
		Details: map[string]any{"owner": owner},
	}
}

// ValidateKeyWith checks that key is canonical under n's rules (with its
// configured aliases): n.RepoURL(key) == key.
func ValidateKeyWith(n *normalize.Normalizer, key normalize.Key) error {
	k, err := n.RepoURL(string(key))
	if err != nil {
		return err
	}
	if k != key {
		return repolock.Errorf(repolock.EInvalid, "lock key is not a normalized repository URL (normalized form: %s)", k)
	}
	return nil
}

func validateTenantID(id string) error {
	if id == "" {
		return repolock.Errorf(repolock.EInvalid, "acquiring user is empty")
	}
	if _, err := uuid.Parse(id); err != nil {
		return repolock.Errorf(repolock.EInvalid, "acquiring user is not a user id")
	}
	return nil
}

// NewLocksCTE creates locks and their "acquired" events, as common table
// expressions named rules_guard, lock and lock_event, for the rows of a CTE
// named input with the columns key (the claim's key), rules (the rule set
// the lock stores: Claim's, the rules version), tenant (the acquiring
// user's id, uuid), shadows (the claim's shadow keys, '\n'-separated, ”
// for none) and gen (the claim's rules generation, bigint). Every key of
// input must be distinct: a key already held (by anyone, or by an earlier
// row of input) gets no lock row, and neither does a key one of whose
// shadow keys another tenant holds, nor a key under another tenant's
// reservation (the longest reserved prefix among the key's ancestors
// decides; the claim is denied). A lock the
// claimant holds on a shadow key does not stop it: the claimant gets a lock
// on the current key as well (one tenant, two keys of one repository), and
// re-keying later moves the old lock's references to it. So a claim never
// joins a lock on another key than its own, and every reference written
// under the current rules is on its own key under them: what lets
// re-keying check a lock without taking it (internal/rekey). rules_guard
// raises RL001 when a row's generation is not the stored one (Keying).
//
// It is for the statements that create a lock together with the row that
// references it (internal/apps): they start with "WITH input AS (...), " +
// NewLocksCTE and join lock, which has no row for a key not created. The
// locks are inserted with gc_candidate and unreferenced false (migration
// 000023 keeps unreferenced exact; its insert trigger corrects a lock left
// without a reference): they are referenced by the time the statement ends (a statement that did not write the reference
// would leave garbage the GC never scans; use the bare acquire's
// bareLocksCTE for a lock without a reference). They are inserted in key
// order, so that two such statements running at once wait for each other's
// keys in one order and never deadlock on them.
const NewLocksCTE = NewLockRowsCTE + `, ` + lockEventCTE

// NewLockRowsCTE is NewLocksCTE without the events: rules_guard and lock
// only. A statement that uses it records the "acquired" events of the
// locks with NewLocksEventCTE, after the CTE that writes the rows
// referencing them, so that each lock's event names its row
// (internal/apps' creates).
const NewLockRowsCTE = rulesGuardCTE + `, lock AS (` + insertLocksHead + `false, false` + insertLocksTail + `)`

// bareLocksCTE is NewLocksCTE for locks that nothing references yet (the
// bare acquire, and every other Acquire that creates a lock before its
// caller writes the reference): gc_candidate true, so the GC's candidate
// scan finds it if the reference never comes. The caller that does write
// one leaves a referenced candidate, whose flag the next GC run clears.
const bareLocksCTE = rulesGuardCTE + `, lock AS (` + insertLocksHead + `true, true` + insertLocksTail + `), ` + lockEventCTE

// rulesGuardCTE checks the rules generation of input once per statement:
// the lowest and the highest of its rows (a batch may mix claims keyed
// before and after a reload; then one of them is stale and it raises).
const rulesGuardCTE = `rules_guard AS (
	SELECT repolock_rules_guard(min(input.gen)) AND repolock_rules_guard(max(input.gen)) AS ok FROM input
)`

const (
	insertLocksHead = `
	INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, normalizer_rules, cluster_user_id, gc_candidate, unreferenced)
	SELECT input.key, split_part(input.rules, ':', 1)::integer, split_part(input.rules, ':', 2), input.tenant, `
	insertLocksTail = `
	FROM input CROSS JOIN rules_guard
	WHERE rules_guard.ok AND (input.shadows = '' OR NOT EXISTS (
		SELECT 1 FROM RepositoryLockOwner s
		WHERE s.git_repository_url = ANY (string_to_array(input.shadows, E'\n')) AND s.cluster_user_id <> input.tenant))
	AND NOT EXISTS (
		SELECT 1 FROM (
			SELECT r.cluster_user_id FROM reservations r
			WHERE r.prefix = ANY (ARRAY(
				SELECT array_to_string((string_to_array(input.key, '/'))[1:i], '/')
				FROM generate_series(1, cardinality(string_to_array(input.key, '/'))) i))
			ORDER BY length(r.prefix) DESC
			LIMIT 1) res
		WHERE res.cluster_user_id <> input.tenant)
	ORDER BY input.key
	ON CONFLICT (git_repository_url) DO NOTHING
	RETURNING id, git_repository_url, cluster_user_id
`
)

// lockEventCTE records the "acquired" event of each lock the CTE named lock
// created. The tenant's name is looked up once per lock by primary key (a
// lateral subquery that OFFSET 0 keeps the planner from turning into a
// join): as a join, a batch's plan hashed the whole tenant table, a cost
// that grows with the number of tenants, not with the batch.
const lockEventCTE = `lock_event AS (
	INSERT INTO ` + eventColumns + `
	SELECT '` + EventAcquired + `', lock.id, lock.git_repository_url, lock.cluster_user_id, u.name, lock.cluster_user_id, u.name
	FROM lock CROSS JOIN LATERAL (SELECT u.name FROM cluster_users u WHERE u.id = lock.cluster_user_id OFFSET 0) u
)`

// insertLocksSQL is the common case of an acquire: create each lock (a GC
// candidate until referenced) and its "acquired" event, or nothing for a
// key that is taken. One statement for a whole batch of acquires (arrays
// $1 keys, $2 rule sets, $3 tenants, $4 shadow lists, $5 generations; keys
// distinct); it returns the locks it created.
const insertLocksSQL = `WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::bigint[]) AS i(key, rules, tenant, shadows, gen)
), ` + bareLocksCTE + `
SELECT lock.git_repository_url AS key, lock.id, lock.cluster_user_id AS tenant FROM lock`

// newLock is one acquire's row of insertLocksSQL.
type newLock struct {
	key, rules, tenant, shadows string
	gen                         int64
}

// insertLocks runs insertLocksSQL through q for the locks in (keys distinct) and
// returns the id of each lock it created, "" for a key that was taken.
func insertLocks(ctx context.Context, q runner, in []newLock) ([]string, error) {
	keys := make(pq.StringArray, len(in))
	rules := make(pq.StringArray, len(in))
	tenants := make(pq.StringArray, len(in))
	shadows := make(pq.StringArray, len(in))
	gens := make(pq.Int64Array, len(in))
	type keyTenant struct{ key, tenant string }
	index := make(map[keyTenant]int, len(in))
	for i, l := range in {
		keys[i], rules[i], tenants[i], shadows[i], gens[i] = l.key, l.rules, l.tenant, l.shadows, l.gen
		index[keyTenant{l.key, l.tenant}] = i
	}
	var created []newLockRow
	if err := q.selectRows(ctx, &created, insertLocksSQL, keys, rules, tenants, shadows, gens); err != nil {
		return nil, err
	}
	ids := make([]string, len(in))
	for _, c := range created {
		if i, ok := index[keyTenant{c.Key, c.Tenant}]; ok {
			ids[i] = c.ID
		}
	}
	return ids, nil
}

// newLockRow is a row insertLocksSQL returns.
type newLockRow struct {
	Key    string `db:"key"`
	ID     string `db:"id"`
	Tenant string `db:"tenant"`
}

// ownLockSQL finds the caller's own lock on a claim's key ($1; never on a
// shadow key: see NewLocksCTE) and takes FOR KEY SHARE on it, so that it
// cannot be released before the caller's transaction ends. A row being
// deleted by a concurrent Release is waited for and then skipped.
const ownLockSQL = `
SELECT id FROM RepositoryLockOwner
WHERE git_repository_url = $1 AND cluster_user_id = $2
FOR KEY SHARE`

// DenialWindow is the window repeated denials coalesce in: the denials of
// one tenant for one URL within one window (aligned to the Unix epoch) are
// one "denied" row whose count grows, so a tenant retrying in a loop writes
// one row per window, not one per request.
const DenialWindow = time.Hour

// deniedSQL finds why a claim was refused and records the denial on the
// claim's key ($4), in one round trip: another tenant's lock on the
// claim's keys ($1: the key, then its shadow keys; the first found in that
// order; reason "claimed"), or else the reservation that covers the key
// (the longest of its ancestors' prefixes, as the lock-creating statement
// looks it up) when it is another tenant's (reason "reserved", with the
// reservation's prefix). The first denial of the window inserts the row,
// the next ones count on it (INSERT ... ON CONFLICT on the unique index of
// (tenant, URL, window), so concurrent denials cannot insert twice; the
// row keeps the reason of the window's first denial). No row: neither (a
// lock being released right now, or the claimant's own reservation).
const deniedSQL = `
WITH owner AS (
	SELECT o.id, o.cluster_user_id, u.name
	FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
	WHERE o.git_repository_url = ANY ($1::text[]) AND o.cluster_user_id <> $2
	ORDER BY array_position($1::text[], o.git_repository_url)
	LIMIT 1
), reserved AS (
	SELECT r.prefix, r.cluster_user_id
	FROM reservations r
	WHERE NOT EXISTS (SELECT 1 FROM owner) AND r.prefix = ANY (ARRAY(
		SELECT array_to_string((string_to_array($4::text, '/'))[1:i], '/')
		FROM generate_series(1, cardinality(string_to_array($4::text, '/'))) i))
	ORDER BY length(r.prefix) DESC
	LIMIT 1
), denier AS (
	SELECT owner.id AS lock_id, owner.cluster_user_id, owner.name, '` + reasonClaimed + `' AS reason, NULL::text AS prefix FROM owner
	UNION ALL
	SELECT NULL::uuid, reserved.cluster_user_id, u.name, '` + reasonReserved + `', reserved.prefix
	FROM reserved JOIN cluster_users u ON u.id = reserved.cluster_user_id
	WHERE reserved.cluster_user_id <> $2
), event AS (
	INSERT INTO repository_lock_events AS e
		(event, lock_id, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name, denial_window, reason, reserved_prefix)
	SELECT '` + EventDenied + `', denier.lock_id, $4, $2, (SELECT name FROM cluster_users WHERE id = $2), denier.cluster_user_id, denier.name,
		date_bin(make_interval(secs => $3), now(), timestamptz '1970-01-01 00:00:00+00'), denier.reason, denier.prefix
	FROM denier
	ON CONFLICT (cluster_user_id, git_repository_url, denial_window) WHERE event = '` + EventDenied + `' AND denial_window IS NOT NULL
	DO UPDATE SET count = e.count + 1, last_at = now()
)
SELECT name, reason, coalesce(prefix, '') AS prefix FROM denier`

// Denial reasons, in repository_lock_events.reason.
const (
	reasonClaimed  = "claimed"  // another tenant holds the lock
	reasonReserved = "reserved" // the key is under another tenant's reservation
)

// denial is a row of deniedSQL.
type denial struct {
	Name   string `db:"name"`
	Reason string `db:"reason"`
	Prefix string `db:"prefix"`
}

// Acquisition is the outcome of Acquire.
type Acquisition struct {
	// Key is the claim's key under the rules it was decided under.
	Key normalize.Key
	// LockID is the lock the caller now holds on Key ("" when not
	// Acquired).
	LockID string
	// Acquired is false when another tenant owns the URL.
	Acquired bool
	// New is true when the claim created the lock, false when the caller
	// already owned it (or was refused).
	New bool
	// Owner is the owning tenant's name when not Acquired: the lock's
	// owner, or the reserving tenant when ReservedPrefix is set.
	Owner string
	// ReservedPrefix is the prefix of the reservation that refused the
	// claim ("" when the claim was refused by a lock, or Acquired).
	ReservedPrefix string
}

// DeniedError is the error a caller of a refused claim gets:
// ReservedError when a reservation refused it, ClaimedError otherwise;
// nil when Acquired.
func (a Acquisition) DeniedError() error {
	switch {
	case a.Acquired:
		return nil
	case a.ReservedPrefix != "":
		return ReservedError(a.Owner, a.ReservedPrefix)
	default:
		return ClaimedError(a.Owner)
	}
}

// ReservedError is the error a claim under another tenant's reservation
// gets: code repository_reserved (HTTP 409), the reserving tenant and the
// reservation's prefix in the message and in Details["tenant"],
// Details["prefix"].
func ReservedError(tenant, prefix string) error {
	return &repolock.Error{
		Code:    repolock.ERepositoryReserved,
		Message: "the repository URL is under " + prefix + ", reserved for another user: " + tenant,
		Details: map[string]any{"tenant": tenant, "prefix": prefix},
	}
}

// RuleSet is the rule set a lock keyed under n stores: its rules version
// ("3"). (Locks written before rules v3 may also carry the fingerprint of
// the alias set they were keyed under, "2:0123456789abcdef"; an alias
// change now re-keys the locks it moves in the transaction that applies
// it, so no lock is stale because of aliases.)
func RuleSet(n *normalize.Normalizer) string { return RuleSetVersion(n.Version()) }

// RuleSetVersion is RuleSet of a rules version.
func RuleSetVersion(v int) string { return strconv.Itoa(v) }

// Acquire claims the repository of the URL raw for the tenant whose id is
// tenantID, on the pool: it keys raw under the rules in force (Keyed: again
// under the new rules when they change meanwhile), and an acquire that
// finds the repository free runs as one autocommit statement, which
// concurrent acquires share (group commit).
//
//   - The repository is free: a lock is created (and an "acquired" event
//     recorded); it returns {Key, LockID: id, Acquired: true, New: true}.
//   - The caller already owns it: it returns {Key, LockID: existing id,
//     Acquired: true}.
//   - Another tenant owns it, under the current key or a shadow key: it
//     records a "denied" event and returns {Key, Owner: owner's name}.
//     ClaimedError(Owner) is the error to give the caller.
//
// An invalid URL is invalid_argument. Acquire is for a lock nothing is
// about to reference (the bare acquire of POST /v1/locks/acquire): a
// caller that writes a reference must call AcquireTx in the transaction
// that writes it.
func (s *Service) Acquire(ctx context.Context, tenantID, raw string) (_ Acquisition, err error) {
	defer repolock.WrapOp(&err, "locks.Acquire")
	var acq Acquisition
	err = s.Keyed(ctx, func(k *Keying) error {
		c, err := k.Claim(raw)
		if err != nil {
			return invalidURL(err)
		}
		acq, err = s.acquire(ctx, s.pool, tenantID, c)
		return err
	})
	// Autocommit: the decision is final here.
	switch {
	case err == nil:
		s.metrics.Claimed(acq)
	case repolock.IsCode(err, repolock.EInvalid):
		s.metrics.Invalid()
	}
	return acq, err
}

// invalidURL makes a normalizer's rejection an invalid_argument about
// repo_url; other errors pass.
func invalidURL(err error) error {
	var ne *normalize.Error
	if errors.As(err, &ne) {
		return repolock.Wrap(repolock.EInvalid, err, "repo_url: %s", repolock.ErrorMessage(err))
	}
	return err
}

// AcquireTx is Acquire of a claim keyed by the caller (Keying.Claim, in a
// Keyed function), inside the caller's transaction tx, with one more
// guarantee: when the caller already owns the repository it holds FOR KEY
// SHARE on the lock row until tx ends, so a concurrent Release cannot
// delete it before the caller has written its reference. The events are
// written through tx too; a caller that wants a denial audited must commit
// tx (internal/apps does). When the rules changed since c was keyed it
// returns ErrRulesChanged, and tx is aborted: the caller's Keyed function
// returns it, and runs again under the new rules.
func (s *Service) AcquireTx(ctx context.Context, tx database.Tx, tenantID string, c Claim) (_ Acquisition, err error) {
	defer repolock.WrapOp(&err, "locks.AcquireTx")
	return s.acquire(ctx, inTx{tx}, tenantID, c)
}

func (s *Service) acquire(ctx context.Context, q runner, tenantID string, c Claim) (Acquisition, error) {
	if err := validateTenantID(tenantID); err != nil {
		return Acquisition{}, err
	}
	if c.key == "" {
		return Acquisition{}, repolock.Errorf(repolock.EInternal, "acquire: a claim that Keying.Claim did not make")
	}
	keys := pq.StringArray(c.keys())
	for attempt := 0; attempt < maxAcquireAttempts; attempt++ {
		lockID, err := q.insertLock(ctx, newLock{key: string(c.key), rules: c.rules(), tenant: tenantID, shadows: c.ShadowList(), gen: c.gen})
		if err != nil {
			return Acquisition{}, mapAcquireError(err)
		}
		if lockID != "" {
			return Acquisition{Key: c.key, LockID: lockID, Acquired: true, New: true}, nil
		}
		// The URL is taken: by the caller, by someone else, or by a lock
		// being released right now (then both lookups miss and we go round).
		err = q.get(ctx, &lockID, ownLockSQL, string(c.key), tenantID)
		if err == nil {
			return Acquisition{Key: c.key, LockID: lockID, Acquired: true}, nil
		}
		if !database.IsNoRows(err) {
			return Acquisition{}, database.MapError(err)
		}
		var d denial
		err = q.get(ctx, &d, deniedSQL, keys, tenantID, DenialWindow.Seconds(), string(c.key))
		if err == nil {
			acq := Acquisition{Key: c.key, Owner: d.Name}
			if d.Reason == reasonReserved {
				acq.ReservedPrefix = d.Prefix
			}
			return acq, nil
		}
		if !database.IsNoRows(err) {
			return Acquisition{}, database.MapError(err)
		}
	}
	return Acquisition{}, repolock.Errorf(repolock.EConflict,
		"the lock on %s changed hands %d times while acquiring it; try again", c.key, maxAcquireAttempts)
}

func mapAcquireError(err error) error {
	if code := database.PQCode(err); code == codeRulesChanged || code == codeStaleVersion {
		return mapRulesError(err)
	}
	if database.PQCode(err) == database.CodeForeignKeyViolation {
		return repolock.Wrap(repolock.ENotFound, err, "acquiring user does not exist")
	}
	return database.MapError(err)
}

// lockForReleaseSQL waits for every transaction holding a row lock on the
// lock (acquirers about to write a reference hold FOR KEY SHARE) and blocks
// new ones until the releasing transaction ends.
const lockForReleaseSQL = `SELECT id FROM RepositoryLockOwner WHERE id = $1 FOR UPDATE`

// releaseSQL deletes the lock when nothing references it and records the
// "released" event, in one statement. Run after lockForReleaseSQL, it sees
// every reference committed by the transactions that lock waited for.
const releaseSQL = `
WITH gone AS (
	DELETE FROM RepositoryLockOwner o
	WHERE o.id = $1 AND ` + UnreferencedSQL + `
	  -- Issue 25: an open handover offer pins the lock (transfer.go).
	  AND ` + NotPinnedSQL + `
	RETURNING o.id, o.git_repository_url, o.cluster_user_id
), event AS (
	INSERT INTO ` + eventColumns + `
	SELECT '` + EventReleased + `', gone.id, gone.git_repository_url, gone.cluster_user_id, u.name, gone.cluster_user_id, u.name
	FROM gone LEFT JOIN cluster_users u ON u.id = gone.cluster_user_id
)
SELECT count(*) FROM gone`

// Release deletes the lock lockID if no Application and no Repository
// Credential references it, recording a "released" event, and reports
// whether it did. A lock that does not exist (already released) is not an
// error: it returns false.
//
// Call it in the transaction tx that removed the caller's reference
// (internal/apps does), after removing it. It is safe against a concurrent
// AcquireTx by the same tenant: either the acquirer's reference is committed
// first and the lock stays, or the lock is deleted first and the acquirer
// creates a fresh one. (The foreign keys are the backstop: they refuse to
// delete a referenced lock, which Release reports as false.)
func (s *Service) Release(ctx context.Context, tx database.Tx, lockID string) (released bool, err error) {
	defer repolock.WrapOp(&err, "locks.Release")
	if _, err := uuid.Parse(lockID); err != nil {
		return false, repolock.Errorf(repolock.EInvalid, "lock id is not valid")
	}
	var id string
	if err := tx.GetContext(ctx, &id, lockForReleaseSQL, lockID); err != nil {
		if database.IsNoRows(err) {
			return false, nil
		}
		return false, database.MapError(err)
	}
	var n int
	if err := tx.GetContext(ctx, &n, releaseSQL, lockID); err != nil {
		if database.PQCode(err) == database.CodeForeignKeyViolation {
			// A reference appeared between the two statements (the
			// caller's transaction does not hold the reference rows); the
			// foreign key refused the delete.
			return false, nil
		}
		return false, database.MapError(err)
	}
	return n == 1, nil
}

const lockColumns = `
	o.id, o.git_repository_url, o.normalizer_version, o.cluster_user_id, o.created_at,
	(SELECT count(*) FROM RepositoryLockApplication a WHERE a.lock_id = o.id) AS applications,
	(SELECT count(*) FROM RepositoryLockRepositoryCredential c WHERE c.lock_id = o.id) AS repository_credentials`

// Get returns the tenant's lock lockID. Another tenant's lock, or a malformed
// id, is not found.
func (s *Service) Get(ctx context.Context, tenantID, lockID string) (_ Lock, err error) {
	defer repolock.WrapOp(&err, "locks.Get")
	if _, err := uuid.Parse(lockID); err != nil {
		return Lock{}, repolock.Errorf(repolock.ENotFound, "lock %s not found", lockID)
	}
	var l Lock
	err = s.db.GetContext(ctx, &l, `SELECT `+lockColumns+`
		FROM RepositoryLockOwner o WHERE o.id = $1 AND o.cluster_user_id = $2`, lockID, tenantID)
	if database.IsNoRows(err) {
		return Lock{}, repolock.Errorf(repolock.ENotFound, "lock %s not found", lockID)
	}
	return l, database.MapError(err)
}

// List returns one page of the tenant's locks in creation order, and the
// token of the next page ("" after the last).
func (s *Service) List(ctx context.Context, tenantID string, pageSize int, pageToken string) (_ []Lock, _ string, err error) {
	defer repolock.WrapOp(&err, "locks.List")
	if pageSize < 1 {
		return nil, "", repolock.Errorf(repolock.EInvalid, "page_size must be positive")
	}
	after, err := pagetoken.DecodeTimeID(pagetoken.KindLocks, tenantID, pageToken)
	if err != nil {
		return nil, "", err
	}
	ls := []Lock{}
	err = s.db.SelectContext(ctx, &ls, `SELECT `+lockColumns+`
		FROM RepositoryLockOwner o
		WHERE o.cluster_user_id = $1 AND (o.created_at, o.id) > ($2::timestamptz, $3::uuid)
		ORDER BY o.created_at, o.id
		LIMIT $4`, tenantID, after.CreatedAt, after.ID, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	ls, next := pagetoken.Trim(ls, pageSize, func(last Lock) string {
		return pagetoken.Encode(pagetoken.KindLocks, tenantID, pagetoken.TimeID{CreatedAt: last.CreatedAt, ID: last.ID})
	})
	return ls, next, nil
}

// Owner is who holds a URL, as operators look it up.
type Owner struct {
	LockID            string        `db:"id" json:"lock_id"`
	NormalizedURL     normalize.Key `db:"git_repository_url" json:"normalized_url"`
	NormalizerVersion int           `db:"normalizer_version" json:"normalizer_version"`
	TenantID          string        `db:"cluster_user_id" json:"user_id"`
	TenantName        string        `db:"user_name" json:"user"`
	Applications      int           `db:"applications" json:"applications"`
	Credentials       int           `db:"repository_credentials" json:"repository_credentials"`
	CreatedAt         time.Time     `db:"created_at" json:"created_at"`
}

// OwnerOf returns the lock on a normalized URL and its owner, or not found
// when the URL is free. It is an operator's lookup: it names the owner
// whoever asks.
func (s *Service) OwnerOf(ctx context.Context, key normalize.Key) (_ Owner, err error) {
	defer repolock.WrapOp(&err, "locks.OwnerOf")
	if err := ValidateKeyWith(s.Rules(), key); err != nil {
		return Owner{}, err
	}
	var o Owner
	err = s.db.GetContext(ctx, &o, `SELECT `+lockColumns+`, u.name AS user_name
		FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
		WHERE o.git_repository_url = $1`, key)
	if database.IsNoRows(err) {
		return Owner{}, repolock.Errorf(repolock.ENotFound, "no lock on %s", key)
	}
	return o, database.MapError(err)
}
