package kv

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/repolock/repolock/internal/database"
)

// The statements of the Postgres store. Each operation is one statement
// (DeletePartition: one per batch), run outside any transaction.
const (
	sqlGet = `SELECT value, version FROM kv WHERE partition_key = $1 AND key = $2`

	// nextval is evaluated once per statement, before the conflict check,
	// so a Set always moves the key to a version it never had.
	sqlSet = `INSERT INTO kv (partition_key, key, value, version)
		VALUES ($1, $2, $3, nextval('kv_version_seq'))
		ON CONFLICT (partition_key, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version`

	sqlInsertIfAbsent = `INSERT INTO kv (partition_key, key, value, version)
		VALUES ($1, $2, $3, nextval('kv_version_seq'))
		ON CONFLICT (partition_key, key) DO NOTHING
		RETURNING version`

	sqlUpdateIfVersion = `UPDATE kv SET value = $3, version = nextval('kv_version_seq')
		WHERE partition_key = $1 AND key = $2 AND version = $4
		RETURNING version`

	sqlDelete = `DELETE FROM kv WHERE partition_key = $1 AND key = $2`

	sqlDeleteIfVersion = `DELETE FROM kv WHERE partition_key = $1 AND key = $2 AND version = $3`

	// Keyset paging on the primary key: the first page with key >= from,
	// the next ones with key > the last key seen.
	sqlScanFirst = `SELECT key, value, version FROM kv
		WHERE partition_key = $1 AND key >= $2 ORDER BY key LIMIT $3`
	sqlScanNext = `SELECT key, value, version FROM kv
		WHERE partition_key = $1 AND key > $2 ORDER BY key LIMIT $3`

	// One batch: the row ids of up to $2 entries of the partition (found
	// through the primary key), deleted by a TID scan.
	sqlDeleteBatch = `DELETE FROM kv WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM kv WHERE partition_key = $1 LIMIT $2))`
)

// version is the Postgres store's predicate: the row's version counter.
type version int64

// Postgres is the Store on the kv table.
type Postgres struct {
	db *database.DB
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the store on db's kv table.
func NewPostgres(db *database.DB) *Postgres { return &Postgres{db: db} }

// wrap annotates err with the operation, and makes a failure caused by a
// cancelled or expired context match that context's error.
func wrap(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("kv %s: %w (%w)", op, cerr, err)
	}
	return fmt.Errorf("kv %s: %w", op, err)
}

func toVersion(pred Predicate) (version, error) {
	v, ok := pred.(version)
	if !ok {
		return 0, fmt.Errorf("%w: got %T", ErrInvalidPredicate, pred)
	}
	return v, nil
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, partitionKey, key []byte) ([]byte, Predicate, error) {
	if err := CheckArgs(partitionKey, key, nil, false); err != nil {
		return nil, nil, err
	}
	var (
		value []byte
		ver   int64
	)
	err := p.db.QueryRowContext(ctx, sqlGet, partitionKey, key).Scan(&value, &ver)
	if database.IsNoRows(err) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, wrap(ctx, "get", err)
	}
	if value == nil {
		value = []byte{}
	}
	return value, version(ver), nil
}

// Set implements Store.
func (p *Postgres) Set(ctx context.Context, partitionKey, key, value []byte) error {
	if err := CheckArgs(partitionKey, key, value, true); err != nil {
		return err
	}
	if _, err := p.db.ExecContext(ctx, sqlSet, partitionKey, key, value); err != nil {
		return wrap(ctx, "set", err)
	}
	return nil
}

