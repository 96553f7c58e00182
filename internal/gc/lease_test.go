package gc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
)

// blockRuns locks gc_runs so that a run that took the lease blocks right
// after (recording itself) until release is called. It is how the tests
// hold one run inside the lease while others try to start.
func blockRuns(t *testing.T, db *database.DB) (release func()) {
	t.Helper()
	tx, err := db.BeginTxx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(context.Background(), `LOCK TABLE gc_runs IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

// Only one run at a time: of runs started together by several collectors
// (as by several replicas), exactly one collects; the others are skipped,
// without error, while it runs.
func TestOnlyOneRunAtATime(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	tenant := dbtest.NewTenant(t, db, "t").ID
	for i := range 20 {
		dbtest.NewLock(t, db, tenant, fmt.Sprintf("git.example.com/t/%d", i), time.Hour)
	}
	release := blockRuns(t, db)

	const n = 8
	type result struct {
		run gc.Run
		err error
	}
	results := make(chan result, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var start sync.WaitGroup
	start.Add(1)
	for i := range n {
		c := newCollector(db, gc.Config{Holder: fmt.Sprintf("replica-%d", i)})
		go func() {
			start.Wait()
			run, err := c.Collect(ctx, opts(5, time.Minute))
			results <- result{run, err}
		}()
	}
	start.Done()

	// n-1 runs come back skipped while the winner is held inside the lease.
	for range n - 1 {
		r := <-results
		if r.err != nil {
			t.Fatalf("a concurrent run failed: %v", r.err)
		}
		if r.run.Status != gc.StatusSkipped || r.run.Reason != gc.ReasonAnotherRunning || r.run.ID != "" {
			t.Fatalf("a concurrent run = %+v; want skipped: %s", r.run, gc.ReasonAnotherRunning)
		}
	}
	release()
	r := <-results
	if r.err != nil || r.run.Status != gc.StatusSucceeded || r.run.Deleted != 20 {
		t.Fatalf("the winning run = %+v, %v; want succeeded with 20 deleted", r.run, r.err)
	}
	if got := countRows(t, db, `SELECT count(*) FROM gc_runs`); got != 1 {
		t.Fatalf("gc_runs rows = %d, want 1 (skipped runs are not recorded)", got)
	}
	if got := countRows(t, db, `SELECT count(*) FROM gc_leases`); got != 0 {
		t.Fatalf("lease not released")
	}
}

func TestLeaseHeldByAnotherProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		expiresIn  time.Duration
		wantStatus gc.Status
	}{
		{"unexpired lease: skipped", time.Hour, gc.StatusSkipped},
		{"expired lease of a dead holder: taken over", -time.Second, gc.StatusSucceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			tenant := dbtest.NewTenant(t, db, "t").ID
			dbtest.NewLock(t, db, tenant, "git.example.com/t/a", time.Hour)
			// The other process took the lease and recorded its run.
			mustExec(t, db, `INSERT INTO gc_leases (name, holder, acquired_at, expires_at)
				VALUES ('gc', 'other', now() - interval '1 hour', now() + make_interval(secs => $1))`, tt.expiresIn.Seconds())
			var otherRun string
			if err := db.GetContext(ctx, &otherRun, `INSERT INTO gc_runs (kind, trigger, holder, min_age, batch_size, started_at)
				VALUES ('gc', 'cli', 'other', interval '1 minute', 1000, now() - interval '1 hour') RETURNING id`); err != nil {
				t.Fatal(err)
			}

			run, err := newCollector(db, gc.Config{Holder: "me"}).Collect(ctx, opts(10, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if run.Status != tt.wantStatus {
				t.Fatalf("status = %s, want %s", run.Status, tt.wantStatus)
			}
			other, err := newCollector(db, gc.Config{}).GetRun(ctx, otherRun)
			if err != nil {
				t.Fatal(err)
			}
			switch tt.wantStatus {
			case gc.StatusSkipped:
				// The other holder's lease and run are untouched.
				if n := countRows(t, db, `SELECT count(*) FROM gc_leases WHERE holder = 'other'`); n != 1 {
					t.Fatal("the other holder lost its lease")
				}
				if other.Status != gc.StatusRunning || other.FinishedAt != nil {
					t.Fatalf("the other run = %+v, want still running", other)
				}
				if n := len(lockURLs(t, db)); n != 1 {
					t.Fatal("a skipped run deleted locks")
				}
			case gc.StatusSucceeded:
				// Taken over: the dead holder's run is marked abandoned.
				if other.Status != gc.StatusAbandoned || other.FinishedAt == nil ||
					other.Error != "the process running it stopped before finishing (its lease expired)" {
					t.Fatalf("the dead holder's run = %+v, want abandoned", other)
				}
				if run.Deleted != 1 {
					t.Fatalf("deleted = %d, want 1", run.Deleted)
				}
				if n := countRows(t, db, `SELECT count(*) FROM gc_leases`); n != 0 {
					t.Fatal("lease not released")
				}
			}
		})
	}
}

// A run whose lease is taken over (it stalled past the TTL and another
// process took the lease) stops instead of running alongside the new holder.
func TestRunStopsWhenLeaseIsLost(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	tenant := dbtest.NewTenant(t, db, "t").ID
	dbtest.NewLock(t, db, tenant, "git.example.com/t/a", time.Hour)
	release := blockRuns(t, db)

	leased := make(chan string, 1)
	c := newCollector(db, gc.Config{Holder: "stalled", LeaseTTL: 300 * time.Millisecond, Signals: gc.Signals{LeaseAcquired: leased}})
	done := make(chan error, 1)
	go func() {
		_, err := c.Collect(context.Background(), opts(10, time.Minute))
		done <- err
	}()
	<-leased
	mustExec(t, db, `UPDATE gc_leases SET holder = 'thief', expires_at = now() + interval '1 hour' WHERE name = 'gc'`)
	err := <-done
	release()
	if repolock.ErrorCode(err) != repolock.EConflict {
		t.Fatalf("err = %v, want conflict (lease lost)", err)
	}
	if n := len(lockURLs(t, db)); n != 1 {
		t.Fatal("the run that lost its lease deleted locks")
	}
	if n := countRows(t, db, `SELECT count(*) FROM gc_leases WHERE holder = 'thief'`); n != 1 {
		t.Fatal("the run that lost its lease released the new holder's lease")
	}
}

// The lease is renewed while a run works, so a run longer than the TTL keeps
// it and others are still skipped.
func TestLeaseIsRenewedDuringLongRuns(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	release := blockRuns(t, db)
	leased := make(chan string, 1)
	renewed := make(chan time.Time, 1000)
	c := newCollector(db, gc.Config{Holder: "long", LeaseTTL: 300 * time.Millisecond,
		Signals: gc.Signals{LeaseAcquired: leased, LeaseRenewed: renewed}})
	done := make(chan error, 1)
	go func() {
		_, err := c.Collect(context.Background(), opts(10, time.Minute))
		done <- err
	}()
	<-leased
	var firstExpiry time.Time
	if err := db.GetContext(context.Background(), &firstExpiry, `SELECT expires_at FROM gc_leases WHERE name = 'gc'`); err != nil {
		t.Fatal(err)
	}
	// Wait, renewal by renewal as the collector reports them, until the
	// first expiry has passed and the lease is still held, renewed past it.
	for {
		select {
		case <-renewed:
		case err := <-done:
			t.Fatalf("the long run ended (%v) before its lease was renewed past its first expiry", err)
		}
		if countRows(t, db, `SELECT count(*) FROM gc_leases
			WHERE holder = 'long' AND now() > $1 AND expires_at > now()`, firstExpiry) == 1 {
			break
		}
	}
	other, err := newCollector(db, gc.Config{Holder: "other"}).Collect(context.Background(), opts(10, time.Minute))
	if err != nil || other.Status != gc.StatusSkipped {
		t.Fatalf("a run during the renewed lease = %+v, %v; want skipped", other, err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the long run failed: %v", err)
	}
}

func TestSkipIfRanWithin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		previous   string // SQL values of the previous run: status, dry_run, started
		wantStatus gc.Status
	}{
		{"no previous run", "", gc.StatusSucceeded},
		{"succeeded recently", "'succeeded', false, now() - interval '5 minutes'", gc.StatusSkipped},
		{"succeeded long ago", "'succeeded', false, now() - interval '2 hours'", gc.StatusSucceeded},
		{"failed recently", "'failed', false, now() - interval '5 minutes'", gc.StatusSucceeded},
		{"dry run recently", "'succeeded', true, now() - interval '5 minutes'", gc.StatusSucceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			if tt.previous != "" {
				mustExec(t, db, `INSERT INTO gc_runs (kind, trigger, holder, min_age, batch_size, status, dry_run, started_at, finished_at, error)
					SELECT 'gc', 'schedule', 'other', interval '1 minute', 1000, s, d, st, st + interval '1 second',
					       CASE WHEN s = 'failed' THEN 'boom' END
					FROM (VALUES (`+tt.previous+`)) v(s, d, st)`)
			}
			o := gc.DefaultLoopOptions(time.Hour) // skip if one succeeded in the last 30 minutes
			run, err := newCollector(db, gc.Config{}).Collect(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if run.Status != tt.wantStatus {
				t.Fatalf("status = %s, want %s", run.Status, tt.wantStatus)
			}
			if tt.wantStatus == gc.StatusSkipped && run.Reason != gc.ReasonRanRecently {
				t.Fatalf("reason = %q, want %q", run.Reason, gc.ReasonRanRecently)
			}
		})
	}
}
