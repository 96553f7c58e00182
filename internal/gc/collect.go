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

// candidateScanSQL is the scan of a run: the next $3 candidates
// (gc_candidate, through the partial index repositorylockowner_gc_candidate_idx)
// past the cursor $1, in id order, each with whether anything references it
// at the statement's snapshot. Its cost is the number of candidates, not of
// locks: for each, two reference-index probes.
//
//   - The "unreferenced" condition is locks.UnreferencedSQL, whose $1
//     lower bound is the cursor.
//   - It is evaluated on the limited subquery, not next to the LIMIT: there
//     the planner sizes the NOT EXISTS subplans by every candidate it
//     expects past the cursor, not by the $3 it reads, and with many
//     candidates it hashes each reference index from the cursor on instead
//     of probing it (measured on 1M locks with 100,000 candidates: 100-180
//     ms per batch instead of 10-17 ms; at 10M it would read millions of
//     entries per batch). Sized by $3, a hash can only win over the probes
//     near the end of the id space, where few references are left to read.
const candidateScanSQL = `
scan AS MATERIALIZED (
    SELECT o.id, ` + locks.UnreferencedSQL + ` AS unreferenced
    FROM (
        SELECT o.id FROM RepositoryLockOwner o
        WHERE o.gc_candidate AND o.id > $1
        ORDER BY o.id
        LIMIT $3
    ) o
)`

// fullScanSQL is the scan of a full run (Options.Full, the repair mode): the
// next $3 locks past the cursor $1 that nothing references, flagged or not.
// It merges three indexes in id order (the primary key and the two lock_id
// indexes), all with index-only scans, so a run reads every entry of them:
// its time grows with the table.
//
//   - The redundant "lock_id >= $1" bounds of locks.UnreferencedSQL matter
//     here: the planner does not carry o.id > $1 over to the reference
//     tables by itself, and without them every batch re-reads the reference
//     indexes from the start (measured on 1M locks: 690 ms instead of 22 ms
//     for a batch in the middle).
//   - No row lock is taken here: with FOR UPDATE in the same query block,
//     Postgres needs the ctid of every joined reference row (for its
//     recheck), which turns the index-only scans into heap scans.
const fullScanSQL = `
scan AS MATERIALIZED (
    SELECT o.id, true AS unreferenced
    FROM RepositoryLockOwner o
    WHERE o.id > $1
      AND ` + locks.UnreferencedSQL + `
    ORDER BY o.id
    LIMIT $3
)`

// lockBatchSQL follows a scan: it locks, with SKIP LOCKED (a lock another
// transaction holds a conflicting row lock on is passed over, never waited
// on):
//
//   - doomed: the unreferenced ones older than the minimum age ($2
//     seconds), FOR UPDATE, to be deleted. A request that is writing a
//     reference holds FOR KEY SHARE on the lock row, so such a lock is
//     skipped.
//   - kept: the referenced ones, FOR NO KEY UPDATE, to have their flag
//     cleared. That lock does not conflict with the FOR KEY SHARE of
//     acquirers and foreign-key checks (creates are never held up by it);
//     it conflicts with the FOR NO KEY UPDATE a reference removal's trigger
//     takes before flagging the lock (locks.ClearCandidates).
//
// Unreferenced candidates younger than the minimum age stay flagged and
// untouched. It returns how many locks the scan found, the last one (the
// next cursor), the ids of each kind, and every unreferenced id (a full run
// flags them).
const lockBatchSQL = `,
doomed AS (
    SELECT o.id
    FROM RepositoryLockOwner o
    JOIN scan s ON s.id = o.id
    WHERE s.unreferenced AND o.created_at < now() - make_interval(secs => $2)
    FOR UPDATE OF o SKIP LOCKED
),
kept AS (
    SELECT o.id
    FROM RepositoryLockOwner o
    JOIN scan s ON s.id = o.id
    WHERE NOT s.unreferenced
    FOR NO KEY UPDATE OF o SKIP LOCKED
)
SELECT
    (SELECT count(*) FROM scan) AS found,
    (SELECT id FROM scan ORDER BY id DESC LIMIT 1) AS cursor,
    COALESCE((SELECT array_agg(id ORDER BY id) FROM doomed), '{}') AS doomed,
    COALESCE((SELECT array_agg(id ORDER BY id) FROM kept), '{}') AS kept,
    COALESCE((SELECT array_agg(id ORDER BY id) FROM scan WHERE unreferenced), '{}') AS unreferenced`

// The batch statements of the two scans.
const (
	selectBatchSQL     = `WITH ` + candidateScanSQL + lockBatchSQL
	selectFullBatchSQL = `WITH ` + fullScanSQL + lockBatchSQL
)

// selectOneSQL locks one lock of a batch being retried lock by lock.
const selectOneSQL = `
SELECT o.id
FROM RepositoryLockOwner o
WHERE o.id = $1 AND ` + locks.UnreferencedSQL + `
FOR UPDATE OF o SKIP LOCKED`

type batch struct {
	Found        int            `db:"found"`
	Cursor       sql.NullString `db:"cursor"`
	Doomed       pq.StringArray `db:"doomed"`
	Kept         pq.StringArray `db:"kept"`
	Unreferenced pq.StringArray `db:"unreferenced"`
}

// collect runs the passes of a run: a full run first walks every lock
// (flagging the unreferenced ones it finds without the flag), then every
// run walks the candidates.
func (c *Collector) collect(ctx context.Context, opts Options, r *Run, log *slog.Logger) error {
	// Issue 25: expired handover offers no longer pin their locks; delete
	// them (handover_expired events) before the scan, which then collects
	// their locks if nothing references them.
	if err := c.locks.DeleteExpiredHandovers(ctx, opts.BatchSize); err != nil {
		return fmt.Errorf("delete expired handovers: %w", err)
	}
	if opts.Full {
		if err := c.collectPass(ctx, selectFullBatchSQL, true, opts, r, log); err != nil {
			return err
		}
	}
	return c.collectPass(ctx, selectBatchSQL, false, opts, r, log)
}

