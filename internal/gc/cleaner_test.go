package gc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/repostate"
)

// tableCleaner is a small real Cleaner: it deletes the rows of a table of
// "deleted repository instances" in the test's database, as the repostate
// Cleaner deletes the partitions of deleted repositories. Rows named "stuck"
// fail to clean; a row named "boom" makes the whole run fail.
func tableCleaner(t *testing.T, db *database.DB, names ...string) gc.Cleaner {
	t.Helper()
	mustExec(t, db, `CREATE TABLE deleted_instances (name text PRIMARY KEY, rows_held int NOT NULL)`)
	for i, n := range names {
		mustExec(t, db, `INSERT INTO deleted_instances VALUES ($1, $2)`, n, i+1)
	}
	return cleanerFunc(func(ctx context.Context) (repostate.CleanerResult, error) {
		var res repostate.CleanerResult
		var all []string
		if err := db.SelectContext(ctx, &all, `SELECT name FROM deleted_instances ORDER BY name`); err != nil {
			return res, err
		}
		for _, n := range all {
			res.Scanned++
			switch n {
			case "boom":
				return res, errors.New("cleaner exploded")
			case "stuck":
				res.Failed++
				continue
			}
			var held int64
			if err := db.GetContext(ctx, &held, `DELETE FROM deleted_instances WHERE name = $1 RETURNING rows_held`, n); err != nil {
				return res, err
			}
			res.Cleaned++
			res.RowsDeleted += held
		}
		return res, nil
	})
}

func TestCollectRunsTheCleaner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		instances   []string
		dryRun      bool
		wantErr     bool
		wantCleaner *repostate.CleanerResult
		wantLeft    []string
	}{
		{
			name:        "cleans after the lock GC",
			instances:   []string{"r1", "r2", "stuck"},
			wantCleaner: &repostate.CleanerResult{Scanned: 3, Cleaned: 2, Failed: 1, RowsDeleted: 1 + 2},
			wantLeft:    []string{"stuck"},
		},
		{
			name:      "does not run in a dry run",
			instances: []string{"r1"},
			dryRun:    true,
			wantLeft:  []string{"r1"},
		},
		{
			name:        "a cleaner failure fails the run, lock GC figures kept",
			instances:   []string{"a", "boom"},
			wantErr:     true,
			wantCleaner: &repostate.CleanerResult{Scanned: 2, Cleaned: 1, RowsDeleted: 1},
			wantLeft:    []string{"boom"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			seedScenario(t, db)
			c := newCollector(db, gc.Config{Cleaner: tableCleaner(t, db, tt.instances...)})
			o := opts(1000, time.Minute)
			o.DryRun = tt.dryRun
			run, err := c.Collect(ctx, o)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			wantStatus := gc.StatusSucceeded
			if tt.wantErr {
				wantStatus = gc.StatusFailed
				if !strings.Contains(run.Error, "repository cleaner: cleaner exploded") {
					t.Fatalf("error = %q", run.Error)
				}
			}
			wantDeleted := int64(3)
			if tt.dryRun {
				wantDeleted = 0
			}
			if run.Status != wantStatus || run.Scanned != 3 || run.Deleted != wantDeleted {
				t.Fatalf("run = %s scanned %d deleted %d; want %s 3 %d", run.Status, run.Scanned, run.Deleted, wantStatus, wantDeleted)
			}
			recorded, err := c.GetRun(ctx, run.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, got := range []*repostate.CleanerResult{run.Cleaner, recorded.Cleaner} {
				if (got == nil) != (tt.wantCleaner == nil) || (got != nil && *got != *tt.wantCleaner) {
					t.Fatalf("cleaner = %+v, want %+v", got, tt.wantCleaner)
				}
			}
			var left []string
			if err := db.SelectContext(ctx, &left, `SELECT name FROM deleted_instances ORDER BY name`); err != nil {
				t.Fatal(err)
			}
			if !equalStrings(left, tt.wantLeft) {
				t.Fatalf("instances left = %v, want %v", left, tt.wantLeft)
			}
		})
	}
}

func TestCleanRunsOnlyTheCleaner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	seedScenario(t, db)
	locks := lockURLs(t, db)

	if _, err := newCollector(db, gc.Config{}).Clean(ctx, gc.TriggerCLI); repolock.ErrorCode(err) != repolock.EPrecondition {
		t.Fatalf("Clean without a cleaner: err = %v, want precondition_failed", err)
	}

	c := newCollector(db, gc.Config{Cleaner: tableCleaner(t, db, "r1", "r2")})
	run, err := c.Clean(ctx, gc.TriggerCLI)
	if err != nil {
		t.Fatal(err)
	}
	want := repostate.CleanerResult{Scanned: 2, Cleaned: 2, RowsDeleted: 3}
	if run.Kind != gc.KindClean || run.Status != gc.StatusSucceeded || run.Scanned != 0 || run.Deleted != 0 ||
		run.Cleaner == nil || *run.Cleaner != want {
		t.Fatalf("clean run = %+v (cleaner %+v)", run, run.Cleaner)
	}
	if got := lockURLs(t, db); !equalStrings(got, locks) {
		t.Fatalf("Clean touched the locks: %v", got)
	}
	recorded, err := c.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if recorded.Kind != gc.KindClean || recorded.Cleaner == nil || *recorded.Cleaner != want {
		t.Fatalf("recorded clean run = %+v", recorded)
	}
}
