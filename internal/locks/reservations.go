package locks

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
)

// Reservations (issue 25, docs/locks.md "Reservations"): a key prefix that
// belongs to a tenant. A claim of a key under another tenant's reservation
// is refused in the lock-creating statement itself (NewLocksCTE: the key's
// ancestors host, host/seg1, ..., the key, looked up with = ANY over the
// unique index on reservations.prefix); the longest covering prefix wins,
// so nested reservations of different tenants work. Locks that existed
// before a reservation (created with "existing":"keep") stay their
// owners' until released.
//
// Reserve and the claims are ordered by a table lock: Reserve takes SHARE
// on RepositoryLockOwner before it looks for the locks its prefix covers,
// so it waits for every transaction that is creating a lock to end, and
// every claim that comes after it waits for its commit and then, with a
// new snapshot, sees the reservation. (SHARE conflicts with the ROW
// EXCLUSIVE every INSERT, UPDATE and DELETE of locks takes: while a
// reservation is being added, lock writes wait for it. It is an operator's
// action, a short transaction.)

// Reservation is a key prefix reserved for a tenant.
type Reservation struct {
	ID         string        `db:"id" json:"id"`
	Prefix     normalize.Key `db:"prefix" json:"prefix"`
	TenantID   string        `db:"cluster_user_id" json:"tenant_id"`
	TenantName string        `db:"tenant_name" json:"tenant"`
	CreatedAt  time.Time     `db:"created_at" json:"created_at"`
}

// CoveredLock is a live lock of another tenant under a reservation's
// prefix: what a new reservation would conflict with.
type CoveredLock struct {
	LockID        string        `db:"id" json:"lock_id"`
	NormalizedURL normalize.Key `db:"git_repository_url" json:"normalized_url"`
	TenantName    string        `db:"tenant_name" json:"tenant"`
}

// ReserveRequest is an admin's request to reserve Prefix (any spelling of
// a URL, a host/org or a bare host) for the tenant named Tenant.
type ReserveRequest struct {
	Prefix string
	Tenant string
	// Keep reserves the prefix even when other tenants hold live locks
	// under it: they keep them until released (grandfathered).
	Keep bool
	// DryRun changes nothing: it returns the locks that would conflict.
	DryRun bool
}

// MaxConflictsListed caps the locks a reservation_conflict lists (its
// Details["total"] counts all of them).
const MaxConflictsListed = 100

// prefixSentinel is the path segment NormalizePrefix appends to a bare
// host so that the normalizer, which keys repository URLs, accepts it.
const prefixSentinel = "repolock-reservation-prefix"

// NormalizePrefix returns the reservation prefix of raw under n: raw keyed
// as a repository URL (so any spelling of the host, scheme, user and ".git"
// works: "https://GitHub.com/Acme/" is "github.com/acme"), or, for a bare
// host, the host part of the key of a URL on it ("github.com").
func NormalizePrefix(n *normalize.Normalizer, raw string) (normalize.Key, error) {
	s := strings.TrimRight(strings.TrimSpace(raw), "/")
	if s == "" {
		return "", repolock.Errorf(repolock.EInvalid, "prefix is empty")
	}
	if k, err := n.RepoURL(s); err == nil {
		return k, nil
	}
	k, err := n.RepoURL(s + "/" + prefixSentinel)
	if err != nil {
		return "", repolock.Wrap(repolock.EInvalid, err, "prefix: %s", repolock.ErrorMessage(err))
	}
	p, ok := strings.CutSuffix(string(k), "/"+prefixSentinel)
	if !ok || p == "" {
		return "", repolock.Errorf(repolock.EInvalid, "prefix: %q is neither a host nor a repository URL", raw)
	}
	return normalize.Key(p), nil
}

// lockReservationsSQL orders Reserve after every lock-creating transaction
// in flight and before every later one (see the comment above).
const lockReservationsSQL = `LOCK TABLE RepositoryLockOwner IN SHARE MODE`

