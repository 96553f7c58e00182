package locks

// Transfers, handovers and the owner's view of denials (issue 25).
//
// A lock changes hands in place: one UPDATE of RepositoryLockOwner's
// cluster_user_id, in a transaction that first takes FOR UPDATE on the lock
// row. So the key is never unowned in between (the row never goes away) and
// never has two owners (one row, one column). FOR UPDATE waits for every
// transaction holding FOR KEY SHARE on the row, that is every acquirer of
// the old owner about to write a reference (AcquireTx, ownLockSQL), and
// blocks new ones until the change commits; an acquirer that waited then
// re-checks its "cluster_user_id = me" condition on the new row version,
// finds none, and is denied (deniedSQL names the new owner). So the old
// owner's references are all visible to the transfer's next statement:
// it refuses the transfer while they exist (lock_in_use, listing them), or
// deletes them in the same transaction.
//
// A handover offer (lock_handovers, one per lock) pins its lock: Release
// and the GC delete a lock only when it is unreferenced AND NotPinnedSQL
// holds. An offer is written under FOR UPDATE on the lock row, which
// Release and the GC also take before their delete statement, so a delete
// either committed first (the offer finds no lock) or runs after the offer
// committed and sees it. Expired offers are absent wherever they are read
// (expires_at > now() in every condition); the GC deletes them
// (DeleteExpiredHandovers), recording handover_expired. Every statement
// that locks both a lock and its offer locks the lock row first.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
)

// Event names of transfers and handovers. For all of them the event's
// cluster_user_* is the tenant the lock moves from, owner_user_* the tenant
// it moves (or was offered) to, and actor who acted.
const (
	EventTransferred       = "transferred"        // an admin moved the lock
	EventHandoverOffered   = "handover_offered"   // the owner offered the lock
	EventHandoverAccepted  = "handover_accepted"  // the recipient took the lock
	EventHandoverDeclined  = "handover_declined"  // the recipient refused the offer
	EventHandoverWithdrawn = "handover_withdrawn" // the owner withdrew the offer (or a transfer cancelled it)
	EventHandoverExpired   = "handover_expired"   // the GC deleted an offer past its expiry
)

// NotPinnedSQL is the condition, on a RepositoryLockOwner row aliased o,
// that no open (unexpired) handover offer pins the lock. Release and the
// GC's delete add it to UnreferencedSQL: a pinned lock stays, unreferenced
// and a GC candidate, until its offer ends.
const NotPinnedSQL = `NOT EXISTS (SELECT 1 FROM lock_handovers h WHERE h.lock_id = o.id AND h.expires_at > now())`

// MaxListedReferences bounds the references a lock_in_use error lists (it
// says how many there are in all).
const MaxListedReferences = 100

// MaxHandoverExpiry bounds expires_in of an offer.
const MaxHandoverExpiry = 30 * 24 * time.Hour

// DefaultHandoverExpiry is expires_in when an offer does not give one.
const DefaultHandoverExpiry = 72 * time.Hour

// Reference is an Application or Repository Credential on a lock.
type Reference struct {
	Kind string `db:"kind" json:"kind"` // application or credential
	ID   string `db:"id" json:"id"`
	Name string `db:"name" json:"name"`
}

// LockInUseError is the error of a transfer or handover refused because the
// old owner still has references on the lock: code lock_in_use (409), with
// Details["references"] (at most MaxListedReferences) and
// Details["reference_count"].
func LockInUseError(owner string, refs []Reference, total int) error {
	return &repolock.Error{
		Code: repolock.ELockInUse,
		Message: "the lock is still used by " + owner + ": delete its Applications and Credentials on it first" +
			" (or transfer with references \"delete\")",
		Details: map[string]any{"owner": owner, "references": refs, "reference_count": total},
	}
}

// referencesSQL lists the references of lock $1 (the first $2, by kind and
// name) and counts them all.
const referencesSQL = `
SELECT r.kind, r.id, r.name, count(*) OVER () AS total FROM (
	SELECT 'application' AS kind, a.id::text AS id, a.name
	FROM RepositoryLockApplication ra JOIN applications a ON a.id = ra.application_id
	WHERE ra.lock_id = $1
	UNION ALL
	SELECT 'credential', c.id::text, c.name
	FROM RepositoryLockRepositoryCredential rc JOIN repository_credentials c ON c.id = rc.repository_credential_id
	WHERE rc.lock_id = $1
) r
ORDER BY r.kind, r.name
LIMIT $2`

