package syncstate

import (
	"context"
	"database/sql"

	"github.com/repolock/repolock/internal/database"
)

// The one-statement-per-event path: the oracle of TestBatchMatchesOneByOne
// and TestBatchIsAllOrNothing and the baseline of BenchmarkApplyEvents. The
// server never runs it: 10,000 events would be 10,000 or more round trips in
// one transaction holding a connection (issue 29).

// applyEventsOneByOne is ApplyEvents with one UPDATE per event.
func (s *Store) applyEventsOneByOne(ctx context.Context, tenantID, host string, events []Event) (EventsResult, error) {
	return s.applyEvents(ctx, tenantID, host, events, applyOneByOne, 0)
}

// applyOneByOne: one UPDATE per event, in order. An event that updates
// nothing is a replay, an event in a gap, or the first event of a new
// repository: an INSERT ... ON CONFLICT DO NOTHING creates the latter, and
// when a concurrent batch created it first the UPDATE runs again.
func applyOneByOne(ctx context.Context, tx database.Tx, tenantID string, h hostRow, events []Event) (int, error) {
	update, err := tx.PrepareContext(ctx, applyOneEventSQL)
	if err != nil {
		return 0, database.MapError(err)
	}
	defer update.Close()
	insert, err := tx.PrepareContext(ctx, insertFirstEventSQL)
	if err != nil {
		return 0, database.MapError(err)
	}
	defer insert.Close()
	exec := func(stmt *sql.Stmt, args ...any) (int64, error) {
		r, err := stmt.ExecContext(ctx, args...)
		if err != nil {
			return 0, database.MapError(err)
		}
		n, err := r.RowsAffected()
		return n, database.MapError(err)
	}
	applied := 0
	for _, e := range events {
		n, err := exec(update, tenantID, e.Repo, h.ID, h.FirstCursorSinceReset, e.Rev, e.TooBig)
		if err == nil && n == 0 {
			n, err = exec(insert, tenantID, e.Repo, h.ID, h.FirstCursorSinceReset, e.Rev)
			if err == nil && n == 0 {
				n, err = exec(update, tenantID, e.Repo, h.ID, h.FirstCursorSinceReset, e.Rev, e.TooBig)
			}
		}
		if err != nil {
			return 0, err
		}
		applied += int(n)
	}
	return applied, nil
}

// applyOneEventSQL is the per-event rule as one UPDATE: $1 tenant, $2 repo,
// $3 host id, $4 the host's first_cursor_since_reset, $5 rev, $6 too_big.
// The WHERE clause skips replays (rule 1) and events in a gap (rule 4), so
// the row count is 1 for an event that changed the repository and 0
// otherwise (or when the repository does not exist yet).
const applyOneEventSQL = `
	UPDATE sync_repositories r SET
		host_id = $3,
		first_cursor_since_reset = CASE
			WHEN r.host_id <> $3 THEN $4
			ELSE GREATEST(r.first_cursor_since_reset, $4) END,
		first_rev_since_reset = CASE
			WHEN $6 OR r.host_id <> $3 OR r.first_cursor_since_reset < $4
				OR GREATEST(r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev) IS NULL
			THEN $5
			ELSE r.first_rev_since_reset END,
		last_firehose_rev = CASE
			WHEN $6 OR r.host_id <> $3 OR r.first_cursor_since_reset < $4
				OR GREATEST(r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev) IS NULL
			THEN r.last_firehose_rev
			ELSE $5 END,
		updated_at = now()
	WHERE r.cluster_user_id = $1 AND r.repo = $2
		AND (GREATEST(r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev) IS NULL
			OR $5 > GREATEST(r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev))
		AND ($6 OR r.host_id <> $3 OR r.first_cursor_since_reset < $4
			OR GREATEST(r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev) IS NULL
			OR r.first_rev_since_reset IS NULL
			OR GREATEST(r.last_indexed_rev, r.last_firehose_rev) >= r.first_rev_since_reset)`

// insertFirstEventSQL creates a repository from its first event (rule 3:
// new): $1 tenant, $2 repo, $3 host id, $4 the host's
// first_cursor_since_reset, $5 rev.
const insertFirstEventSQL = `
	INSERT INTO sync_repositories (cluster_user_id, repo, host_id, first_cursor_since_reset, first_rev_since_reset)
	VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (cluster_user_id, repo) DO NOTHING`