// coveredLocksSQL lists the live locks of tenants other than $2 whose key
// is $1 or under it (whole segments: $3 is $1 || '/' with LIKE's special
// characters escaped, then '%'), leaving out those under a longer
// reservation than $1 (longest prefix wins: the new reservation does not
// decide them). Without an index on the keys' prefixes it scans the locks;
// it runs only when an admin adds a reservation.
const coveredLocksSQL = `
SELECT o.id, o.git_repository_url, u.name AS tenant_name
FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE (o.git_repository_url = $1 OR o.git_repository_url LIKE $3)
	AND o.cluster_user_id <> $2
	AND NOT EXISTS (
		SELECT 1 FROM reservations r
		WHERE length(r.prefix) > length($1) AND r.prefix = ANY (ARRAY(
			SELECT array_to_string((string_to_array(o.git_repository_url, '/'))[1:i], '/')
			FROM generate_series(1, cardinality(string_to_array(o.git_repository_url, '/'))) i)))
ORDER BY o.git_repository_url`

// reservedBySQL finds the reservation that covers the key $1 (the longest
// of its ancestors' prefixes) when it belongs to another tenant than $2.
const reservedBySQL = `
SELECT best.prefix, u.name FROM (
	SELECT r.prefix, r.cluster_user_id FROM reservations r
	WHERE r.prefix = ANY (ARRAY(
		SELECT array_to_string((string_to_array($1::text, '/'))[1:i], '/')
		FROM generate_series(1, cardinality(string_to_array($1::text, '/'))) i))
	ORDER BY length(r.prefix) DESC
	LIMIT 1) best JOIN cluster_users u ON u.id = best.cluster_user_id
WHERE best.cluster_user_id <> $2`

const insertReservationSQL = `
INSERT INTO reservations (prefix, cluster_user_id) VALUES ($1, $2)
RETURNING id, prefix, cluster_user_id, created_at, (SELECT name FROM cluster_users WHERE id = $2) AS tenant_name`

func likePrefix(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(p) + "/%"
}

// Reserve reserves a prefix for a tenant, in one transaction. When other
// tenants hold live locks under the prefix it is refused with
// reservation_conflict listing them (Details["locks"], at most
// MaxConflictsListed, and Details["total"]), unless req.Keep. With
// req.DryRun it changes nothing and returns those locks (and a
// Reservation without an id: the normalized prefix and the tenant). A prefix already
// reserved is already_exists; an unknown tenant not_found.
func (s *Service) Reserve(ctx context.Context, req ReserveRequest) (_ Reservation, covered []CoveredLock, err error) {
	defer repolock.WrapOp(&err, "locks.Reserve")
	prefix, err := NormalizePrefix(s.Rules(), req.Prefix)
	if err != nil {
		return Reservation{}, nil, err
	}
	if req.Tenant == "" {
		return Reservation{}, nil, repolock.Errorf(repolock.EInvalid, "tenant is empty")
	}
	var r Reservation
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		r, covered = Reservation{}, nil
		var tenantID string
		if err := tx.GetContext(ctx, &tenantID, `SELECT id FROM cluster_users WHERE name = $1`, req.Tenant); err != nil {
			if database.IsNoRows(err) {
				return repolock.Errorf(repolock.ENotFound, "user %s not found", req.Tenant)
			}
			return database.MapError(err)
		}
		if _, err := tx.ExecContext(ctx, lockReservationsSQL); err != nil {
			return database.MapError(err)
		}
		covered = []CoveredLock{}
		if err := tx.SelectContext(ctx, &covered, coveredLocksSQL, string(prefix), tenantID, likePrefix(string(prefix))); err != nil {
			return database.MapError(err)
		}
		if req.DryRun {
			r = Reservation{Prefix: prefix, TenantID: tenantID, TenantName: req.Tenant}
			return nil
		}
		if len(covered) > 0 && !req.Keep {
			return ConflictError(prefix, covered)
		}
		err := tx.GetContext(ctx, &r, insertReservationSQL, string(prefix), tenantID)
		if database.PQCode(err) == database.CodeUniqueViolation {
			return repolock.Wrap(repolock.EAlreadyExists, err, "prefix %s is already reserved", prefix)
		}
		return database.MapError(err)
	})
	if err != nil {
		return Reservation{}, nil, err
	}
	return r, covered, nil
}

// ConflictError is reservation_conflict: a new reservation of prefix
// covers other tenants' live locks.
func ConflictError(prefix normalize.Key, covered []CoveredLock) error {
	listed := covered
	if len(listed) > MaxConflictsListed {
		listed = listed[:MaxConflictsListed]
	}
	return &repolock.Error{
		Code: repolock.EReservationConflict,
		Message: "other users hold live locks under " + string(prefix) +
			`; release them first, or reserve with "existing":"keep" to let them keep them`,
		Details: map[string]any{"locks": listed, "total": len(covered)},
	}
}

