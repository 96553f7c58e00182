package syncstate

import (
	"context"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// EventsResult is what ApplyEvents did.
type EventsResult struct {
	Host Host `json:"host"`
	// Applied counts the events that changed a repository; Ignored the
	// replayed ones (rev not above what the repository has recorded).
	Applied int `json:"applied"`
	Ignored int `json:"ignored"`
	// Reset is true when the batch's first event moved the host's
	// first_cursor_since_reset (after an outdated cursor notice or, in
	// strict mode, a cursor gap).
	Reset bool `json:"reset"`
}

// The per-event rule (design 001 with two corrections, see
// docs/syncstate.md), for an event at rev v of a repository R on host H whose
// first cursor since reset is Hf, where seen is greatest(R.last_indexed_rev,
// R.first_rev_since_reset, R.last_firehose_rev):
//
//  1. Replay: v <= seen, or v is not above the rev of an earlier event of R
//     in the same batch. Nothing changes.
//  2. Move: R is recorded on another host. host = H,
//     first_rev_since_reset = v, first_cursor_since_reset = Hf.
//  3. Reset: R.first_cursor_since_reset < Hf (the host's stream was
//     interrupted since R's indicators were set), R has no rev recorded at
//     all (it is new), or the event is too_big (records were dropped).
//     first_rev_since_reset = v, first_cursor_since_reset = greatest(R's,
//     Hf). last_firehose_rev does NOT advance (seeds README): the gap is
//     max(last_indexed_rev, last_firehose_rev) < first_rev_since_reset.
//  4. Gap: R already has a revision gap (first_rev_since_reset is set and
//     max(last_indexed_rev, last_firehose_rev) is unset or below it).
//     Nothing changes: advancing last_firehose_rev now would close the gap
//     without the records it stands for (the design's overview: the last
//     complete rev moves with the stream only while there is no gap). The
//     uninterrupted interval [first_rev_since_reset, now) grows by itself.
//  5. Otherwise last_firehose_rev = v.
//
// Then the host's cursor is raised to the batch's last cursor.
//
// ApplyEvents computes that rule's end state with set-based SQL, a few
// statements per batch whatever its size (applyBatch). The rule run with one
// statement per event (applyEventsOneByOne, onebyone_test.go) lives only in
// the tests: it is the oracle of the differential test and the baseline of
// the benchmark.

// ApplyEvents applies a batch of one host's events, in cursor order, in one
// transaction. Cursors must be strictly increasing within the batch. Events
// for repositories not yet known create them. Replayed events change
// nothing, so a batch may be re-sent after a crash.
func (s *Store) ApplyEvents(ctx context.Context, tenantID, host string, events []Event) (_ EventsResult, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.ApplyEvents")
	return s.applyEvents(ctx, tenantID, host, events, applyBatch, 0)
}

// ApplyEventsFenced is ApplyEvents guarded by a lease's fencing token (0:
// unguarded) on HostGuard(host), checked in the batch's transaction.
func (s *Store) ApplyEventsFenced(ctx context.Context, tenantID, host string, events []Event, fencingToken int64) (_ EventsResult, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.ApplyEvents")
	if err := validateToken(fencingToken); err != nil {
		return EventsResult{}, err
	}
	return s.applyEvents(ctx, tenantID, host, events, applyBatch, fencingToken)
}

// applyFunc applies events to the repositories of host h (locked, with its
// first_cursor_since_reset already moved by the batch's first event) and
// returns how many events changed a repository.
type applyFunc func(ctx context.Context, tx database.Tx, tenantID string, h hostRow, events []Event) (int, error)

func (s *Store) validateEvents(host string, events []Event) error {
	if err := ValidateHostName(host); err != nil {
		return err
	}
	if len(events) == 0 {
		return repolock.Errorf(repolock.EInvalid, "events must hold at least one event")
	}
	if len(events) > MaxBatch {
		return repolock.Errorf(repolock.EInvalid, "a batch holds at most %d events, got %d", MaxBatch, len(events))
	}
	for i, e := range events {
		if err := validateCursor("cursor", e.Cursor); err != nil {
			return eventError(i, err)
		}
		if i > 0 && e.Cursor <= events[i-1].Cursor {
			return repolock.Errorf(repolock.EInvalid,
				"events[%d]: cursors must be strictly increasing within a batch (%d after %d)", i, e.Cursor, events[i-1].Cursor)
		}
		if err := ValidateRepo(e.Repo); err != nil {
			return eventError(i, err)
		}
		if err := s.ValidateRev(e.Rev); err != nil {
			return eventError(i, err)
		}
	}
	return nil
}

func eventError(i int, err error) error {
	return repolock.Wrap(repolock.ErrorCode(err), err, "events[%d]: %s", i, repolock.ErrorMessage(err))
}

func (s *Store) applyEvents(ctx context.Context, tenantID, host string, events []Event, apply applyFunc, fencingToken int64) (EventsResult, error) {
	if err := s.validateEvents(host, events); err != nil {
		return EventsResult{}, err
	}
	fresh := dropInBatchReplays(events)
	var res EventsResult
	err := s.db.WithTx(ctx, func(tx database.Tx) error {
		if err := checkFence(ctx, tx, tenantID, host, fencingToken); err != nil {
			return err
		}
		// The host row lock serializes the batches of one host: its
		// cursor and first_cursor_since_reset are read and written here.
		h, err := getHost(ctx, tx, tenantID, host, true)
		if err != nil {
			return err
		}
		before := h.FirstCursorSinceReset
		outdated := h.ResetPending
		reset := h.firstEvent(events[0].Cursor)
		s.warnBackwards(ctx, h, events[0].Cursor, before, outdated)
		applied, err := apply(ctx, tx, tenantID, h, fresh)
		if err != nil {
			return err
		}
		last := events[len(events)-1].Cursor
		saved, err := saveHost(ctx, tx, h, &last, reset, false)
		if err != nil {
			return err
		}
		res = EventsResult{Host: saved.host(), Applied: applied, Ignored: len(events) - applied, Reset: reset}
		return nil
	})
	return res, err
}

// dropInBatchReplays returns the events whose rev is above the revs of every
// earlier event of the same repository in the batch (rule 1's second half).
// Both apply functions get only those: within what they get, each
// repository's revs strictly increase with the cursor.
func dropInBatchReplays(events []Event) []Event {
	highest := make(map[string]string, len(events))
	out := make([]Event, 0, len(events))
	for _, e := range events {
		if prev, ok := highest[e.Repo]; ok && e.Rev <= prev {
			continue
		}
		highest[e.Repo] = e.Rev
		out = append(out, e)
	}
	return out
}

// applyBatch applies the whole batch with one set-based statement,
// applyBatchSQL, in the common case where every repository of the batch
// already exists, and with two otherwise.
//
// applyBatchSQL locks the batch's repositories in repo order (SELECT ... FOR
// NO KEY UPDATE, which in READ COMMITTED returns each row's latest version
// once locked), computes every repository's end state from the events and
// updates each row once. When some repositories do not exist yet it updates
// nothing and reports how many it found; the savepoint is then rolled back,
// which releases the row locks it took, and one INSERT ... ON CONFLICT pass
// creates the missing repositories and locks all of them, again in repo
// order, before applyBatchSQL runs again. Either way a transaction takes its
// row locks in a single pass in repo order, as listings do (index results
// lock one row), so writers cannot deadlock; taking locks on existing rows
// first and creating new ones after would (a listing holding an existing row
// while waiting for a row this batch is creating).
//
// The computation: within the batch (after dropInBatchReplays) each
// repository's revs increase, so its events that are not replays of stored
// revs (v > seen) form a suffix of its events. Call the first of them
// "first". An event records a reset ("resets") when it is too_big, or when it
// is first and the repository moved, is behind its host's cursor or is new
// (rules 2 and 3). Once a reset is recorded, or when the repository started
// in a gap, every later event is in a gap (rule 4): only too_big ones still
// record a reset. Before that, events advance last_firehose_rev (rule 5).
// Revs increase, so the final first_rev_since_reset is the largest rev of
// the events that reset, and the final last_firehose_rev the largest of the
// events before the gap began.
func applyBatch(ctx context.Context, tx database.Tx, tenantID string, h hostRow, events []Event) (int, error) {
	cursors := make(pq.Int64Array, len(events))
	repos := make(pq.StringArray, len(events))
	revs := make(pq.StringArray, len(events))
	tooBig := make(pq.BoolArray, len(events))
	distinct := make(map[string]struct{}, len(events))
	for i, e := range events {
		cursors[i], repos[i], revs[i], tooBig[i] = e.Cursor, e.Repo, e.Rev, e.TooBig
		distinct[e.Repo] = struct{}{}
	}
	apply := func() (found, applied int, err error) {
		var out struct {
			Found   int `db:"found"`
			Applied int `db:"applied"`
		}
		err = tx.GetContext(ctx, &out, applyBatchSQL,
			tenantID, h.ID, h.FirstCursorSinceReset, cursors, repos, revs, tooBig, len(distinct))
		return out.Found, out.Applied, database.MapError(err)
	}

	if _, err := tx.ExecContext(ctx, `SAVEPOINT syncstate_batch`); err != nil {
		return 0, database.MapError(err)
	}
	found, applied, err := apply()
	if err != nil || found == len(distinct) {
		return applied, err
	}
	if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT syncstate_batch`); err != nil {
		return 0, database.MapError(err)
	}
	// New repositories are created as rows with no rev (rule 3: "no rev
	// recorded" resets). ON CONFLICT DO UPDATE ... WHERE false locks an
	// existing row without writing it, and waits for a concurrent
	// transaction creating the same repository.
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO sync_repositories AS r (cluster_user_id, repo, host_id, first_cursor_since_reset)
		SELECT $1, n.repo, $2, $3
		FROM (SELECT DISTINCT u.repo COLLATE "C" AS repo FROM unnest($4::text[]) AS u(repo)) n
		ORDER BY n.repo
		ON CONFLICT (cluster_user_id, repo) DO UPDATE SET updated_at = r.updated_at WHERE false`,
		tenantID, h.ID, h.FirstCursorSinceReset, repos); err != nil {
		return 0, database.MapError(err)
	}
	found, applied, err = apply()
	if err == nil && found != len(distinct) {
		// Only a concurrent deletion of the tenant or host removes rows.
		return 0, repolock.Errorf(repolock.EConflict, "repositories of the batch were deleted concurrently; retry")
	}
	return applied, err
}