type referenceRow struct {
	Reference
	Total int `db:"total"`
}

func references(ctx context.Context, q database.Querier, lockID string, limit int) ([]Reference, int, error) {
	var rows []referenceRow
	if err := q.SelectContext(ctx, &rows, referencesSQL, lockID, limit); err != nil {
		return nil, 0, database.MapError(err)
	}
	refs := make([]Reference, len(rows))
	total := 0
	for i, r := range rows {
		refs[i], total = r.Reference, r.Total
	}
	return refs, total, nil
}

// deleteReferencesSQL deletes the Applications and Credentials on lock $1
// (their reference rows cascade; the reference tables' triggers flag the
// lock as a GC candidate) and returns them.
const deleteReferencesSQL = `
WITH apps AS (
	DELETE FROM applications a USING RepositoryLockApplication ra
	WHERE ra.application_id = a.id AND ra.lock_id = $1
	RETURNING 'application' AS kind, a.id::text AS id, a.name
), creds AS (
	DELETE FROM repository_credentials c USING RepositoryLockRepositoryCredential rc
	WHERE rc.repository_credential_id = c.id AND rc.lock_id = $1
	RETURNING 'credential' AS kind, c.id::text AS id, c.name
)
SELECT * FROM apps UNION ALL SELECT * FROM creds ORDER BY kind, name`

// lockedLock is a lock row read under FOR UPDATE, with its owner's name.
type lockedLock struct {
	ID        string        `db:"id"`
	Key       normalize.Key `db:"git_repository_url"`
	OwnerID   string        `db:"cluster_user_id"`
	OwnerName string        `db:"owner_name"`
}

// lockForChangeSQL takes FOR UPDATE on lock $1 (see the file comment).
const lockForChangeSQL = `
SELECT o.id, o.git_repository_url, o.cluster_user_id, u.name AS owner_name
FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE o.id = $1
FOR UPDATE OF o`

// moveLockSQL gives lock $1 to tenant $2. created_at restarts: the new
// owner gets the GC's grace period to reference the lock, like a fresh
// acquire (a lock moved without references is a GC candidate).
const moveLockSQL = `UPDATE RepositoryLockOwner SET cluster_user_id = $2, created_at = now() WHERE id = $1`

