package gc

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/pagetoken"
	"github.com/repolock/repolock/internal/repostate"
)

func insertRun(ctx context.Context, q database.Querier, r *Run) error {
	return q.QueryRowxContext(ctx, `
		INSERT INTO gc_runs (kind, trigger, holder, dry_run, full_scan, min_age, batch_size)
		VALUES ($1, $2, $3, $4, $5, make_interval(secs => $6), $7)
		RETURNING id, started_at`,
		r.Kind, r.Trigger, r.Holder, r.DryRun, r.Full, r.MinAgeSeconds, r.BatchSize,
	).Scan(&r.ID, &r.StartedAt)
}

func finishRun(ctx context.Context, q database.Querier, r *Run) error {
	var cs, cc, cf, csi sql.NullInt64
	var crd sql.NullInt64
	if cl := r.Cleaner; cl != nil {
		cs = sql.NullInt64{Int64: int64(cl.Scanned), Valid: true}
		cc = sql.NullInt64{Int64: int64(cl.Cleaned), Valid: true}
		cf = sql.NullInt64{Int64: int64(cl.Failed), Valid: true}
		csi = sql.NullInt64{Int64: int64(cl.StaleInitial), Valid: true}
		crd = sql.NullInt64{Int64: cl.RowsDeleted, Valid: true}
	}
	var finished time.Time
	err := q.QueryRowxContext(ctx, `
		UPDATE gc_runs SET
			status = $2, finished_at = greatest(clock_timestamp(), started_at),
			scanned = $3, deleted = $4, batches = $5,
			cleaner_scanned = $6, cleaner_cleaned = $7, cleaner_failed = $8,
			cleaner_stale_initial = $9, cleaner_rows_deleted = $10,
			error = $11, candidates = $12, cleared = $13, flagged = $14
		WHERE id = $1
		RETURNING finished_at`,
		r.ID, r.Status, r.Scanned, r.Deleted, r.Batches,
		cs, cc, cf, csi, crd, sql.NullString{String: r.Error, Valid: r.Error != ""},
		r.Candidates, r.Cleared, r.Flagged,
	).Scan(&finished)
	if err != nil {
		return err
	}
	r.FinishedAt = &finished
	r.DurationSeconds = finished.Sub(r.StartedAt).Seconds()
	return nil
}