// SetIf implements Store.
func (p *Postgres) SetIf(ctx context.Context, partitionKey, key, value []byte, pred Predicate) (Predicate, error) {
	if err := CheckArgs(partitionKey, key, value, true); err != nil {
		return nil, err
	}
	var (
		ver int64
		err error
	)
	if pred == nil {
		err = p.db.QueryRowContext(ctx, sqlInsertIfAbsent, partitionKey, key, value).Scan(&ver)
	} else {
		var want version
		if want, err = toVersion(pred); err != nil {
			return nil, err
		}
		err = p.db.QueryRowContext(ctx, sqlUpdateIfVersion, partitionKey, key, value, int64(want)).Scan(&ver)
	}
	if database.IsNoRows(err) {
		return nil, ErrPredicateFailed
	}
	if err != nil {
		return nil, wrap(ctx, "setif", err)
	}
	return version(ver), nil
}

// Delete implements Store.
func (p *Postgres) Delete(ctx context.Context, partitionKey, key []byte) error {
	if err := CheckArgs(partitionKey, key, nil, false); err != nil {
		return err
	}
	if _, err := p.db.ExecContext(ctx, sqlDelete, partitionKey, key); err != nil {
		return wrap(ctx, "delete", err)
	}
	return nil
}

// DeleteIf implements Store.
func (p *Postgres) DeleteIf(ctx context.Context, partitionKey, key []byte, pred Predicate) error {
	if err := CheckArgs(partitionKey, key, nil, false); err != nil {
		return err
	}
	if pred == nil {
		return ErrMissingPredicate
	}
	want, err := toVersion(pred)
	if err != nil {
		return err
	}
	res, err := p.db.ExecContext(ctx, sqlDeleteIfVersion, partitionKey, key, int64(want))
	if err != nil {
		return wrap(ctx, "deleteif", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return wrap(ctx, "deleteif", err)
	}
	if n == 0 {
		return ErrPredicateFailed
	}
	return nil
}

// Scan implements Store.
func (p *Postgres) Scan(ctx context.Context, partitionKey, fromKey []byte, pageSize int) iter.Seq2[Entry, error] {
	if pageSize <= 0 {
		pageSize = DefaultScanPageSize
	}
	return func(yield func(Entry, error) bool) {
		if len(partitionKey) == 0 {
			yield(Entry{}, ErrMissingPartitionKey)
			return
		}
		query, after := sqlScanFirst, fromKey
		if after == nil {
			after = []byte{}
		}
		for {
			page, err := p.scanPage(ctx, query, partitionKey, after, pageSize)
			if err != nil {
				yield(Entry{}, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if len(page) < pageSize {
				return
			}
			query, after = sqlScanNext, page[len(page)-1].Key
		}
	}
}

func (p *Postgres) scanPage(ctx context.Context, query string, partitionKey, after []byte, limit int) ([]Entry, error) {
	rows, err := p.db.QueryContext(ctx, query, partitionKey, after, limit)
	if err != nil {
		return nil, wrap(ctx, "scan", err)
	}
	defer rows.Close()
	page := make([]Entry, 0, min(limit, 256))
	for rows.Next() {
		var (
			e   Entry
			ver int64
		)
		if err := rows.Scan(&e.Key, &e.Value, &ver); err != nil {
			return nil, wrap(ctx, "scan", err)
		}
		if e.Value == nil {
			e.Value = []byte{}
		}
		e.Predicate = version(ver)
		page = append(page, e)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "scan", err)
	}
	return page, nil
}

// DeletePartition implements Store. It loops until a batch deletes nothing,
// so entries whose row moved under it (a concurrent update) are picked up
// by a later batch.
func (p *Postgres) DeletePartition(ctx context.Context, partitionKey []byte, batchSize int) (int64, error) {
	if len(partitionKey) == 0 {
		return 0, ErrMissingPartitionKey
	}
	if batchSize <= 0 {
		batchSize = DefaultDeleteBatch
	}
	var total int64
	for {
		res, err := p.db.ExecContext(ctx, sqlDeleteBatch, partitionKey, batchSize)
		if err != nil {
			return total, wrap(ctx, "delete partition", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, wrap(ctx, "delete partition", err)
		}
		total += n
		if n == 0 {
			return total, nil
		}
	}
}