// transferEventSQL records a transfer or handover event: $1 event, $2 lock,
// $3 key, $4/$5 from (id, name), $6/$7 to (id, name), $8 actor, $9 details.
const transferEventSQL = `
INSERT INTO repository_lock_events
	(event, lock_id, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name, actor, details)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

func recordTransferEvent(ctx context.Context, q database.Querier, event string, l lockedLock, toID, toName, actor string, details any) error {
	var d []byte
	if details != nil {
		var err error
		if d, err = json.Marshal(details); err != nil {
			return repolock.Wrap(repolock.EInternal, err, "encode event details")
		}
	}
	_, err := q.ExecContext(ctx, transferEventSQL, event, l.ID, string(l.Key), l.OwnerID, l.OwnerName, toID, toName, actor, nullJSON(d))
	return database.MapError(err)
}

func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// tenantByName returns the id of the tenant named name (not_found
// otherwise).
func tenantByName(ctx context.Context, q database.Querier, name string) (string, error) {
	if name == "" {
		return "", repolock.Errorf(repolock.EInvalid, "to: the receiving user's name is required")
	}
	var id string
	err := q.GetContext(ctx, &id, `SELECT id FROM cluster_users WHERE name = $1`, name)
	if database.IsNoRows(err) {
		return "", repolock.Errorf(repolock.ENotFound, "user %q not found", name)
	}
	return id, database.MapError(err)
}

// AdminActor is the actor an admin transfer records: the admin token's
// identity, a fingerprint of the token (the first 12 hex digits of its
// SHA-256), never the token.
func AdminActor(adminToken string) string {
	sum := sha256.Sum256([]byte(adminToken))
	return "admin:" + hex.EncodeToString(sum[:])[:12]
}

// References policies of a transfer.
const (
	ReferencesRefuse = "refuse" // the default: 409 lock_in_use while the old owner has references
	ReferencesDelete = "delete" // delete them in the transfer's transaction
)

// TransferRequest is an admin transfer.
type TransferRequest struct {
	LockID string
	// To is the receiving tenant's name.
	To string
	// References is ReferencesRefuse ("" too) or ReferencesDelete.
	References string
	// Actor is the admin's identity (AdminActor), recorded in the event.
	Actor string
}

// Transfer is what a transfer did.
type Transfer struct {
	LockID            string        `json:"lock_id"`
	NormalizedURL     normalize.Key `json:"normalized_url"`
	From              string        `json:"from"`
	To                string        `json:"to"`
	DeletedReferences []Reference   `json:"deleted_references"`
	// CancelledHandover is the id of the open offer the transfer withdrew
	// ("" for none).
	CancelledHandover string `json:"cancelled_handover,omitempty"`
}

// Transfer moves lock req.LockID to tenant req.To, in one transaction: see
// the file comment. With ReferencesRefuse it fails with lock_in_use while
// the old owner has references; with ReferencesDelete it deletes them. An
// open handover offer of the lock is withdrawn (handover_withdrawn). It
// records a "transferred" event (old owner, new owner, actor, deleted
// references). A lock that does not exist is not_found; a transfer to the
// owner itself is invalid_argument.
func (s *Service) Transfer(ctx context.Context, req TransferRequest) (_ Transfer, err error) {
	defer repolock.WrapOp(&err, "locks.Transfer")
	if _, err := uuid.Parse(req.LockID); err != nil {
		return Transfer{}, repolock.Errorf(repolock.ENotFound, "lock %s not found", req.LockID)
	}
	switch req.References {
	case "":
		req.References = ReferencesRefuse
	case ReferencesRefuse, ReferencesDelete:
	default:
		return Transfer{}, repolock.Errorf(repolock.EInvalid, "references must be %q or %q", ReferencesRefuse, ReferencesDelete)
	}
	if req.Actor == "" {
		return Transfer{}, repolock.Errorf(repolock.EInternal, "transfer without an actor")
	}
	var out Transfer
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		toID, err := tenantByName(ctx, tx, req.To)
		if err != nil {
			return err
		}
		var l lockedLock
		if err := tx.GetContext(ctx, &l, lockForChangeSQL, req.LockID); err != nil {
			if database.IsNoRows(err) {
				return repolock.Errorf(repolock.ENotFound, "lock %s not found", req.LockID)
			}
			return database.MapError(err)
		}
		if l.OwnerID == toID {
			return repolock.Errorf(repolock.EInvalid, "to: %s already owns the lock", req.To)
		}
		out = Transfer{LockID: l.ID, NormalizedURL: l.Key, From: l.OwnerName, To: req.To, DeletedReferences: []Reference{}}
		if req.References == ReferencesRefuse {
			refs, total, err := references(ctx, tx, l.ID, MaxListedReferences)
			if err != nil {
				return err
			}
			if total > 0 {
				return LockInUseError(l.OwnerName, refs, total)
			}
		} else {
			if err := tx.SelectContext(ctx, &out.DeletedReferences, deleteReferencesSQL, l.ID); err != nil {
				return database.MapError(err)
			}
		}
		if err := expireHandovers(ctx, tx, `h.lock_id = $1`, l.ID); err != nil {
			return err
		}
		h, ok, err := deleteOpenHandover(ctx, tx, l.ID)
		if err != nil {
			return err
		}
		if ok {
			out.CancelledHandover = h.ID
			if err := recordTransferEvent(ctx, tx, EventHandoverWithdrawn, l, h.ToID, h.ToName, req.Actor,
				map[string]any{"handover_id": h.ID, "reason": "transferred"}); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, moveLockSQL, l.ID, toID); err != nil {
			return database.MapError(err)
		}
		return recordTransferEvent(ctx, tx, EventTransferred, l, toID, req.To, req.Actor,
			map[string]any{"deleted_references": out.DeletedReferences})
	})
	if err != nil {
		return Transfer{}, err
	}
	return out, nil
}

// Handover is an open offer of a lock from its owner to another tenant.
type Handover struct {
	ID            string        `db:"id" json:"id"`
	LockID        string        `db:"lock_id" json:"lock_id"`
	NormalizedURL normalize.Key `db:"git_repository_url" json:"normalized_url"`
	FromID        string        `db:"from_user_id" json:"-"`
	From          string        `db:"from_name" json:"from"`
	ToID          string        `db:"to_user_id" json:"-"`
	ToName        string        `db:"to_name" json:"to"`
	ExpiresAt     time.Time     `db:"expires_at" json:"expires_at"`
	CreatedAt     time.Time     `db:"created_at" json:"created_at"`
}

const handoverColumns = `h.id, h.lock_id, o.git_repository_url, h.from_user_id, f.name AS from_name,
	h.to_user_id, t.name AS to_name, h.expires_at, h.created_at`

const handoverFrom = `lock_handovers h
	JOIN RepositoryLockOwner o ON o.id = h.lock_id
	JOIN cluster_users f ON f.id = h.from_user_id
	JOIN cluster_users t ON t.id = h.to_user_id`

// deleteOpenHandover deletes lock lockID's offer, returning it when it
// was open. The caller holds FOR UPDATE on the lock and has expired the
// lock's expired offer first (expireHandovers, with its event).
func deleteOpenHandover(ctx context.Context, q database.Querier, lockID string) (Handover, bool, error) {
	var hs []Handover
	err := q.SelectContext(ctx, &hs, `
		WITH gone AS (DELETE FROM lock_handovers WHERE lock_id = $1 RETURNING *)
		SELECT h.id, h.lock_id, o.git_repository_url, h.from_user_id, f.name AS from_name,
			h.to_user_id, t.name AS to_name, h.expires_at, h.created_at
		FROM gone h
			JOIN RepositoryLockOwner o ON o.id = h.lock_id
			JOIN cluster_users f ON f.id = h.from_user_id
			JOIN cluster_users t ON t.id = h.to_user_id
		WHERE h.expires_at > now()`, lockID)
	if err != nil || len(hs) == 0 {
		return Handover{}, false, database.MapError(err)
	}
	return hs[0], true, nil
}

// OfferRequest is an owner's handover offer.
type OfferRequest struct {
	TenantID, TenantName string
	LockID               string
	// To is the recipient's name.
	To string
	// ExpiresIn is how long the offer stays open (DefaultHandoverExpiry
	// when 0; at most MaxHandoverExpiry).
	ExpiresIn time.Duration
}

// OfferHandover offers the tenant's lock to another tenant: the lock is
// pinned (see NotPinnedSQL) until the offer is accepted, declined,
// withdrawn or expires. A lock with an open offer already is
// handover_pending (409); another tenant's lock is not_found.
func (s *Service) OfferHandover(ctx context.Context, req OfferRequest) (_ Handover, err error) {
	defer repolock.WrapOp(&err, "locks.OfferHandover")
	if _, err := uuid.Parse(req.LockID); err != nil {
		return Handover{}, repolock.Errorf(repolock.ENotFound, "lock %s not found", req.LockID)
	}
	if req.ExpiresIn == 0 {
		req.ExpiresIn = DefaultHandoverExpiry
	}
	if req.ExpiresIn < time.Second || req.ExpiresIn > MaxHandoverExpiry {
		return Handover{}, repolock.Errorf(repolock.EInvalid, "expires_in must be from 1s to %s", MaxHandoverExpiry)
	}
	var h Handover
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		toID, err := tenantByName(ctx, tx, req.To)
		if err != nil {
			return err
		}
		var l lockedLock
		if err := tx.GetContext(ctx, &l, lockForChangeSQL, req.LockID); err != nil || l.OwnerID != req.TenantID {
			if err == nil || database.IsNoRows(err) {
				return repolock.Errorf(repolock.ENotFound, "lock %s not found", req.LockID)
			}
			return database.MapError(err)
		}
		if toID == req.TenantID {
			return repolock.Errorf(repolock.EInvalid, "to: a lock cannot be offered to its owner")
		}
		// An expired offer is absent: it goes, with its event, and
		// the new one takes its place.
		if err := expireHandovers(ctx, tx, `h.lock_id = $1`, l.ID); err != nil {
			return err
		}
		var open int
		if err := tx.GetContext(ctx, &open, `SELECT count(*) FROM lock_handovers WHERE lock_id = $1`, l.ID); err != nil {
			return database.MapError(err)
		}
		if open > 0 {
			return repolock.Errorf(repolock.EHandoverPending, "the lock already has an open handover offer; withdraw it first")
		}
		var id string
		if err := tx.GetContext(ctx, &id, `
			INSERT INTO lock_handovers (lock_id, from_user_id, to_user_id, expires_at)
			VALUES ($1, $2, $3, now() + make_interval(secs => $4)) RETURNING id`,
			l.ID, req.TenantID, toID, req.ExpiresIn.Seconds()); err != nil {
			return database.MapError(err)
		}
		if err := tx.GetContext(ctx, &h, `SELECT `+handoverColumns+` FROM `+handoverFrom+` WHERE h.id = $1`, id); err != nil {
			return database.MapError(err)
		}
		return recordTransferEvent(ctx, tx, EventHandoverOffered, l, toID, req.To, l.OwnerName,
			map[string]any{"handover_id": h.ID, "expires_at": h.ExpiresAt})
	})
	if err != nil {
		return Handover{}, err
	}
	return h, nil
}

// Directions of ListHandovers.
const (
	HandoversReceived = "received" // offers made to the tenant
	HandoversOffered  = "offered"  // offers the tenant made
	HandoversAll      = ""         // both
)

// HandoverFilter selects the open offers ListHandovers pages through.
type HandoverFilter struct {
	// TenantID is the tenant whose offers are listed; "" lists every
	// tenant's (an operator's view: GET /v1/admin/handovers).
	TenantID string
	// Direction is HandoversReceived, HandoversOffered or HandoversAll,
	// relative to TenantID (with no tenant, it must be HandoversAll).
	Direction string
}

// ListHandovers returns one page of the open offers f selects, oldest
// first (by created_at, id), and the token of the next page ("" after the
// last). An offer that expires between two pages is not on the later one.
func (s *Service) ListHandovers(ctx context.Context, f HandoverFilter, pageSize int, pageToken string) (_ []Handover, _ string, err error) {
	defer repolock.WrapOp(&err, "locks.ListHandovers")
	if pageSize < 1 {
		return nil, "", repolock.Errorf(repolock.EInvalid, "page_size must be positive")
	}
	var cond string
	switch {
	case f.TenantID == "" && f.Direction == HandoversAll:
		cond = `$1::uuid IS NULL`
	case f.TenantID == "":
		return nil, "", repolock.Errorf(repolock.EInvalid, "direction needs a tenant")
	case f.Direction == HandoversReceived:
		cond = `h.to_user_id = $1`
	case f.Direction == HandoversOffered:
		cond = `h.from_user_id = $1`
	case f.Direction == HandoversAll:
		cond = `(h.to_user_id = $1 OR h.from_user_id = $1)`
	default:
		return nil, "", repolock.Errorf(repolock.EInvalid, "direction must be %q or %q", HandoversReceived, HandoversOffered)
	}
	scope := pagetoken.Scope(f.TenantID, f.Direction)
	after, err := pagetoken.DecodeTimeID(pagetoken.KindHandovers, scope, pageToken)
	if err != nil {
		return nil, "", err
	}
	var tenant any
	if f.TenantID != "" {
		if _, err := uuid.Parse(f.TenantID); err != nil {
			return nil, "", repolock.Errorf(repolock.EInvalid, "tenant id %q is not a UUID", f.TenantID)
		}
		tenant = f.TenantID
	}
	hs := []Handover{}
	err = s.db.SelectContext(ctx, &hs, `SELECT `+handoverColumns+` FROM `+handoverFrom+`
		WHERE `+cond+` AND h.expires_at > now() AND (h.created_at, h.id) > ($2::timestamptz, $3::uuid)
		ORDER BY h.created_at, h.id LIMIT $4`, tenant, after.CreatedAt, after.ID, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	hs, next := pagetoken.Trim(hs, pageSize, func(last Handover) string {
		return pagetoken.Encode(pagetoken.KindHandovers, scope, pagetoken.TimeID{CreatedAt: last.CreatedAt, ID: last.ID})
	})
	return hs, next, nil
}

// HandoverOfLock returns the open offer of lock lockID, nil when it has
// none (an operator's lookup: the console's ownership page).
func (s *Service) HandoverOfLock(ctx context.Context, lockID string) (_ *Handover, err error) {
	defer repolock.WrapOp(&err, "locks.HandoverOfLock")
	var hs []Handover
	if err := s.db.SelectContext(ctx, &hs, `SELECT `+handoverColumns+` FROM `+handoverFrom+`
		WHERE h.lock_id = $1 AND h.expires_at > now()`, lockID); err != nil || len(hs) == 0 {
		return nil, database.MapError(err)
	}
	return &hs[0], nil
}

// openHandoverLock returns the lock of offer id, for the tenant on the
// given side of it (to_user_id or from_user_id), or not_found.
func openHandoverLock(ctx context.Context, q database.Querier, id, tenantID, side string) (string, error) {
	if _, err := uuid.Parse(id); err != nil {
		return "", repolock.Errorf(repolock.ENotFound, "handover %s not found", id)
	}
	var lockID string
	err := q.GetContext(ctx, &lockID, fmt.Sprintf(`SELECT lock_id FROM lock_handovers
		WHERE id = $1 AND %s = $2 AND expires_at > now()`, side), id, tenantID)
	if database.IsNoRows(err) {
		return "", repolock.Errorf(repolock.ENotFound, "handover %s not found", id)
	}
	return lockID, database.MapError(err)
}

// AcceptHandover gives the lock of offer id to the tenant (its recipient),
// in one transaction: FOR UPDATE on the lock, then the offer (still open,
// still the tenant's), then the references: while the old owner has any,
// it is lock_in_use (409) listing them, and nothing changes. It records
// handover_accepted. An offer that does not exist, expired, or is not to
// the tenant is not_found.
func (s *Service) AcceptHandover(ctx context.Context, tenantID, tenantName, id string) (_ Transfer, err error) {
	defer repolock.WrapOp(&err, "locks.AcceptHandover")
	var out Transfer
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		l, h, err := lockHandover(ctx, tx, id, tenantID, "to_user_id")
		if err != nil {
			return err
		}
		refs, total, err := references(ctx, tx, l.ID, MaxListedReferences)
		if err != nil {
			return err
		}
		if total > 0 {
			return LockInUseError(l.OwnerName, refs, total)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM lock_handovers WHERE id = $1`, h.ID); err != nil {
			return database.MapError(err)
		}
		if _, err := tx.ExecContext(ctx, moveLockSQL, l.ID, tenantID); err != nil {
			return database.MapError(err)
		}
		out = Transfer{LockID: l.ID, NormalizedURL: l.Key, From: l.OwnerName, To: tenantName, DeletedReferences: []Reference{}}
		return recordTransferEvent(ctx, tx, EventHandoverAccepted, l, tenantID, tenantName, tenantName,
			map[string]any{"handover_id": h.ID})
	})
	if err != nil {
		return Transfer{}, err
	}
	return out, nil
}

