package kv

import (
	"context"
	"database/sql"
	"errors"

	"github.com/repolock/repolock"
)

// Fence guards a write with a lease's fencing token (docs/leases.md): the
// write is admitted only when Token is the last token issued for the
// tenant's lease key Guard (table lease_tokens, internal/leases) and no
// admitted write of Guard carried a greater one (table kv_fences, raised
// in the write's own statement). A zero Fence guards nothing.
type Fence struct {
	Tenant string
	Guard  string
	Token  int64
}

// IsZero reports whether f guards nothing.
func (f Fence) IsZero() bool { return f.Token == 0 }

// FencedError is the refusal of a write whose token is older than one
// issued for its guarding key (409 fenced).
func FencedError(f Fence) error {
	return repolock.Errorf(repolock.EFenced, "fencing token %d is stale: a newer lease on %s was granted", f.Token, f.Guard)
}

func unissuedError(f Fence) error {
	return repolock.Errorf(repolock.EInvalid, "fencing token %d was never issued for the lease key %s", f.Token, f.Guard)
}

// Fenced is a Store that can guard writes with a Fence: the check and the
// write are one statement, so a write whose token is stale when it
// arrives is refused however late it arrives. It returns the error of
// FencedError (errors.Is(err, &repolock.Error{Code: repolock.EFenced}))
// for a stale token, and invalid_argument for a token never issued.
type Fenced interface {
	Store
	SetIfFenced(ctx context.Context, partitionKey, key, value []byte, pred Predicate, f Fence) (Predicate, error)
	DeleteIfFenced(ctx context.Context, partitionKey, key []byte, pred Predicate, f Fence) error
}

var _ Fenced = (*Postgres)(nil)

// fenceCTE admits the statement's write when $1/$2/$3 (tenant, guard,
// token) is the guard's current token, raising kv_fences to it. The row
// lock of the ON CONFLICT update orders concurrent fenced writes of one
// guard: a write whose token fell below the stored one while it waited is
// refused. issued is the guard's last issued token, to tell a stale token
// from one never issued.
const fenceCTE = `issued AS (
		SELECT token FROM lease_tokens WHERE cluster_user_id = $1 AND key = $2
	), fence AS (
		INSERT INTO kv_fences AS f (cluster_user_id, guard, token)
		SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM issued WHERE token = $3)
		ON CONFLICT (cluster_user_id, guard) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token
		RETURNING 1
	)`

const (
	sqlInsertIfAbsentFenced = `WITH ` + fenceCTE + `, w AS (
		INSERT INTO kv (partition_key, key, value, version)
		SELECT $4, $5, $6, nextval('kv_version_seq') WHERE EXISTS (SELECT 1 FROM fence)
		ON CONFLICT (partition_key, key) DO NOTHING
		RETURNING version)
	SELECT EXISTS (SELECT 1 FROM fence), (SELECT token FROM issued), (SELECT version FROM w)`

	sqlUpdateIfVersionFenced = `WITH ` + fenceCTE + `, w AS (
		UPDATE kv SET value = $6, version = nextval('kv_version_seq')
		WHERE partition_key = $4 AND key = $5 AND version = $7 AND EXISTS (SELECT 1 FROM fence)
		RETURNING version)
	SELECT EXISTS (SELECT 1 FROM fence), (SELECT token FROM issued), (SELECT version FROM w)`

	sqlDeleteIfVersionFenced = `WITH ` + fenceCTE + `, w AS (
		DELETE FROM kv WHERE partition_key = $4 AND key = $5 AND version = $6 AND EXISTS (SELECT 1 FROM fence)
		RETURNING version)
	SELECT EXISTS (SELECT 1 FROM fence), (SELECT token FROM issued), (SELECT version FROM w)`
)

func checkFence(f Fence) error {
	if f.Tenant == "" || f.Guard == "" || f.Token <= 0 {
		return repolock.Errorf(repolock.EInvalid, "a fencing token must be positive, with a tenant and a guarding key")
	}
	return nil
}

// fenced runs one fenced statement: ok is whether the write happened;
// the error is fenced, invalid or the database's.
func (p *Postgres) fenced(ctx context.Context, op, query string, f Fence, args ...any) (ver int64, ok bool, err error) {
	var (
		admitted bool
		issued   sql.NullInt64
		written  sql.NullInt64
	)
	args = append([]any{f.Tenant, f.Guard, f.Token}, args...)
	if err := p.db.QueryRowContext(ctx, query, args...).Scan(&admitted, &issued, &written); err != nil {
		return 0, false, wrap(ctx, op, err)
	}
	if !admitted {
		if !issued.Valid || issued.Int64 < f.Token {
			return 0, false, unissuedError(f)
		}
		return 0, false, FencedError(f)
	}
	return written.Int64, written.Valid, nil
}

// SetIfFenced implements Fenced.
func (p *Postgres) SetIfFenced(ctx context.Context, partitionKey, key, value []byte, pred Predicate, f Fence) (Predicate, error) {
	if err := CheckArgs(partitionKey, key, value, true); err != nil {
		return nil, err
	}
	if err := checkFence(f); err != nil {
		return nil, err
	}
	var (
		ver int64
		ok  bool
		err error
	)
	if pred == nil {
		ver, ok, err = p.fenced(ctx, "setif", sqlInsertIfAbsentFenced, f, partitionKey, key, value)
	} else {
		want, terr := toVersion(pred)
		if terr != nil {
			return nil, terr
		}
		ver, ok, err = p.fenced(ctx, "setif", sqlUpdateIfVersionFenced, f, partitionKey, key, value, int64(want))
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrPredicateFailed
	}
	return version(ver), nil
}

// DeleteIfFenced implements Fenced.
func (p *Postgres) DeleteIfFenced(ctx context.Context, partitionKey, key []byte, pred Predicate, f Fence) error {
	if err := CheckArgs(partitionKey, key, nil, false); err != nil {
		return err
	}
	if pred == nil {
		return ErrMissingPredicate
	}
	if err := checkFence(f); err != nil {
		return err
	}
	want, err := toVersion(pred)
	if err != nil {
		return err
	}
	_, ok, err := p.fenced(ctx, "deleteif", sqlDeleteIfVersionFenced, f, partitionKey, key, int64(want))
	if err != nil {
		return err
	}
	if !ok {
		return ErrPredicateFailed
	}
	return nil
}

// IsFenced reports whether err is a fenced refusal.
func IsFenced(err error) bool {
	var e *repolock.Error
	return errors.As(err, &e) && e.Code == repolock.EFenced
}
