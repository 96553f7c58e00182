package gc

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lib/pq"

	"github.com/repolock/repolock/internal/database"
)

// nilUUID starts the keyset cursor: every uuid sorts after it.
const nilUUID = "00000000-0000-0000-0000-000000000000"

// selectBatchSQL picks the next batch of collectable locks past the cursor
// and locks them. SKIP LOCKED passes over the locks a concurrent request is
// referencing (it holds a row lock until it commits) instead of waiting.
// The primary key index drives the scan in id order; the two anti-joins use
// the lock_id indexes of the reference tables.
const selectBatchSQL = `
SELECT o.id
FROM RepositoryLockOwner o
WHERE o.id > $1
  AND o.created_at < now() - make_interval(secs => $2)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)
ORDER BY o.id
LIMIT $3
FOR UPDATE OF o SKIP LOCKED`

// deleteBatchSQL deletes the locked batch, re-checking with the statement's
// fresh snapshot that nothing references each lock, and records a collected
// event for each one it deletes.
const deleteBatchSQL = `
WITH deleted AS (
    DELETE FROM RepositoryLockOwner o
    WHERE o.id = ANY($1::uuid[])
      AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
      AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)
    RETURNING o.id, o.git_repository_url, o.cluster_user_id
)
INSERT INTO repository_lock_events (event, lock_id, git_repository_url, owner_user_id, owner_user_name)
SELECT 'collected', d.id, d.git_repository_url, d.cluster_user_id, u.name
FROM deleted d
LEFT JOIN cluster_users u ON u.id = d.cluster_user_id`

// selectOneSQL locks one lock of a batch being retried lock by lock, with
// the same conditions as selectBatchSQL.
const selectOneSQL = `
SELECT o.id
FROM RepositoryLockOwner o
WHERE o.id = $1
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)
FOR UPDATE OF o SKIP LOCKED`

// collect deletes batches until one comes back short.
func (c *Collector) collect(ctx context.Context, opts Options, r *Run, log *slog.Logger) error {
	cursor := nilUUID
	minAge := opts.MinAge.Seconds()
	for {
		var ids []string
		var deleted int64
		err := c.db.WithTx(ctx, func(tx database.Tx) error {
			ids, deleted = nil, 0
			if err := tx.SelectContext(ctx, &ids, selectBatchSQL, cursor, minAge, opts.BatchSize); err != nil {
				return fmt.Errorf("select batch: %w", err)
			}
			if len(ids) == 0 {
				return nil
			}
			res, err := tx.ExecContext(ctx, deleteBatchSQL, pq.Array(ids))
			if err != nil {
				return fmt.Errorf("delete batch: %w", err)
			}
			deleted, err = res.RowsAffected()
			return err
		})
		if err != nil && database.PQCode(err) == database.CodeForeignKeyViolation && len(ids) > 0 {
			// A reference the re-check could not see: keep the batch's
			// referenced locks, collect the rest one by one.
			log.Warn("gc: a batch hit a foreign key; retrying it lock by lock", "locks", len(ids), "error", err.Error())
			deleted, err = c.collectOneByOne(ctx, ids, log)
		}
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		r.Batches++
		r.Scanned += int64(len(ids))
		r.Deleted += deleted
		c.metrics.observeCollected(deleted)
		cursor = ids[len(ids)-1]
		if len(ids) < opts.BatchSize {
			return nil
		}
	}
}

// collectOneByOne collects each lock of a failed batch in its own
// transaction; a lock whose deletion still violates a foreign key is kept.
func (c *Collector) collectOneByOne(ctx context.Context, ids []string, log *slog.Logger) (int64, error) {
	var total int64
	for _, id := range ids {
		var deleted int64
		err := c.db.WithTx(ctx, func(tx database.Tx) error {
			deleted = 0
			var locked []string
			if err := tx.SelectContext(ctx, &locked, selectOneSQL, id); err != nil {
				return fmt.Errorf("select lock: %w", err)
			}
			if len(locked) == 0 {
				return nil // referenced or locked by now
			}
			res, err := tx.ExecContext(ctx, deleteBatchSQL, pq.Array(locked))
			if err != nil {
				return fmt.Errorf("delete lock: %w", err)
			}
			deleted, err = res.RowsAffected()
			return err
		})
		if database.PQCode(err) == database.CodeForeignKeyViolation {
			log.Warn("gc: kept a lock whose deletion violates a foreign key", "lock_id", id, "error", err.Error())
			continue
		}
		if err != nil {
			return total, err
		}
		total += deleted
	}
	return total, nil
}

// dryRunSQL lists the next batch of collectable locks past the cursor,
// without locking them.
const dryRunSQL = `
SELECT o.id, o.git_repository_url, o.cluster_user_id, COALESCE(u.name, '') AS owner_name, o.created_at
FROM RepositoryLockOwner o
LEFT JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE o.id > $1
  AND o.created_at < now() - make_interval(secs => $2)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)
ORDER BY o.id
LIMIT $3`

// dryRun counts what collect would delete now, in the same batches, and
// keeps the first DryRunSampleLimit candidates.
func (c *Collector) dryRun(ctx context.Context, opts Options, r *Run) error {
	cursor := nilUUID
	minAge := opts.MinAge.Seconds()
	r.WouldCollect = []Candidate{}
	for {
		var batch []Candidate
		if err := c.db.SelectContext(ctx, &batch, dryRunSQL, cursor, minAge, opts.BatchSize); err != nil {
			return fmt.Errorf("dry run: select batch: %w", err)
		}
		if len(batch) == 0 {
			return nil
		}
		r.Batches++
		r.Scanned += int64(len(batch))
		if room := DryRunSampleLimit - len(r.WouldCollect); room > 0 {
			r.WouldCollect = append(r.WouldCollect, batch[:min(room, len(batch))]...)
		}
		cursor = batch[len(batch)-1].LockID
		if len(batch) < opts.BatchSize {
			return nil
		}
	}
}