// lockHandover locks offer id's lock (FOR UPDATE), then the offer, which
// must still be open, on the tenant's side, and from the lock's owner.
func lockHandover(ctx context.Context, tx database.Tx, id, tenantID, side string) (lockedLock, Handover, error) {
	lockID, err := openHandoverLock(ctx, tx, id, tenantID, side)
	if err != nil {
		return lockedLock{}, Handover{}, err
	}
	var l lockedLock
	if err := tx.GetContext(ctx, &l, lockForChangeSQL, lockID); err != nil {
		if database.IsNoRows(err) {
			return lockedLock{}, Handover{}, repolock.Errorf(repolock.ENotFound, "handover %s not found", id)
		}
		return lockedLock{}, Handover{}, database.MapError(err)
	}
	var h Handover
	err = tx.GetContext(ctx, &h, `SELECT `+handoverColumns+` FROM `+handoverFrom+`
		WHERE h.id = $1 AND h.`+side+` = $2 AND h.expires_at > now() AND h.from_user_id = o.cluster_user_id
		FOR UPDATE OF h`, id, tenantID)
	if database.IsNoRows(err) {
		return lockedLock{}, Handover{}, repolock.Errorf(repolock.ENotFound, "handover %s not found", id)
	}
	return l, h, database.MapError(err)
}