// collectPass runs batches of one scan until one comes back short. Each
// batch is one transaction: scan and lock; (full) flag the unreferenced
// locks found without the flag; delete the doomed ones that nothing
// references now; clear the flag of the locked ones something references.
func (c *Collector) collectPass(ctx context.Context, query string, full bool, opts Options, r *Run, log *slog.Logger) error {
	cursor := nilUUID
	minAge := opts.MinAge.Seconds()
	for {
		var (
			b                         batch
			deleted, cleared, flagged int64
		)
		err := c.db.WithTx(ctx, func(tx database.Tx) error {
			b, deleted, cleared, flagged = batch{}, 0, 0, 0
			if err := tx.GetContext(ctx, &b, query, cursor, minAge, opts.BatchSize); err != nil {
				return fmt.Errorf("select batch: %w", err)
			}
			var err error
			if full {
				if flagged, err = c.locks.FlagCandidates(ctx, tx, b.Unreferenced); err != nil {
					return fmt.Errorf("flag candidates: %w", err)
				}
			}
			// locks.DeleteUnreferenced re-checks, with the statement's
			// fresh snapshot, that nothing references each lock (a
			// reference committed after the scan but before the row lock
			// is seen there) and records the collected events.
			if deleted, err = c.locks.DeleteUnreferenced(ctx, tx, b.Doomed); err != nil {
				return fmt.Errorf("delete batch: %w", err)
			}
			// The doomed locks still here were referenced by the delete's
			// snapshot; with the kept ones, they lose their flag.
			if cleared, err = c.locks.ClearCandidates(ctx, tx, append(append([]string{}, b.Doomed...), b.Kept...)); err != nil {
				return fmt.Errorf("clear candidates: %w", err)
			}
			return nil
		})
		if err != nil && referenceAppeared(err) && len(b.Doomed) > 0 {
			// A reference the re-check could not see: keep the batch's
			// referenced locks, collect the rest one by one (flags are left
			// for the next run).
			log.Warn("gc: a batch hit a foreign key; retrying it lock by lock", "locks", len(b.Doomed), "error", err.Error())
			cleared, flagged = 0, 0
			deleted, err = c.collectOneByOne(ctx, b.Doomed, log)
		}
		if err != nil {
			return err
		}
		if b.Found == 0 {
			return nil
		}
		r.Batches++
		if !full {
			r.Candidates += int64(b.Found)
		}
		r.Scanned += int64(len(b.Doomed))
		r.Deleted += deleted
		r.Cleared += cleared
		r.Flagged += flagged
		c.metrics.observeCollected(deleted)
		c.locks.Metrics().Collected(deleted)
		cursor = b.Cursor.String
		if b.Found < opts.BatchSize {
			return nil
		}
	}
}

// referenceAppeared reports whether a delete of locks failed because a
// reference to one of them appeared meanwhile: the foreign key refused it
// (23503), or the reference was inserted by a trigger of the delete itself
// and the ownership figures' reference trigger (migration 000023) then
// updated the lock being deleted (27000, triggered_data_change_violation).
func referenceAppeared(err error) bool {
	code := database.PQCode(err)
	return code == database.CodeForeignKeyViolation || code == "27000"
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
			n, err := c.locks.DeleteUnreferenced(ctx, tx, locked)
			if err != nil {
				return fmt.Errorf("delete lock: %w", err)
			}
			deleted = n
			return nil
		})
		if referenceAppeared(err) {
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

// dryRunSelectSQL follows a scan: the locks it found, each with whether
// it is old enough to be collected and whether it has the flag, without
// locking anything.
const dryRunSelectSQL = `
SELECT o.id, o.git_repository_url, o.cluster_user_id, COALESCE(u.name, '') AS owner_name, o.created_at,
       o.created_at < now() - make_interval(secs => $2) AS eligible, s.unreferenced, o.gc_candidate
FROM scan s
JOIN RepositoryLockOwner o ON o.id = s.id
LEFT JOIN cluster_users u ON u.id = o.cluster_user_id
ORDER BY o.id`

// The dry-run statements of the two scans.
const (
	dryRunSQL     = `WITH ` + candidateScanSQL + dryRunSelectSQL
	dryRunFullSQL = `WITH ` + fullScanSQL + dryRunSelectSQL
)

// dryRun counts what collect would delete now, walking the same batches,
// and keeps the first DryRunSampleLimit candidates. A full dry run walks
// every lock instead of the candidates, and also counts the unreferenced
// locks that have no flag (Flagged: what a full run would repair).
func (c *Collector) dryRun(ctx context.Context, opts Options, r *Run) error {
	query := dryRunSQL
	if opts.Full {
		query = dryRunFullSQL
	}
	cursor := nilUUID
	minAge := opts.MinAge.Seconds()
	r.WouldCollect = []Candidate{}
	type row struct {
		Candidate
		Eligible     bool `db:"eligible"`
		Unreferenced bool `db:"unreferenced"`
		Flag         bool `db:"gc_candidate"`
	}
	for {
		var rows []row
		if err := c.db.SelectContext(ctx, &rows, query, cursor, minAge, opts.BatchSize); err != nil {
			return fmt.Errorf("dry run: select batch: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		r.Batches++
		if !opts.Full {
			r.Candidates += int64(len(rows))
		}
		for _, cand := range rows {
			if opts.Full && !cand.Flag {
				r.Flagged++
			}
			if !cand.Eligible || !cand.Unreferenced {
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
