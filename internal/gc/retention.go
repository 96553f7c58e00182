package gc

import (
	"context"
	"log/slog"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// Retention defaults: lock events are kept 90 days; GC runs are kept when
// they are among the newest 1,000 or younger than 90 days.
const (
	DefaultEventRetention = 90 * 24 * time.Hour
	DefaultRunRetention   = 90 * 24 * time.Hour
	DefaultRunsKept       = 1000
)

// Retention bounds the audit tables. Every GC run that is not a dry run
// enforces it after collecting, in batches of the run's batch size (one
// transaction each), so neither table grows forever. Zero values select
// the defaults; a negative duration keeps rows forever.
type Retention struct {
	// Events is how long repository_lock_events rows are kept after their
	// last occurrence.
	Events time.Duration
	// Runs is how long finished gc_runs rows are kept, and RunsKept how
	// many of the newest are kept whatever their age.
	Runs     time.Duration
	RunsKept int
}

func (r Retention) withDefaults() Retention {
	if r.Events == 0 {
		r.Events = DefaultEventRetention
	}
	if r.Runs == 0 {
		r.Runs = DefaultRunRetention
	}
	if r.RunsKept <= 0 {
		r.RunsKept = DefaultRunsKept
	}
	return r
}

// Validate refuses a retention shorter than a day (a typo such as 90s for
// 90d would erase the audit trail).
func (r Retention) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"event retention", r.Events}, {"gc run retention", r.Runs}} {
		if d.v > 0 && d.v < 24*time.Hour {
			return repolock.Errorf(repolock.EInvalid, "%s must be at least 24h (or negative to keep rows forever), got %s", d.name, d.v)
		}
	}
	return nil
}

// enforceRetention deletes, in batches, the lock events and the GC runs past
// their retention.
func (c *Collector) enforceRetention(ctx context.Context, batch int, log *slog.Logger) error {
	ret := c.retention
	var events, runs int64
	if ret.Events > 0 {
		for {
			var n int64
			err := c.db.WithTx(ctx, func(tx database.Tx) error {
				var err error
				n, err = c.locks.DeleteOldEvents(ctx, tx, ret.Events, batch)
				return err
			})
			if err != nil {
				return err
			}
			events += n
			if n < int64(batch) {
				break
			}
		}
	}
	if ret.Runs > 0 {
		for {
			n, err := deleteOldRuns(ctx, c.db, ret.Runs, ret.RunsKept, batch)
			if err != nil {
				return err
			}
			runs += n
			if n < int64(batch) {
				break
			}
		}
	}
	if events > 0 || runs > 0 {
		log.Info("gc: retention deleted old rows", "lock_events", events, "gc_runs", runs)
	}
	return nil
}

// deleteOldRuns deletes at most limit finished runs that started more than
// olderThan ago and are not among the keep newest.
func deleteOldRuns(ctx context.Context, q database.Querier, olderThan time.Duration, keep, limit int) (int64, error) {
	// Served by gc_runs_started_at_idx.
	res, err := q.ExecContext(ctx, `
		DELETE FROM gc_runs WHERE id IN (
			SELECT id FROM gc_runs
			WHERE status <> 'running'
			  AND started_at < now() - make_interval(secs => $1)
			  AND started_at < (SELECT coalesce(min(started_at), '-infinity') FROM (
			        SELECT started_at FROM gc_runs ORDER BY started_at DESC, id DESC LIMIT $2) newest)
			ORDER BY started_at
			LIMIT $3)`, olderThan.Seconds(), keep, limit)
	if err != nil {
		return 0, database.MapError(err)
	}
	return res.RowsAffected()
}