// DeclineHandover ends offer id, made to the tenant, without a change of
// owner (handover_declined). The lock is no longer pinned: unreferenced,
// the GC collects it.
func (s *Service) DeclineHandover(ctx context.Context, tenantID, tenantName, id string) (err error) {
	defer repolock.WrapOp(&err, "locks.DeclineHandover")
	return s.endHandover(ctx, tenantID, tenantName, id, "to_user_id", EventHandoverDeclined)
}

// WithdrawHandover ends offer id, made by the tenant (handover_withdrawn).
func (s *Service) WithdrawHandover(ctx context.Context, tenantID, tenantName, id string) (err error) {
	defer repolock.WrapOp(&err, "locks.WithdrawHandover")
	return s.endHandover(ctx, tenantID, tenantName, id, "from_user_id", EventHandoverWithdrawn)
}

// CancelHandover ends offer id as an operator (DELETE
// /v1/admin/handovers/{id}, the console's ownership page): the owner's
// withdrawal done for it, recorded as handover_withdrawn with the admin's
// actor (AdminActor) and reason "admin" in its details. The lock is no
// longer pinned. An offer that does not exist or expired is not_found.
func (s *Service) CancelHandover(ctx context.Context, id, actor string) (_ Handover, err error) {
	defer repolock.WrapOp(&err, "locks.CancelHandover")
	if actor == "" {
		return Handover{}, repolock.Errorf(repolock.EInternal, "cancel without an actor")
	}
	if _, err := uuid.Parse(id); err != nil {
		return Handover{}, repolock.Errorf(repolock.ENotFound, "handover %s not found", id)
	}
	var out Handover
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		var lockID string
		err := tx.GetContext(ctx, &lockID, `SELECT lock_id FROM lock_handovers WHERE id = $1 AND expires_at > now()`, id)
		if database.IsNoRows(err) {
			return repolock.Errorf(repolock.ENotFound, "handover %s not found", id)
		}
		if err != nil {
			return database.MapError(err)
		}
		var l lockedLock
		if err := tx.GetContext(ctx, &l, lockForChangeSQL, lockID); err != nil {
			if database.IsNoRows(err) {
				return repolock.Errorf(repolock.ENotFound, "handover %s not found", id)
			}
			return database.MapError(err)
		}
		h, ok, err := deleteOpenHandover(ctx, tx, l.ID)
		if err != nil {
			return err
		}
		if !ok || h.ID != id {
			// Expired meanwhile, or replaced: the caller's offer is gone.
			return repolock.Errorf(repolock.ENotFound, "handover %s not found", id)
		}
		out = h
		return recordTransferEvent(ctx, tx, EventHandoverWithdrawn, l, h.ToID, h.ToName, actor,
			map[string]any{"handover_id": h.ID, "reason": "admin"})
	})
	if err != nil {
		return Handover{}, err
	}
	return out, nil
}

