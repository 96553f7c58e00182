package gc_test

import (
	"context"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/repostate"
)

// The real repository Cleaner as the step of a run: a deleted repository's
// instance is cleaned by the same run that collects the locks, and the
// figures are recorded.
func TestCollectWithTheRepositoryCleaner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	s := seedScenario(t, db)
	svc := repostate.NewPostgres(db, repostate.Config{Logger: quietLogger()})
	for _, name := range []string{"alpha", "beta"} {
		if _, err := svc.Create(ctx, s.alice, repostate.CreateParams{Name: name, StorageNamespace: "s3://bucket/" + name}); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Delete(ctx, s.alice, "alpha"); err != nil {
		t.Fatal(err)
	}
	c := newCollector(db, gc.Config{Cleaner: repositoryCleaner(db)})

	run, err := c.Collect(ctx, opts(1000, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The deleted instance held its initial commit and its main branch.
	want := repostate.CleanerResult{Scanned: 1, Cleaned: 1, RowsDeleted: 2}
	if run.Deleted != 3 || run.Cleaner == nil || *run.Cleaner != want {
		t.Fatalf("run deleted %d locks, cleaner %+v; want 3 and %+v", run.Deleted, run.Cleaner, want)
	}
	recorded, err := c.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if recorded.Cleaner == nil || *recorded.Cleaner != want {
		t.Fatalf("recorded cleaner = %+v, want %+v", recorded.Cleaner, want)
	}
	// The live repository is untouched; a second clean finds nothing.
	if _, err := svc.Get(ctx, s.alice, "beta"); err != nil {
		t.Fatalf("beta after the run: %v", err)
	}
	again, err := c.Clean(ctx, gc.TriggerCLI)
	if err != nil {
		t.Fatal(err)
	}
	if again.Kind != gc.KindClean || again.Cleaner == nil || *again.Cleaner != (repostate.CleanerResult{}) {
		t.Fatalf("second clean = %+v (cleaner %+v), want nothing to do", again, again.Cleaner)
	}
}
