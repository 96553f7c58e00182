package gc_test

import (
	"context"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
)

// TestRetention: a GC run deletes, in batches, the lock events past their
// retention (a coalesced denial counts from its last occurrence) and the
// finished runs that are both older than the run retention and not among
// the newest RunsKept; a dry run deletes nothing.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	// 23 events 100 days old (more than three batches of 7), 4 of 10 days,
	// and a denial first seen 100 days ago but last seen yesterday.
	mustExec(t, db, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, created_at)
		SELECT 'acquired', 'git.example.com/old/' || g, $1, 'alice', now() - interval '100 days' FROM generate_series(1, 23) g`, alice.ID)
	mustExec(t, db, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, created_at)
		SELECT 'released', 'git.example.com/recent/' || g, $1, 'alice', now() - interval '10 days' FROM generate_series(1, 4) g`, alice.ID)
	mustExec(t, db, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, created_at, last_at, count, denial_window)
		VALUES ('denied', 'git.example.com/busy', $1, 'alice', now() - interval '100 days', now() - interval '1 day', 40, now() - interval '100 days')`, alice.ID)
	// 20 finished runs 100 days old and 3 of 5 days.
	mustExec(t, db, `
		INSERT INTO gc_runs (kind, trigger, holder, status, min_age, batch_size, started_at, finished_at)
		SELECT 'gc', 'cli', 'h', 'succeeded', interval '1 minute', 10, now() - interval '100 days' + g * interval '1 second',
		       now() - interval '100 days' + g * interval '1 second'
		FROM generate_series(1, 20) g`)
	mustExec(t, db, `
		INSERT INTO gc_runs (kind, trigger, holder, status, min_age, batch_size, started_at, finished_at)
		SELECT 'gc', 'cli', 'h', 'succeeded', interval '1 minute', 10, now() - interval '5 days' + g * interval '1 second',
		       now() - interval '5 days' + g * interval '1 second'
		FROM generate_series(1, 3) g`)

	c := newCollector(db, gc.Config{Retention: gc.Retention{RunsKept: 8}})
	o := opts(7, time.Minute)
	o.DryRun = true
	if _, err := c.Collect(ctx, o); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM repository_lock_events`); n != 28 {
		t.Fatalf("after a dry run: %d events, want all 28", n)
	}
	if _, err := c.Collect(ctx, opts(7, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM repository_lock_events WHERE created_at < now() - interval '90 days' AND last_at IS NULL`); n != 0 {
		t.Fatalf("%d events past retention remain", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM repository_lock_events`); n != 5 {
		t.Fatalf("%d events remain, want the 4 recent ones and the denial seen yesterday", n)
	}
	// Runs: 23 seeded + the dry run + this run = 25. The newest 8 are kept
	// (this run, the dry run, the 3 recent, 3 of the old ones); the 3 recent
	// would be kept anyway; the other 17 old ones go.
	if n := countRows(t, db, `SELECT count(*) FROM gc_runs`); n != 8 {
		t.Fatalf("%d gc runs remain, want 8", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM gc_runs WHERE started_at < now() - interval '90 days'`); n != 3 {
		t.Fatalf("%d old gc runs remain, want the 3 among the newest 8", n)
	}
}

// TestRetentionValidate: a retention shorter than a day is refused.
func TestRetentionValidate(t *testing.T) {
	for _, tc := range []struct {
		r  gc.Retention
		ok bool
	}{
		{gc.Retention{}, true},
		{gc.Retention{Events: -1, Runs: -1}, true},
		{gc.Retention{Events: 24 * time.Hour}, true},
		{gc.Retention{Events: 90 * time.Second}, false},
		{gc.Retention{Runs: time.Hour}, false},
	} {
		if err := tc.r.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok=%v", tc.r, err, tc.ok)
		}
	}
}