func (s *Service) endHandover(ctx context.Context, tenantID, tenantName, id, side, event string) error {
	return s.db.WithTx(ctx, func(tx database.Tx) error {
		l, h, err := lockHandover(ctx, tx, id, tenantID, side)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM lock_handovers WHERE id = $1`, h.ID); err != nil {
			return database.MapError(err)
		}
		return recordTransferEvent(ctx, tx, event, l, h.ToID, h.ToName, tenantName, map[string]any{"handover_id": h.ID})
	})
}

// expireHandovers deletes the expired offers matching cond (on
// lock_handovers h; $1 its parameter) and records handover_expired for
// each.
func expireHandovers(ctx context.Context, q database.Querier, cond string, arg any) error {
	_, err := q.ExecContext(ctx, `
		WITH gone AS (
			DELETE FROM lock_handovers h WHERE `+cond+` AND h.expires_at <= now()
			RETURNING h.id, h.lock_id, h.from_user_id, h.to_user_id, h.expires_at
		)
		INSERT INTO repository_lock_events
			(event, lock_id, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name, details)
		SELECT '`+EventHandoverExpired+`', g.lock_id, o.git_repository_url, g.from_user_id, f.name, g.to_user_id, t.name,
			jsonb_build_object('handover_id', g.id, 'expires_at', g.expires_at)
		FROM gone g
			JOIN RepositoryLockOwner o ON o.id = g.lock_id
			LEFT JOIN cluster_users f ON f.id = g.from_user_id
			LEFT JOIN cluster_users t ON t.id = g.to_user_id`, arg)
	return database.MapError(err)
}

// DeleteExpiredHandovers deletes every expired offer (at most limit),
// recording handover_expired for each: the GC's, at the start of a run.
func (s *Service) DeleteExpiredHandovers(ctx context.Context, limit int) (err error) {
	defer repolock.WrapOp(&err, "locks.DeleteExpiredHandovers")
	// Look first (an index probe): with nothing expired, the run writes
	// nothing and takes no lock on the events table.
	var any bool
	if err := s.db.GetContext(ctx, &any, `SELECT EXISTS (SELECT 1 FROM lock_handovers WHERE expires_at <= now())`); err != nil || !any {
		return database.MapError(err)
	}
	return expireHandovers(ctx, s.db, `h.id IN (SELECT id FROM lock_handovers WHERE expires_at <= now() ORDER BY expires_at LIMIT $1)`, limit)
}

// Denial is the denials of one tenant on a lock, as its owner reads them.
type Denial struct {
	// Tenant is the denied tenant's name (as recorded).
	Tenant string    `db:"tenant" json:"tenant"`
	Count  int64     `db:"count" json:"count"`
	First  time.Time `db:"first_at" json:"first_at"`
	Last   time.Time `db:"last_at" json:"last_at"`
}

// denialCursor is the cursor of a lock's denials: the last denied
// tenant's name of the page (names as recorded; "" for none recorded).
type denialCursor struct {
	Tenant string `json:"t"`
}

func (c *denialCursor) Validate() error {
	if len(c.Tenant) > pagetoken.MaxNameLen || !utf8.ValidString(c.Tenant) || strings.ContainsRune(c.Tenant, 0) {
		return pagetoken.Invalid()
	}
	return nil
}

// Denials returns one page of the denials recorded against lock lockID,
// per denied tenant, in the order of the tenants' names, and the token of
// the next page ("" after the last). With a tenantID, only those recorded
// while that tenant owned the lock, and another tenant's lock is
// not_found (GET /v1/locks/{id}/denials); with tenantID "" every denial of
// the lock, whoever owned it (GET /v1/admin/locks/{id}/denials; an
// unknown lock is not_found).
//
// The pages follow the tenants' names, not the last denial's time: a
// denial between two pages moves no tenant across the cut.
func (s *Service) Denials(ctx context.Context, tenantID, lockID string, pageSize int, pageToken string) (_ []Denial, _ string, err error) {
	defer repolock.WrapOp(&err, "locks.Denials")
	if pageSize < 1 {
		return nil, "", repolock.Errorf(repolock.EInvalid, "page_size must be positive")
	}
	if tenantID != "" {
		if _, err := s.Get(ctx, tenantID, lockID); err != nil {
			return nil, "", err
		}
	} else if err := s.lockExists(ctx, lockID); err != nil {
		return nil, "", err
	}
	scope := pagetoken.Scope(tenantID, lockID)
	after, first, err := pagetoken.Decode[denialCursor](pagetoken.KindDenials, scope, pageToken)
	if err != nil {
		return nil, "", err
	}
	var owner any
	if tenantID != "" {
		owner = tenantID
	}
	ds := []Denial{}
	err = s.db.SelectContext(ctx, &ds, `
		SELECT coalesce(e.cluster_user_name, '') AS tenant, sum(e.count) AS count,
			min(e.created_at) AS first_at, max(coalesce(e.last_at, e.created_at)) AS last_at
		FROM repository_lock_events e
		WHERE e.event = '`+EventDenied+`' AND e.lock_id = $1 AND ($2::uuid IS NULL OR e.owner_user_id = $2)
			AND ($3 OR coalesce(e.cluster_user_name, '') > $4)
		GROUP BY coalesce(e.cluster_user_name, '')
		ORDER BY tenant
		LIMIT $5`, lockID, owner, first, after.Tenant, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	ds, next := pagetoken.Trim(ds, pageSize, func(last Denial) string {
		return pagetoken.Encode(pagetoken.KindDenials, scope, denialCursor{Tenant: last.Tenant})
	})
	return ds, next, nil
}

// lockExists is not_found unless lock lockID exists (any owner).
func (s *Service) lockExists(ctx context.Context, lockID string) error {
	if _, err := uuid.Parse(lockID); err != nil {
		return repolock.Errorf(repolock.ENotFound, "lock %s not found", lockID)
	}
	var ok bool
	if err := s.db.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM RepositoryLockOwner WHERE id = $1)`, lockID); err != nil {
		return database.MapError(err)
	}
	if !ok {
		return repolock.Errorf(repolock.ENotFound, "lock %s not found", lockID)
	}
	return nil
}
