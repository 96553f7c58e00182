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
)

// scenario seeds two tenants and locks of every kind:
//
//	orphan-2h, orphan-10m, orphan-5m  unreferenced, older than a minute
//	young-1s                          unreferenced, one second old
//	app-ref, cred-ref, both-ref       referenced (2 hours old)
type scenario struct {
	alice, bob string
	locks      map[string]string // url -> id
}

func seedScenario(t *testing.T, db *database.DB) scenario {
	t.Helper()
	s := scenario{locks: map[string]string{}}
	s.alice = dbtest.NewTenant(t, db, "alice").ID
	s.bob = dbtest.NewTenant(t, db, "bob").ID
	for _, l := range []struct {
		url   string
		owner string
		age   time.Duration
	}{
		{"git.example.com/a/orphan-2h", s.alice, 2 * time.Hour},
		{"git.example.com/a/orphan-10m", s.alice, 10 * time.Minute},
		{"git.example.com/b/orphan-5m", s.bob, 5 * time.Minute},
		{"git.example.com/b/young-1s", s.bob, time.Second},
		{"git.example.com/a/app-ref", s.alice, 2 * time.Hour},
		{"git.example.com/b/cred-ref", s.bob, 2 * time.Hour},
		{"git.example.com/a/both-ref", s.alice, 2 * time.Hour},
	} {
		s.locks[l.url] = dbtest.NewLock(t, db, l.owner, l.url, l.age)
	}
	dbtest.NewApplication(t, db, s.alice, "app-1", s.locks["git.example.com/a/app-ref"])
	dbtest.NewCredential(t, db, s.bob, "cred-1", s.locks["git.example.com/b/cred-ref"])
	dbtest.NewApplication(t, db, s.alice, "app-2", s.locks["git.example.com/a/both-ref"])
	dbtest.NewCredential(t, db, s.alice, "cred-2", s.locks["git.example.com/a/both-ref"])
	// The referenced locks are not GC candidates, as the one-statement
	// creates of internal/apps leave them (the fixtures insert with the
	// column's default, a candidate).
	for _, u := range referenced {
		mustExec(t, db, `UPDATE RepositoryLockOwner SET gc_candidate = false WHERE id = $1`, s.locks[u])
	}
	return s
}

// flagAll makes every lock a GC candidate, as a lock is after a bare
// acquire followed by an Application, or after losing one of two
// references.
func flagAll(t *testing.T, db *database.DB) {
	t.Helper()
	mustExec(t, db, `UPDATE RepositoryLockOwner SET gc_candidate = true`)
}

// candidateURLs returns the URLs of the locks flagged gc_candidate, sorted.
func candidateURLs(t testing.TB, q database.Querier) []string {
	t.Helper()
	urls := []string{}
	if err := q.SelectContext(context.Background(), &urls,
		`SELECT git_repository_url FROM RepositoryLockOwner WHERE gc_candidate ORDER BY git_repository_url`); err != nil {
		t.Fatal(err)
	}
	return urls
}

var referenced = []string{"git.example.com/a/app-ref", "git.example.com/a/both-ref", "git.example.com/b/cred-ref"}

