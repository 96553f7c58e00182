package gc

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/lib/pq"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
)

// nilUUID starts the keyset cursor: every uuid sorts after it.
const nilUUID = "00000000-0000-0000-0000-000000000000"

// unreferencedSQL is the candidate scan shared by the batch and the dry run:
// the next $3 locks past the cursor $1 (in id order) that nothing
// references. It merges three indexes in id order (the primary key and the
// two lock_id indexes), all with index-only scans.
//
//   - "Unreferenced" is locks.UnreferencedSQL, whose redundant
//     "lock_id >= $1" bounds matter here: the planner does not carry
//     o.id > $1 over to the reference tables by itself, and without them
//     every batch re-reads the reference indexes from the start (measured on
//     1M locks: 690 ms instead of 22 ms for a batch in the middle).
//   - No row lock is taken here: with FOR UPDATE in the same query block,
//     Postgres needs the ctid of every joined reference row (for its
//     recheck), which turns the index-only scans into heap scans.
const unreferencedSQL = `
unref AS MATERIALIZED (
    SELECT o.id
    FROM RepositoryLockOwner o
    WHERE o.id > $1
      AND ` + locks.UnreferencedSQL + `
    ORDER BY o.id
    LIMIT $3
)`

// selectBatchSQL finds the next batch of candidates and locks those older
// than the minimum age ($2 seconds). SKIP LOCKED passes over the locks a
// concurrent request is referencing (it holds a row lock until it commits)
// instead of waiting. It returns how many candidates the batch scanned, the
// last one (the next cursor) and the ids it locked.
const selectBatchSQL = `
WITH ` + unreferencedSQL + `,
locked AS (
    SELECT o.id
    FROM RepositoryLockOwner o
    JOIN unref u ON u.id = o.id
    WHERE o.created_at < now() - make_interval(secs => $2)
    FOR UPDATE OF o SKIP LOCKED
)
SELECT
    (SELECT count(*) FROM unref) AS candidates,
    (SELECT id FROM unref ORDER BY id DESC LIMIT 1) AS cursor,
    COALESCE((SELECT array_agg(id ORDER BY id) FROM locked), '{}') AS ids`

// selectOneSQL locks one lock of a batch being retried lock by lock.
const selectOneSQL = `
SELECT o.id
FROM RepositoryLockOwner o
WHERE o.id = $1 AND ` + locks.UnreferencedSQL + `
FOR UPDATE OF o SKIP LOCKED`

type batch struct {
	Candidates int            `db:"candidates"`
	Cursor     sql.NullString `db:"cursor"`
	IDs        pq.StringArray `db:"ids"`
}

// collect deletes batches until one comes back short.
func (c *Collector) collect(ctx context.Context, opts Options, r *Run, log *slog.Logger) error {
	cursor := nilUUID
	minAge := opts.MinAge.Seconds()
	for {
		var b batch
		var deleted int64
		err := c.db.WithTx(ctx, func(tx database.Tx) error {
			b, deleted = batch{}, 0
			if err := tx.GetContext(ctx, &b, selectBatchSQL, cursor, minAge, opts.BatchSize); err != nil {
				return fmt.Errorf("select batch: %w", err)
			}
			if len(b.IDs) == 0 {
				return nil
			}
			// locks.DeleteUnreferenced re-checks, with the statement's
			// fresh snapshot, that nothing references each lock (a
			// reference committed after the candidate scan but before the
			// row lock is seen there) and records the collected events.
			n, err := locks.DeleteUnreferenced(ctx, tx, b.IDs)
			if err != nil {
				return fmt.Errorf("delete batch: %w", err)
			}
			deleted = n
			return nil
		})
		if err != nil && database.PQCode(err) == database.CodeForeignKeyViolation && len(b.IDs) > 0 {
			// A reference the re-check could not see: keep the batch's
			// referenced locks, collect the rest one by one.
			log.Warn("gc: a batch hit a foreign key; retrying it lock by lock", "locks", len(b.IDs), "error", err.Error())
			deleted, err = c.collectOneByOne(ctx, b.IDs, log)
		}
		if err != nil {
			return err
		}
		if b.Candidates == 0 {
			return nil
		}
		r.Batches++
		r.Scanned += int64(len(b.IDs))
		r.Deleted += deleted
		c.metrics.observeCollected(deleted)
		cursor = b.Cursor.String
		if b.Candidates < opts.BatchSize {
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
			n, err := locks.DeleteUnreferenced(ctx, tx, locked)
			if err != nil {
				return fmt.Errorf("delete lock: %w", err)
			}
			deleted = n
			return nil
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

// dryRunSQL lists the next batch of candidates past the cursor, each with
// whether it is old enough to be collected, without locking anything.
const dryRunSQL = `
WITH ` + unreferencedSQL + `
SELECT o.id, o.git_repository_url, o.cluster_user_id, COALESCE(u.name, '') AS owner_name, o.created_at,
       o.created_at < now() - make_interval(secs => $2) AS eligible
FROM unref
JOIN RepositoryLockOwner o ON o.id = unref.id
LEFT JOIN cluster_users u ON u.id = o.cluster_user_id
ORDER BY o.id`

// dryRun counts what collect would delete now, walking the same batches,
// and keeps the first DryRunSampleLimit candidates.
func (c *Collector) dryRun(ctx context.Context, opts Options, r *Run) error {
	cursor := nilUUID
	minAge := opts.MinAge.Seconds()
	r.WouldCollect = []Candidate{}
	type row struct {
		Candidate
		Eligible bool `db:"eligible"`
	}
	for {
		var rows []row
		if err := c.db.SelectContext(ctx, &rows, dryRunSQL, cursor, minAge, opts.BatchSize); err != nil {
			return fmt.Errorf("dry run: select batch: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		r.Batches++
		for _, cand := range rows {
			if !cand.Eligible {
				continue
			}
			r.Scanned++
			if len(r.WouldCollect) < DryRunSampleLimit {
				r.WouldCollect = append(r.WouldCollect, cand.Candidate)
			}
		}
		cursor = rows[len(rows)-1].LockID
		if len(rows) < opts.BatchSize {
			return nil
		}
	}
}