// abandonRuns marks the runs left running by processes that stopped. It is
// called by the holder of the lease, so no other run is legitimately in
// progress.
func abandonRuns(ctx context.Context, q database.Querier) (int64, error) {
	res, err := q.ExecContext(ctx, `
		UPDATE gc_runs
		SET status = 'abandoned', finished_at = greatest(clock_timestamp(), started_at),
		    error = 'the process running it stopped before finishing (its lease expired)'
		WHERE status = 'running'`)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// succeededWithin reports whether a run of kind (not a dry run) succeeded
// that started within d.
func succeededWithin(ctx context.Context, q database.Querier, kind Kind, d time.Duration) (bool, error) {
	var ok bool
	err := q.GetContext(ctx, &ok, `
		SELECT EXISTS (
			SELECT 1 FROM gc_runs
			WHERE started_at > now() - make_interval(secs => $2)
			  AND kind = $1 AND status = 'succeeded' AND NOT dry_run)`,
		kind, d.Seconds())
	return ok, err
}

// runRow is a gc_runs row as read.
type runRow struct {
	ID                  string          `db:"id"`
	Kind                Kind            `db:"kind"`
	Trigger             Trigger         `db:"trigger"`
	Holder              string          `db:"holder"`
	Status              Status          `db:"status"`
	DryRun              bool            `db:"dry_run"`
	Full                bool            `db:"full_scan"`
	MinAgeSeconds       float64         `db:"min_age_seconds"`
	BatchSize           int             `db:"batch_size"`
	Scanned             int64           `db:"scanned"`
	Deleted             int64           `db:"deleted"`
	Batches             int             `db:"batches"`
	Candidates          int64           `db:"candidates"`
	Cleared             int64           `db:"cleared"`
	Flagged             int64           `db:"flagged"`
	CleanerScanned      sql.NullInt64   `db:"cleaner_scanned"`
	CleanerCleaned      sql.NullInt64   `db:"cleaner_cleaned"`
	CleanerFailed       sql.NullInt64   `db:"cleaner_failed"`
	CleanerStaleInitial sql.NullInt64   `db:"cleaner_stale_initial"`
	CleanerRowsDeleted  sql.NullInt64   `db:"cleaner_rows_deleted"`
	StartedAt           time.Time       `db:"started_at"`
	FinishedAt          sql.NullTime    `db:"finished_at"`
	DurationSeconds     sql.NullFloat64 `db:"duration_seconds"`
	Error               sql.NullString  `db:"error"`
}

func (rr runRow) run() Run {
	r := Run{
		ID: rr.ID, Kind: rr.Kind, Trigger: rr.Trigger, Holder: rr.Holder, Status: rr.Status,
		DryRun: rr.DryRun, Full: rr.Full, MinAgeSeconds: rr.MinAgeSeconds, BatchSize: rr.BatchSize,
		Candidates: rr.Candidates, Scanned: rr.Scanned, Deleted: rr.Deleted, Cleared: rr.Cleared,
		Flagged: rr.Flagged, Batches: rr.Batches,
		StartedAt: rr.StartedAt, DurationSeconds: rr.DurationSeconds.Float64, Error: rr.Error.String,
	}
	if rr.FinishedAt.Valid {
		t := rr.FinishedAt.Time
		r.FinishedAt = &t
	}
	if rr.CleanerScanned.Valid {
		r.Cleaner = &repostate.CleanerResult{
			Scanned:      int(rr.CleanerScanned.Int64),
			Cleaned:      int(rr.CleanerCleaned.Int64),
			Failed:       int(rr.CleanerFailed.Int64),
			StaleInitial: int(rr.CleanerStaleInitial.Int64),
			RowsDeleted:  rr.CleanerRowsDeleted.Int64,
		}
	}
	return r
}

const runColumns = `
	id, kind, trigger, holder, status, dry_run, full_scan,
	extract(epoch FROM min_age)::double precision AS min_age_seconds, batch_size,
	scanned, deleted, batches, candidates, cleared, flagged,
	cleaner_scanned, cleaner_cleaned, cleaner_failed, cleaner_stale_initial, cleaner_rows_deleted,
	started_at, finished_at,
	extract(epoch FROM finished_at - started_at)::double precision AS duration_seconds,
	error`

// ListRuns returns recorded runs, newest first, limit at a time. pageToken
// is empty for the first page and the returned next token for the others;
// the next token is empty on the last page.
func (c *Collector) ListRuns(ctx context.Context, limit int, pageToken string) (_ []Run, _ string, err error) {
	defer repolock.WrapOp(&err, "gc.ListRuns")
	if limit < 1 {
		return nil, "", repolock.Errorf(repolock.EInvalid, "limit must be positive")
	}
	var rows []runRow
	if pageToken == "" {
		err = c.db.SelectContext(ctx, &rows, `SELECT `+runColumns+` FROM gc_runs
			ORDER BY started_at DESC, id DESC LIMIT $1`, limit+1)
	} else {
		after, _, perr := pagetoken.Decode[pagetoken.TimeID](pagetoken.KindGCRuns, "", pageToken)
		if perr != nil {
			return nil, "", perr
		}
		err = c.db.SelectContext(ctx, &rows, `SELECT `+runColumns+` FROM gc_runs
			WHERE (started_at, id) < ($1, $2)
			ORDER BY started_at DESC, id DESC LIMIT $3`, after.CreatedAt, after.ID, limit+1)
	}
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rows, next := pagetoken.Trim(rows, limit, func(last runRow) string {
		return pagetoken.Encode(pagetoken.KindGCRuns, "", pagetoken.TimeID{CreatedAt: last.StartedAt, ID: last.ID})
	})
	runs := make([]Run, len(rows))
	for i, rr := range rows {
		runs[i] = rr.run()
	}
	return runs, next, nil
}

// LastRun returns the newest recorded run (any kind) that is a dry run
// when dryRun is true, a real one when false; nil when none is recorded.
// It walks the runs newest first (gc_runs_started_at_idx): retention bounds
// the table.
func (c *Collector) LastRun(ctx context.Context, dryRun bool) (_ *Run, err error) {
	defer repolock.WrapOp(&err, "gc.LastRun")
	var rr runRow
	err = c.db.GetContext(ctx, &rr, `SELECT `+runColumns+` FROM gc_runs
		WHERE dry_run = $1 ORDER BY started_at DESC, id DESC LIMIT 1`, dryRun)
	if database.IsNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, database.MapError(err)
	}
	r := rr.run()
	return &r, nil
}

// GetRun returns one recorded run.
func (c *Collector) GetRun(ctx context.Context, id string) (_ Run, err error) {
	defer repolock.WrapOp(&err, "gc.GetRun")
	if !isUUID(id) {
		return Run{}, repolock.Errorf(repolock.ENotFound, "gc run %s not found", id)
	}
	var rr runRow
	err = c.db.GetContext(ctx, &rr, `SELECT `+runColumns+` FROM gc_runs WHERE id = $1`, id)
	if database.IsNoRows(err) {
		return Run{}, repolock.Errorf(repolock.ENotFound, "gc run %s not found", id)
	}
	if err != nil {
		return Run{}, database.MapError(err)
	}
	return rr.run(), nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
				return false
			}
		}
	}
	return true
}

// LastSuccess returns when the newest recorded successful run of kind (not
// a dry run) finished, whichever process ran it (a replica's loop, a
// CronJob, a timer, the API); ok is false when none is recorded. It walks
// the runs newest first (gc_runs_started_at_idx) up to the newest success:
// retention bounds the table.
func (c *Collector) LastSuccess(ctx context.Context, kind Kind) (_ time.Time, ok bool, err error) {
	defer repolock.WrapOp(&err, "gc.LastSuccess")
	var finished time.Time
	err = c.db.GetContext(ctx, &finished, `
		SELECT finished_at FROM gc_runs
		WHERE kind = $1 AND status = 'succeeded' AND NOT dry_run AND finished_at IS NOT NULL
		ORDER BY started_at DESC, id DESC LIMIT 1`, kind)
	if database.IsNoRows(err) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, database.MapError(err)
	}
	return finished, true, nil
}