func TestCollect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts gc.Options
		// flagAll makes the referenced locks candidates too.
		flagAll     bool
		wantDeleted []string
		wantBatches int
	}{
		{
			name:        "defaults collect orphans older than a minute",
			opts:        gc.DefaultOptions(gc.TriggerCLI),
			wantDeleted: []string{"git.example.com/a/orphan-10m", "git.example.com/a/orphan-2h", "git.example.com/b/orphan-5m"},
			wantBatches: 1,
		},
		{
			// Seven candidates: the three referenced ones lose their flag.
			name:        "referenced candidates are cleared, not collected",
			opts:        gc.DefaultOptions(gc.TriggerCLI),
			flagAll:     true,
			wantDeleted: []string{"git.example.com/a/orphan-10m", "git.example.com/a/orphan-2h", "git.example.com/b/orphan-5m"},
			wantBatches: 1,
		},
		{
			name:        "batch of one clears referenced candidates batch by batch",
			opts:        opts(1, time.Minute),
			flagAll:     true,
			wantDeleted: []string{"git.example.com/a/orphan-10m", "git.example.com/a/orphan-2h", "git.example.com/b/orphan-5m"},
			wantBatches: 7,
		},
		{
			// Four unreferenced locks (the young one too) fill four batches;
			// the fifth comes back empty and does not count.
			name:        "batch of one walks every orphan",
			opts:        opts(1, time.Minute),
			wantDeleted: []string{"git.example.com/a/orphan-10m", "git.example.com/a/orphan-2h", "git.example.com/b/orphan-5m"},
			wantBatches: 4,
		},
		{
			name:        "batch of two ends on a short batch",
			opts:        opts(2, time.Minute),
			wantDeleted: []string{"git.example.com/a/orphan-10m", "git.example.com/a/orphan-2h", "git.example.com/b/orphan-5m"},
			wantBatches: 2,
		},
		{
			name:        "min age of 30 minutes keeps younger orphans",
			opts:        opts(1000, 30*time.Minute),
			wantDeleted: []string{"git.example.com/a/orphan-2h"},
			wantBatches: 1,
		},
		{
			name: "min age of zero collects the young orphan too",
			opts: opts(1000, 0),
			wantDeleted: []string{"git.example.com/a/orphan-10m", "git.example.com/a/orphan-2h",
				"git.example.com/b/orphan-5m", "git.example.com/b/young-1s"},
			wantBatches: 1,
		},
		{
			name:        "nothing old enough",
			opts:        opts(1000, 3*time.Hour),
			wantDeleted: []string{},
			wantBatches: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			s := seedScenario(t, db)
			wantCandidates, wantCleared := int64(4), int64(0)
			if tt.flagAll {
				flagAll(t, db)
				wantCandidates, wantCleared = 7, 3
			}
			all := lockURLs(t, db)

			run, err := newCollector(db, gc.Config{}).Collect(ctx, tt.opts)
			if err != nil {
				t.Fatalf("Collect: %v", err)
			}
			n := int64(len(tt.wantDeleted))
			if run.Status != gc.StatusSucceeded || run.Scanned != n || run.Deleted != n || run.Batches != tt.wantBatches ||
				run.Candidates != wantCandidates || run.Cleared != wantCleared || run.Flagged != 0 {
				t.Fatalf("run = status %s scanned %d deleted %d batches %d candidates %d cleared %d flagged %d; want succeeded %d %d %d %d %d 0",
					run.Status, run.Scanned, run.Deleted, run.Batches, run.Candidates, run.Cleared, run.Flagged,
					n, n, tt.wantBatches, wantCandidates, wantCleared)
			}
			// The candidates left are exactly the unreferenced locks left
			// (too young to collect): referenced ones lost their flag.
			var wantFlagged []string
			for _, u := range all {
				if !contains(tt.wantDeleted, u) && !contains(referenced, u) {
					wantFlagged = append(wantFlagged, u)
				}
			}
			if got := candidateURLs(t, db); !equalStrings(got, wantFlagged) {
				t.Fatalf("candidates left = %v, want %v", got, wantFlagged)
			}

			// Exactly the wanted locks are gone; every referenced one stays.
			var wantLeft []string
			for _, u := range all {
				if !contains(tt.wantDeleted, u) {
					wantLeft = append(wantLeft, u)
				}
			}
			if got := lockURLs(t, db); !equalStrings(got, wantLeft) {
				t.Fatalf("locks left = %v, want %v", got, wantLeft)
			}
			for _, u := range referenced {
				if !contains(lockURLs(t, db), u) {
					t.Fatalf("referenced lock %s was collected", u)
				}
			}

			// One collected event per deleted lock, naming its owner.
			evs := collectedEvents(t, db)
			if len(evs) != len(tt.wantDeleted) {
				t.Fatalf("collected events = %d, want %d", len(evs), len(tt.wantDeleted))
			}
			for i, ev := range evs {
				u := tt.wantDeleted[i]
				owner, ownerName := s.alice, "alice"
				if strings.Contains(u, "/b/") {
					owner, ownerName = s.bob, "bob"
				}
				want := collectedEvent{LockID: s.locks[u], URL: u, OwnerID: owner, OwnerName: ownerName}
				if ev.TenantID != nil || ev.LockID != want.LockID || ev.URL != want.URL || ev.OwnerID != want.OwnerID || ev.OwnerName != want.OwnerName {
					t.Fatalf("event %d = %+v, want %+v and no acting user", i, ev, want)
				}
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestCollectRecordsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	seedScenario(t, db)
	c := newCollector(db, gc.Config{Holder: "test-holder"})

	run, err := c.Collect(ctx, opts(2, 90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if run.ID == "" || run.FinishedAt == nil || run.StartedAt.IsZero() {
		t.Fatalf("run not recorded: %+v", run)
	}
	got, err := c.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := gc.Run{
		ID: run.ID, Kind: gc.KindGC, Trigger: gc.TriggerCLI, Holder: "test-holder", Status: gc.StatusSucceeded,
		MinAgeSeconds: 90, BatchSize: 2, Candidates: 4, Scanned: 3, Deleted: 3, Batches: 2,
		StartedAt: run.StartedAt, FinishedAt: run.FinishedAt,
		DurationSeconds: run.FinishedAt.Sub(run.StartedAt).Seconds(),
	}
	if !sameRun(got, want) {
		t.Fatalf("recorded run = %+v\nwant %+v", got, want)
	}
	if run.DurationSeconds != want.DurationSeconds {
		t.Fatalf("returned duration %v, recorded %v", run.DurationSeconds, want.DurationSeconds)
	}
	// The lease is released.
	if n := countRows(t, db, `SELECT count(*) FROM gc_leases`); n != 0 {
		t.Fatalf("leases left = %d, want 0", n)
	}
}

func sameRun(a, b gc.Run) bool {
	if (a.FinishedAt == nil) != (b.FinishedAt == nil) || (a.FinishedAt != nil && !a.FinishedAt.Equal(*b.FinishedAt)) {
		return false
	}
	if (a.Cleaner == nil) != (b.Cleaner == nil) || (a.Cleaner != nil && *a.Cleaner != *b.Cleaner) {
		return false
	}
	return a.ID == b.ID && a.Kind == b.Kind && a.Trigger == b.Trigger && a.Holder == b.Holder &&
		a.Status == b.Status && a.Reason == b.Reason && a.DryRun == b.DryRun && a.Full == b.Full &&
		a.MinAgeSeconds == b.MinAgeSeconds && a.BatchSize == b.BatchSize &&
		a.Candidates == b.Candidates && a.Scanned == b.Scanned && a.Deleted == b.Deleted &&
		a.Cleared == b.Cleared && a.Flagged == b.Flagged && a.Batches == b.Batches &&
		a.StartedAt.Equal(b.StartedAt) && a.DurationSeconds == b.DurationSeconds && a.Error == b.Error
}

func TestDryRunDeletesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	s := seedScenario(t, db)
	before := lockURLs(t, db)

	o := opts(2, time.Minute)
	o.DryRun = true
	run, err := newCollector(db, gc.Config{}).Collect(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != gc.StatusSucceeded || !run.DryRun || run.Candidates != 4 || run.Scanned != 3 || run.Deleted != 0 ||
		run.Cleared != 0 || run.Batches != 2 {
		t.Fatalf("dry run = %+v; want succeeded, 4 candidates, scanned 3, deleted 0, cleared 0, 2 batches", run)
	}
	var urls []string
	for _, c := range run.WouldCollect {
		urls = append(urls, c.GitRepositoryURL)
		if c.LockID != s.locks[c.GitRepositoryURL] {
			t.Fatalf("candidate %s has lock id %s, want %s", c.GitRepositoryURL, c.LockID, s.locks[c.GitRepositoryURL])
		}
		wantOwner := "alice"
		if strings.Contains(c.GitRepositoryURL, "/b/") {
			wantOwner = "bob"
		}
		if c.OwnerName != wantOwner {
			t.Fatalf("candidate %s owner = %s, want %s", c.GitRepositoryURL, c.OwnerName, wantOwner)
		}
	}
	want := []string{"git.example.com/a/orphan-10m", "git.example.com/a/orphan-2h", "git.example.com/b/orphan-5m"}
	if !equalStrings(sorted(urls), want) {
		t.Fatalf("would collect %v, want %v", sorted(urls), want)
	}
	if after := lockURLs(t, db); !equalStrings(after, before) {
		t.Fatalf("dry run changed the locks: %v -> %v", before, after)
	}
	if n := len(collectedEvents(t, db)); n != 0 {
		t.Fatalf("dry run wrote %d collected events", n)
	}
	got, err := newCollector(db, gc.Config{}).GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.DryRun || got.Scanned != 3 || got.Deleted != 0 || got.Status != gc.StatusSucceeded {
		t.Fatalf("recorded dry run = %+v", got)
	}
}

func TestDryRunSampleIsCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	tenant := dbtest.NewTenant(t, db, "t").ID
	mustExec(t, db, `
		INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at)
		SELECT 'git.example.com/o/' || g, 1, $1, now() - interval '1 hour' FROM generate_series(1, 250) g`, tenant)
	o := opts(100, time.Minute)
	o.DryRun = true
	run, err := newCollector(db, gc.Config{}).Collect(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if run.Scanned != 250 || run.Batches != 3 || len(run.WouldCollect) != gc.DryRunSampleLimit {
		t.Fatalf("scanned %d, batches %d, sample %d; want 250, 3, %d", run.Scanned, run.Batches, len(run.WouldCollect), gc.DryRunSampleLimit)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c := newCollector(db, gc.Config{})
	tests := []struct {
		name string
		opts gc.Options
	}{
		{"zero options", gc.Options{}},
		{"unknown trigger", gc.Options{Trigger: "cron", BatchSize: 10}},
		{"batch size zero", opts(0, time.Minute)},
		{"batch size too big", opts(gc.MaxBatchSize+1, time.Minute)},
		{"negative min age", opts(10, -time.Second)},
		{"negative skip window", func() gc.Options { o := opts(10, 0); o.SkipIfRanWithin = -1; return o }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Collect(context.Background(), tt.opts)
			if repolock.ErrorCode(err) != repolock.EInvalid {
				t.Fatalf("err = %v, want invalid_argument", err)
			}
		})
	}
	if n := countRows(t, db, `SELECT count(*) FROM gc_runs`); n != 0 {
		t.Fatalf("invalid options recorded %d runs", n)
	}
}

// A request that is writing a reference holds a row lock on the lock row
// until it commits. GC must skip that row without waiting and without
// failing, whatever the request then does.
func TestCollectSkipsLocksBeingReferenced(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// hold starts the concurrent request's work on the lock inside tx.
		hold     func(t *testing.T, tx database.Tx, tenant, lockID string)
		commit   bool
		wantLeft bool // after the request ends and a second GC runs
	}{
		{
			name: "reference inserted, then committed",
			hold: func(t *testing.T, tx database.Tx, tenant, lockID string) {
				dbtest.NewApplication(t, tx, tenant, "new-app", lockID)
			},
			commit: true, wantLeft: true,
		},
		{
			name: "reference inserted, then rolled back",
			hold: func(t *testing.T, tx database.Tx, tenant, lockID string) {
				dbtest.NewApplication(t, tx, tenant, "new-app", lockID)
			},
			commit: false, wantLeft: false,
		},
		{
			name: "lock re-acquired with ON CONFLICT DO UPDATE, credential committed",
			hold: func(t *testing.T, tx database.Tx, tenant, lockID string) {
				var id string
				if err := tx.GetContext(context.Background(), &id, `
					INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
					VALUES ('git.example.com/x/held', 1, $1)
					ON CONFLICT (git_repository_url) DO UPDATE SET normalizer_version = EXCLUDED.normalizer_version
					RETURNING id`, tenant); err != nil {
					t.Fatal(err)
				}
				if id != lockID {
					t.Fatalf("re-acquire returned %s, want the existing lock %s", id, lockID)
				}
				dbtest.NewCredential(t, tx, tenant, "new-cred", lockID)
			},
			commit: true, wantLeft: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			tenant := dbtest.NewTenant(t, db, "x").ID
			held := dbtest.NewLock(t, db, tenant, "git.example.com/x/held", time.Hour)
			dbtest.NewLock(t, db, tenant, "git.example.com/x/free", time.Hour)

			tx, err := db.BeginTxx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			tt.hold(t, tx, tenant, held)

			// If GC waited on the row lock it would block until this
			// deadline and fail instead of returning.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			run, err := newCollector(db, gc.Config{}).Collect(ctx, opts(10, 0))
			if err != nil {
				t.Fatalf("Collect while a request holds the lock: %v", err)
			}
			if run.Scanned != 1 || run.Deleted != 1 {
				t.Fatalf("scanned %d deleted %d; want 1 and 1 (the held lock skipped)", run.Scanned, run.Deleted)
			}
			if got := lockURLs(t, db); !equalStrings(got, []string{"git.example.com/x/held"}) {
				t.Fatalf("locks = %v", got)
			}
			if tt.commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatalf("the request failed to finish: %v", err)
			}
			if _, err := newCollector(db, gc.Config{}).Collect(context.Background(), opts(10, 0)); err != nil {
				t.Fatal(err)
			}
			left := len(lockURLs(t, db)) == 1
			if left != tt.wantLeft {
				t.Fatalf("after the request ended and GC ran again, lock left = %v, want %v", left, tt.wantLeft)
			}
			dangling := countRows(t, db, `
				SELECT (SELECT count(*) FROM RepositoryLockApplication ra WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockOwner o WHERE o.id = ra.lock_id))
				     + (SELECT count(*) FROM RepositoryLockRepositoryCredential rc WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockOwner o WHERE o.id = rc.lock_id))`)
			if dangling != 0 {
				t.Fatalf("%d references point at a missing lock", dangling)
			}
		})
	}
}

// The foreign keys are the final guard: a batch whose DELETE violates one
// (a reference GC's re-check could not see, injected here by a trigger that
// adds one as the lock is deleted) must not fail the run. The batch is
// retried lock by lock and only the referenced lock is kept.
func TestCollectSurvivesForeignKeyViolations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// condition under which the trigger injects the reference.
		condition   string
		wantDeleted int64
		wantFaulty  bool // the faulty lock is left
	}{
		{"a reference that stays", "true", 4, true},
		{"a reference seen only by the first attempt", "nextval('gc_fault_seq') = 1", 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			tenant := dbtest.NewTenant(t, db, "f").ID
			for _, u := range []string{"a", "b", "faulty", "c", "d"} {
				dbtest.NewLock(t, db, tenant, "git.example.com/f/"+u, time.Hour)
			}
			// An application without a reference yet, for the trigger.
			var appID string
			if err := db.GetContext(ctx, &appID, `INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
				VALUES ($1, 'late', 'git.example.com/f/faulty', 'git.example.com/f/faulty') RETURNING id`, tenant); err != nil {
				t.Fatal(err)
			}
			mustExec(t, db, `CREATE SEQUENCE gc_fault_seq`)
			mustExec(t, db, `CREATE FUNCTION gc_fault() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					IF OLD.git_repository_url = 'git.example.com/f/faulty' AND `+tt.condition+` THEN
						INSERT INTO RepositoryLockApplication (application_id, lock_id) VALUES ('`+appID+`', OLD.id);
					END IF;
					RETURN OLD;
				END $$`)
			mustExec(t, db, `CREATE TRIGGER gc_fault BEFORE DELETE ON RepositoryLockOwner FOR EACH ROW EXECUTE FUNCTION gc_fault()`)

			run, err := newCollector(db, gc.Config{}).Collect(ctx, opts(1000, time.Minute))
			if err != nil {
				t.Fatalf("Collect failed on a foreign key violation: %v", err)
			}
			if run.Status != gc.StatusSucceeded || run.Scanned != 5 || run.Deleted != tt.wantDeleted {
				t.Fatalf("run = %s scanned %d deleted %d; want succeeded 5 %d", run.Status, run.Scanned, run.Deleted, tt.wantDeleted)
			}
			var want []string
			if tt.wantFaulty {
				want = []string{"git.example.com/f/faulty"}
			}
			if got := lockURLs(t, db); !equalStrings(got, want) {
				t.Fatalf("locks left = %v, want %v", got, want)
			}
			if n := len(collectedEvents(t, db)); int64(n) != tt.wantDeleted {
				t.Fatalf("collected events = %d, want %d", n, tt.wantDeleted)
			}
		})
	}
}