const reservationColumns = `r.id, r.prefix, r.cluster_user_id, r.created_at, u.name AS tenant_name`

// ListReservations returns one page of the reservations in creation order
// and the token of the next page ("" after the last).
func (s *Service) ListReservations(ctx context.Context, pageSize int, pageToken string) (_ []Reservation, _ string, err error) {
	defer repolock.WrapOp(&err, "locks.ListReservations")
	if pageSize < 1 {
		return nil, "", repolock.Errorf(repolock.EInvalid, "page_size must be positive")
	}
	after, err := pagetoken.DecodeTimeID(pagetoken.KindReservations, "", pageToken)
	if err != nil {
		return nil, "", err
	}
	rs := []Reservation{}
	err = s.db.SelectContext(ctx, &rs, `SELECT `+reservationColumns+`
		FROM reservations r JOIN cluster_users u ON u.id = r.cluster_user_id
		WHERE (r.created_at, r.id) > ($1::timestamptz, $2::uuid)
		ORDER BY r.created_at, r.id
		LIMIT $3`, after.CreatedAt, after.ID, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rs, next := pagetoken.Trim(rs, pageSize, func(last Reservation) string {
		return pagetoken.Encode(pagetoken.KindReservations, "", pagetoken.TimeID{CreatedAt: last.CreatedAt, ID: last.ID})
	})
	return rs, next, nil
}

// Unreserve deletes the reservation id. Locks are not touched. An unknown
// or malformed id is not found.
func (s *Service) Unreserve(ctx context.Context, id string) (err error) {
	defer repolock.WrapOp(&err, "locks.Unreserve")
	if _, err := uuid.Parse(id); err != nil {
		return repolock.Errorf(repolock.ENotFound, "reservation %s not found", id)
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM reservations WHERE id = $1`, id)
	if err != nil {
		return database.MapError(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return database.MapError(err)
	} else if n == 0 {
		return repolock.Errorf(repolock.ENotFound, "reservation %s not found", id)
	}
	return nil
}

// ReservedBy is the reservation that decides a key: the longest reserved
// prefix among the key's ancestors, and its tenant.
type ReservedBy struct {
	Key        normalize.Key `db:"key"`
	Prefix     normalize.Key `db:"prefix"`
	TenantID   string        `db:"cluster_user_id"`
	TenantName string        `db:"tenant_name"`
}

// reservedKeysSQL finds, for each key of $1, the reservation that covers
// it (the longest prefix among its ancestors, looked up like the claim
// does, through the unique index on prefix); keys no reservation covers
// are left out.
const reservedKeysSQL = `
SELECT k.key, best.prefix, best.cluster_user_id, u.name AS tenant_name
FROM unnest($1::text[]) AS k(key)
CROSS JOIN LATERAL (
	SELECT r.prefix, r.cluster_user_id FROM reservations r
	WHERE r.prefix = ANY (ARRAY(
		SELECT array_to_string((string_to_array(k.key, '/'))[1:i], '/')
		FROM generate_series(1, cardinality(string_to_array(k.key, '/'))) i))
	ORDER BY length(r.prefix) DESC
	LIMIT 1) best
JOIN cluster_users u ON u.id = best.cluster_user_id`

// ReservedKeys returns the reservation that decides each of keys (keys no
// reservation covers are absent from the map), on q: re-keying asks it
// before it moves a lock to a new key, so that a move under another
// tenant's reservation is a recorded conflict rather than a refused claim.
func (s *Service) ReservedKeys(ctx context.Context, q database.Querier, keys []normalize.Key) (_ map[normalize.Key]ReservedBy, err error) {
	defer repolock.WrapOp(&err, "locks.ReservedKeys")
	out := map[normalize.Key]ReservedBy{}
	if len(keys) == 0 {
		return out, nil
	}
	var rs []ReservedBy
	if err := q.SelectContext(ctx, &rs, reservedKeysSQL, keyArray(keys)); err != nil {
		return nil, database.MapError(err)
	}
	for _, r := range rs {
		out[r.Key] = r
	}
	return out, nil
}