// applyBatchSQL: $1 tenant, $2 host id, $3 the host's
// first_cursor_since_reset, $4..$7 the events' cursors, repos, revs and
// too_big flags, $8 the number of distinct repositories. Revs are cast to
// COLLATE "C" so the batch's own comparisons (max()) are byte-wise like the
// columns'. The UPDATE joins by id, not ctid: a row version committed after
// the statement's snapshot and before the lock is found through the
// snapshot's version and followed (EvalPlanQual). gap_from is the cursor from
// which a repository's events are in a gap: -1 when it started in one, else
// its first reset's cursor (NULL: never).
const applyBatchSQL = `
	WITH ev AS (
		SELECT e.cursor, e.repo COLLATE "C" AS repo, e.rev COLLATE "C" AS rev, e.too_big
		FROM unnest($4::bigint[], $5::text[], $6::text[], $7::boolean[]) AS e(cursor, repo, rev, too_big)
	),
	cur AS (
		SELECT r.id, r.repo, r.host_id, r.first_cursor_since_reset,
			r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev
		FROM sync_repositories r
		WHERE r.cluster_user_id = $1 AND r.repo = ANY($5::text[])
		ORDER BY r.repo
		FOR NO KEY UPDATE
	),
	found AS (
		SELECT count(*) AS n FROM cur
	),
	fresh AS (
		SELECT ev.cursor, ev.rev, ev.too_big, r.id,
			r.host_id <> $2::uuid AS moved,
			r.first_cursor_since_reset < $3
				OR GREATEST(r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev) IS NULL AS behind,
			r.first_rev_since_reset IS NOT NULL
				AND (GREATEST(r.last_indexed_rev, r.last_firehose_rev) IS NULL
					OR GREATEST(r.last_indexed_rev, r.last_firehose_rev) < r.first_rev_since_reset) AS in_gap,
			row_number() OVER (PARTITION BY r.id ORDER BY ev.cursor) AS n
		FROM ev JOIN cur r ON r.repo = ev.repo
		WHERE GREATEST(r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev) IS NULL
			OR ev.rev > GREATEST(r.last_indexed_rev, r.first_rev_since_reset, r.last_firehose_rev)
	),
	classified AS (
		SELECT f.*, f.too_big OR (f.n = 1 AND (f.moved OR f.behind)) AS resets
		FROM fresh f
	),
	phased AS (
		SELECT c.*,
			CASE WHEN c.in_gap THEN -1
				ELSE min(c.cursor) FILTER (WHERE c.resets) OVER (PARTITION BY c.id) END AS gap_from
		FROM classified c
	),
	per_repo AS (
		SELECT id,
			count(*) FILTER (WHERE resets OR gap_from IS NULL OR cursor < gap_from) AS applied,
			bool_or(n = 1 AND moved) AS moved,
			max(rev) FILTER (WHERE resets) AS first_rev,
			max(rev) FILTER (WHERE NOT resets AND (gap_from IS NULL OR cursor < gap_from)) AS firehose_rev
		FROM phased
		GROUP BY id
		HAVING count(*) FILTER (WHERE resets OR gap_from IS NULL OR cursor < gap_from) > 0
	),
	updated AS (
		UPDATE sync_repositories r SET
			host_id = $2::uuid,
			first_cursor_since_reset = CASE WHEN p.moved THEN $3
				ELSE GREATEST(r.first_cursor_since_reset, $3) END,
			first_rev_since_reset = COALESCE(p.first_rev, r.first_rev_since_reset),
			last_firehose_rev = COALESCE(p.firehose_rev, r.last_firehose_rev),
			updated_at = now()
		FROM per_repo p, found
		WHERE r.id = p.id AND found.n = $8
		RETURNING p.applied
	)
	SELECT (SELECT n FROM found) AS found, COALESCE((SELECT sum(applied) FROM updated), 0) AS applied`