// A database failure in the middle of a run fails the run (recorded, with
// its error); the batches committed before it stay collected.
func TestCollectFailureIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	tenant := dbtest.NewTenant(t, db, "f").ID
	ids := map[string]string{}
	for _, u := range []string{"a", "b", "c", "d", "e"} {
		ids[u] = dbtest.NewLock(t, db, tenant, "git.example.com/f/"+u, time.Hour)
	}
	mustExec(t, db, `CREATE FUNCTION gc_fail() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF OLD.git_repository_url = 'git.example.com/f/c' THEN
				RAISE EXCEPTION 'injected failure';
			END IF;
			RETURN OLD;
		END $$`)
	mustExec(t, db, `CREATE TRIGGER gc_fail BEFORE DELETE ON RepositoryLockOwner FOR EACH ROW EXECUTE FUNCTION gc_fail()`)

	// With batches of one, in id order, every lock before c is collected.
	var before int64
	for u, id := range ids {
		if u != "c" && id < ids["c"] {
			before++
		}
	}
	run, err := newCollector(db, gc.Config{}).Collect(ctx, opts(1, time.Minute))
	if err == nil {
		t.Fatal("Collect succeeded despite the injected failure")
	}
	if repolock.ErrorCode(err) != repolock.EInternal {
		t.Fatalf("error code = %s, want internal", repolock.ErrorCode(err))
	}
	if run.Status != gc.StatusFailed || run.Deleted != before || !strings.Contains(run.Error, "injected failure") {
		t.Fatalf("run = %s deleted %d error %q; want failed, %d, injected failure", run.Status, run.Deleted, run.Error, before)
	}
	got, err := newCollector(db, gc.Config{}).GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != gc.StatusFailed || got.Deleted != before || got.Error != run.Error || got.FinishedAt == nil {
		t.Fatalf("recorded run = %+v", got)
	}
	if n := len(lockURLs(t, db)); int64(n) != 5-before {
		t.Fatalf("locks left = %d, want %d", n, 5-before)
	}
	if n := countRows(t, db, `SELECT count(*) FROM gc_leases`); n != 0 {
		t.Fatalf("a failed run left its lease")
	}
}

func TestCollectHonoursContextDeadline(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	tenant := dbtest.NewTenant(t, db, "t").ID
	dbtest.NewLock(t, db, tenant, "git.example.com/t/a", time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newCollector(db, gc.Config{}).Collect(ctx, opts(10, time.Minute))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := len(lockURLs(t, db)); n != 1 {
		t.Fatalf("a cancelled run deleted locks")
	}
}
