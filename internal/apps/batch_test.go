package apps_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

const appBatcher = "apps.create.application"

type createResult struct {
	app apps.Application
	err error
}

// createsInOneBatch runs creates (label -> tenant, name, URL) on the pool
// queued behind a held create of blockerURL by tenant (dbtest.InOneBatch),
// so that they go as one batch unless a failed statement makes the
// Batcher re-run them alone. It returns each label's result.
func createsInOneBatch(t *testing.T, db *database.DB, svc *apps.Service, tenant, blockerURL string, creates map[string][3]string) map[string]createResult {
	t.Helper()
	create := func(tenant, name, url string) func() createResult {
		return func() createResult {
			app, err := svc.CreateApplication(context.Background(), tenant, apps.NewApplication{Name: name, RepoURL: url})
			return createResult{app, err}
		}
	}
	calls := map[string]func() createResult{}
	for label, c := range creates {
		calls[label] = create(c[0], c[1], c[2])
	}
	held := create(tenant, "held-"+strconv.FormatInt(db.BatchStats()[appBatcher].Calls, 10), blockerURL)
	got := dbtest.InOneBatch(t, db, appBatcher, tenant, keyOf(t, blockerURL), held, calls)
	if r := got["held"]; r.err != nil {
		t.Errorf("the held create: %v", r.err)
	}
	return got
}

// TestCreatesOnThePoolShareABatch: application creates that arrive while
// one runs go to Postgres as one statement (database.Batcher), and each
// gets what it would get alone: a row on its own tenant's lock; a URL that
// another tenant in the same queue asked for is created for one of them
// and repository_claimed for the other, never a row on the other tenant's
// lock; a second create of the same name is already_exists (the statement
// of a batch holding both would fail: the Batcher keeps them apart).
func TestCreatesOnThePoolShareABatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{BatchStallAfter: time.Hour})) // the held batch holds up the queue
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")

	creates := map[string][3]string{
		"contested-alice": {alice.ID, "c", "https://github.com/acme/contested"},
		"contested-bob":   {bob.ID, "c", "git@github.com:acme/contested.git"},
	}
	const free = 12
	for i := range free {
		creates[fmt.Sprint("free-", i)] = [3]string{alice.ID, fmt.Sprint("app-", i), fmt.Sprintf("https://github.com/acme/r%d", i)}
	}
	got := createsInOneBatch(t, db, svc, bob.ID, "https://github.com/acme/blocker", creates)

	for i := range free {
		if r := got[fmt.Sprint("free-", i)]; r.err != nil || r.app.Name != fmt.Sprint("app-", i) || r.app.LockID == "" {
			t.Errorf("free-%d: %+v %v", i, r.app, r.err)
		}
	}
	ca, cb := got["contested-alice"], got["contested-bob"]
	if (ca.err == nil) == (cb.err == nil) {
		t.Errorf("contested: %v / %v, want exactly one created", ca.err, cb.err)
	} else if lost := map[bool]error{true: cb.err, false: ca.err}[ca.err == nil]; !repolock.IsCode(lost, repolock.ERepositoryClaimed) {
		t.Errorf("contested: the loser got %v, want repository_claimed", lost)
	}

	// Every application references its own tenant's lock on its key, and
	// the lock tables hold nothing else (checkInvariants).
	var wrong int
	if err := db.GetContext(ctx, &wrong, `
		SELECT count(*) FROM applications a
		JOIN RepositoryLockApplication r ON r.application_id = a.id
		JOIN RepositoryLockOwner o ON o.id = r.lock_id
		WHERE o.cluster_user_id <> a.cluster_user_id OR o.git_repository_url <> a.normalized_url`); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("%d applications reference a lock that is not their tenant's on their key", wrong)
	}
	st := db.BatchStats()[appBatcher]
	if st.Calls != int64(len(creates)+1) || st.Batches > 3 {
		t.Errorf("stats %+v: want %d calls in at most 3 batches (the held one, the queue, the contested URL's second)", st, len(creates)+1)
	}

	// Round 2: the same name twice.
	got = createsInOneBatch(t, db, svc, bob.ID, "https://github.com/acme/blocker-2", map[string][3]string{
		"dup-1":  {alice.ID, "dup", "https://github.com/acme/dup-1"},
		"dup-2":  {alice.ID, "dup", "https://github.com/acme/dup-2"},
		"free-x": {alice.ID, "x", "https://github.com/acme/x"},
	})
	d1, d2 := got["dup-1"], got["dup-2"]
	if (d1.err == nil) == (d2.err == nil) {
		t.Errorf("dup: %v / %v, want exactly one created", d1.err, d2.err)
	} else if lost := map[bool]error{true: d2.err, false: d1.err}[d1.err == nil]; !repolock.IsCode(lost, repolock.EAlreadyExists) {
		t.Errorf("dup: the second got %v, want already_exists", lost)
	}
	if r := got["free-x"]; r.err != nil {
		t.Errorf("free-x: %v", r.err)
	}
	checkInvariants(t, db)
}

// TestCreatesBatchFailureIsolated: a create whose tenant was deleted fails
// the statement of its whole batch (a foreign key): the Batcher re-runs
// each create alone, so that only that one fails.
func TestCreatesBatchFailureIsolated(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{BatchStallAfter: time.Hour})) // the held batch holds up the queue
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	ghost := dbtest.NewTenant(t, db, "ghost")
	if _, err := db.ExecContext(context.Background(), `DELETE FROM cluster_users WHERE id = $1`, ghost.ID); err != nil {
		t.Fatal(err)
	}
	creates := map[string][3]string{"ghost": {ghost.ID, "g", "https://github.com/acme/ghost"}}
	for i := range 8 {
		creates[fmt.Sprint("free-", i)] = [3]string{alice.ID, fmt.Sprint("app-", i), fmt.Sprintf("https://github.com/acme/r%d", i)}
	}
	got := createsInOneBatch(t, db, svc, alice.ID, "https://github.com/acme/blocker", creates)
	for label, r := range got {
		switch {
		case label == "ghost" && !repolock.IsCode(r.err, repolock.ENotFound):
			t.Errorf("ghost: %v, want not found", r.err)
		case label != "ghost" && r.err != nil:
			t.Errorf("%s: %v", label, r.err)
		}
	}
	checkInvariants(t, db)
}
