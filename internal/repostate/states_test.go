package repostate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/repostate/kv/kvtest"
)

// stuckInitial creates a repository whose create dies after writing the
// record, the initial commit and the default branch: the store goes down
// before the promotion and stays down through the compensation.
func stuckInitial(t *testing.T, e *env, tenant, name string) repostate.Repository {
	t.Helper()
	// Writes from here: [tenant registration,] record, commit, branch,
	// promotion.
	n := 4
	if e.count(`SELECT count(*) FROM kv WHERE partition_key = convert_to('graveler_tenants', 'UTF8') AND key = convert_to($1, 'UTF8')`, tenant) == 0 {
		n = 5
	}
	e.faults.FailWritesFrom(n, kvtest.FailBefore)
	_, err := e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: name, StorageNamespace: "s3://stuck"})
	e.faults.Heal()
	// Refused before the promotion was sent: nothing applied (a plain
	// unavailable, not outcome unknown).
	wantCode(t, "Create during an outage", err, repolock.EUnavailable)
	if repostate.IsUnknownOutcome(err) {
		t.Fatalf("a promotion that was never sent answered outcome unknown: %v", err)
	}
	rec, ok := e.rawRecord(tenant, name)
	if !ok || rec.State != repostate.StateInitial {
		t.Fatalf("record after the outage = %+v, %v; want initial", rec, ok)
	}
	return rec
}

func TestRepositoryStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()

	// initial, fresh: invisible, not listed, not deletable, name taken.
	rec := stuckInitial(t, e, tenant, "stuck")
	if n := e.instanceRows(tenant, "stuck", rec.InstanceUID); n != 2 {
		t.Fatalf("stuck instance rows = %d, want 2", n)
	}
	_, err := e.svc.Get(e.ctx, tenant, "stuck")
	wantCode(t, "Get initial", err, repolock.ENotFound)
	_, err = e.svc.GetBranch(e.ctx, tenant, "stuck", "main")
	wantCode(t, "GetBranch of initial", err, repolock.ENotFound)
	wantCode(t, "Delete initial", e.svc.Delete(e.ctx, tenant, "stuck"), repolock.ENotFound)
	_, err = e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "stuck", StorageNamespace: "s3://x"})
	wantCode(t, "Create over a fresh initial", err, repolock.EAlreadyExists)
	if list, _, _ := e.svc.List(e.ctx, tenant, "", 10); len(list) != 0 {
		t.Fatalf("List shows %+v", list)
	}
	e.clock.Advance(initialTimeout - time.Nanosecond)
	_, err = e.svc.Get(e.ctx, tenant, "stuck")
	wantCode(t, "Get initial just before the timeout", err, repolock.ENotFound)
	if _, ok := e.rawRecord(tenant, "stuck"); !ok {
		t.Fatal("the record was retired before the timeout")
	}

	// initial, stale: Get declares it failed (moved to the deleted list,
	// record removed) and answers 404.
	e.clock.Advance(time.Nanosecond)
	_, err = e.svc.Get(e.ctx, tenant, "stuck")
	wantCode(t, "Get stale initial", err, repolock.ENotFound)
	if _, ok := e.rawRecord(tenant, "stuck"); ok {
		t.Fatal("a stale initial record survived Get")
	}
	b, _, err := e.raw.Get(e.ctx, []byte("graveler_deleted"), []byte(tenant+"/stuck/"+rec.InstanceUID))
	if err != nil {
		t.Fatalf("deleted-list entry: %v", err)
	}
	var entry map[string]any
	if err := json.Unmarshal(b, &entry); err != nil || entry["reason"] != "failed" || entry["instance_uid"] != rec.InstanceUID || entry["tenant_id"] != tenant {
		t.Fatalf("deleted-list entry = %s", b)
	}
	res := e.runCleaner()
	if res.Cleaned != 1 || res.RowsDeleted != 2 || res.StaleInitial != 0 {
		t.Fatalf("Cleaner = %+v", res)
	}

	// deleting: 410 on Get and on every operation inside; not listed;
	// Delete completes it.
	r := e.create(tenant, "leaving")
	// The deleted-list entry fails after the mark: the delete succeeds
	// (the mark is its deciding write) and the Cleaner completes it.
	e.faults.FailNthWrite(2, kvtest.FailBefore)
	wantCode(t, "Delete with the entry write failing", e.svc.Delete(e.ctx, tenant, "leaving"), "")
	_, err = e.svc.Get(e.ctx, tenant, "leaving")
	wantCode(t, "Get deleting", err, repolock.EGone)
	_, err = e.svc.Commit(e.ctx, tenant, "leaving", "main", repostate.CommitParams{Message: "m"})
	wantCode(t, "Commit to deleting", err, repolock.EGone)
	_, err = e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "leaving", StorageNamespace: "s3://x"})
	wantCode(t, "Create over deleting", err, repolock.EConflict)
	if list, _, _ := e.svc.List(e.ctx, tenant, "", 10); len(list) != 0 {
		t.Fatalf("List shows %+v", list)
	}
	if err := e.svc.Delete(e.ctx, tenant, "leaving"); err != nil {
		t.Fatalf("Delete of a deleting repository: %v", err)
	}
	_, err = e.svc.Get(e.ctx, tenant, "leaving")
	wantCode(t, "Get after completing the delete", err, repolock.ENotFound)
	e.runCleaner()
	if n := e.instanceRows(tenant, "leaving", r.InstanceUID); n != 0 {
		t.Fatalf("%d rows left", n)
	}

	// bare: active at once, no branch, no commit.
	bare, err := e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "bare", StorageNamespace: "s3://bare", Bare: true})
	if err != nil || bare.State != repostate.StateActive || bare.DefaultBranch != "main" {
		t.Fatalf("bare = %+v, %v", bare, err)
	}
	if branches, _, err := e.svc.ListBranches(e.ctx, tenant, "bare", "", 10); err != nil || len(branches) != 0 {
		t.Fatalf("bare branches = %+v, %v", branches, err)
	}
	if n := e.instanceRows(tenant, "bare", bare.InstanceUID); n != 0 {
		t.Fatalf("bare instance rows = %d", n)
	}
	_, err = e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "bare", StorageNamespace: "s3://bare", Bare: true})
	wantCode(t, "CreateBare existing", err, repolock.EAlreadyExists)
}

// TestCleanerRetiresStaleInitial: the Cleaner declares stale initial
// records failed and cleans them in the same run; fresh ones it leaves.
// It also completes deletes that stopped in the deleting state.
func TestCleanerRetiresStaleInitial(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	t1, t2 := newTenant(), newTenant()
	a := stuckInitial(t, e, t1, "old-one")
	b := stuckInitial(t, e, t2, "old-two")
	e.clock.Advance(initialTimeout)
	fresh := stuckInitial(t, e, t1, "fresh-one")
	// A delete that stopped after marking the record deleting.
	stopped := e.create(t2, "stopped")
	e.faults.FailWritesFrom(2, kvtest.FailBefore)
	wantCode(t, "Delete during an outage after the mark", e.svc.Delete(e.ctx, t2, "stopped"), "")
	e.faults.Heal()

	res := e.runCleaner()
	if res.StaleInitial != 2 || res.Scanned != 3 || res.Cleaned != 3 || res.Failed != 0 || res.RowsDeleted != 6 {
		t.Fatalf("Cleaner = %+v, want 2 stale initial, 3 cleaned, 6 rows", res)
	}
	for _, c := range []struct {
		tenant, name, uid string
		rows              int
		record            bool
	}{
		{t1, "old-one", a.InstanceUID, 0, false},
		{t2, "old-two", b.InstanceUID, 0, false},
		{t1, "fresh-one", fresh.InstanceUID, 2, true},
		{t2, "stopped", stopped.InstanceUID, 0, false},
	} {
		if n := e.instanceRows(c.tenant, c.name, c.uid); n != c.rows {
			t.Errorf("%s: %d rows, want %d", c.name, n, c.rows)
		}
		if _, ok := e.rawRecord(c.tenant, c.name); ok != c.record {
			t.Errorf("%s: record present = %v, want %v", c.name, ok, c.record)
		}
	}
	// The names are free again.
	e.create(t1, "old-one")
	e.create(t2, "stopped")
}

// TestCreateReplacesStaleInitial: a create that finds a stale initial
// record of its name declares it failed and proceeds.
func TestCreateReplacesStaleInitial(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	old := stuckInitial(t, e, tenant, "again")
	e.clock.Advance(initialTimeout)
	r := e.create(tenant, "again")
	if r.InstanceUID == old.InstanceUID {
		t.Fatal("uid reused")
	}
	res := e.runCleaner()
	if res.Cleaned != 1 || res.RowsDeleted != 2 {
		t.Fatalf("Cleaner = %+v", res)
	}
	if n := e.instanceRows(tenant, "again", old.InstanceUID); n != 0 {
		t.Fatalf("old rows = %d", n)
	}
}

// TestSlowCreateIsAbandoned: a create whose record is declared failed
// before it promotes it fails with conflict and leaves nothing behind.
func TestSlowCreateIsAbandoned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	other := e.service(e.raw, repostate.RetryPolicy{})
	e.faults.SetHook(func(_ context.Context, w kvtest.Write) error {
		if string(w.Key) == "branches/main" {
			// The create stalls past the timeout; someone looks.
			e.clock.Advance(initialTimeout)
			if _, err := other.Get(context.Background(), tenant, "slow"); !repolock.IsCode(err, repolock.ENotFound) {
				t.Errorf("Get of a stale create: %v", err)
			}
		}
		return nil
	})
	_, err := e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "slow", StorageNamespace: "s3://slow"})
	e.faults.SetHook(nil)
	wantCode(t, "slow Create", err, repolock.EConflict)
	if _, ok := e.rawRecord(tenant, "slow"); ok {
		t.Fatal("record left")
	}
	e.runCleaner()
	if n := e.allInstanceRows(tenant, "slow"); n != 0 {
		t.Fatalf("%d rows left", n)
	}
	e.create(tenant, "slow")
}

// TestCleanerRetiresDeletedTenants: a Cleaner given TenantExists retires every repository of
// a tenant whose cluster_users row is gone, and forgets the tenant; other
// tenants are untouched.
func TestCleanerRetiresDeletedTenants(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var gone, kept string
	for name, id := range map[string]*string{"gone": &gone, "kept": &kept} {
		u, _, err := e.tenants.Create(e.ctx, name, "")
		if err != nil {
			t.Fatal(err)
		}
		*id = u.ID
	}
	a := e.create(gone, "first")
	b := e.create(gone, "second")
	k := e.create(kept, "first")
	cleaner := repostate.NewCleaner(e.db, repostate.CleanerConfig{Now: e.clock.Now, Logger: quiet,
		TenantExists: e.tenants.Exists})
	res, err := cleaner.Run(e.ctx)
	if err != nil || res != (repostate.CleanerResult{}) {
		t.Fatalf("Cleaner with every tenant present = %+v, %v", res, err)
	}
	if _, err := e.db.ExecContext(e.ctx, `DELETE FROM cluster_users WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}
	res, err = cleaner.Run(e.ctx)
	if err != nil || res.Scanned != 2 || res.Cleaned != 2 || res.Failed != 0 || res.RowsDeleted != 4 {
		t.Fatalf("Cleaner after the tenant's deletion = %+v, %v", res, err)
	}
	for _, r := range []repostate.Repository{a, b} {
		if n := e.instanceRows(gone, r.Name, r.InstanceUID); n != 0 {
			t.Fatalf("%s: %d rows left", r.Name, n)
		}
	}
	if n := e.count(`SELECT count(*) FROM kv WHERE partition_key = convert_to($1, 'UTF8') OR (partition_key = convert_to('graveler_tenants', 'UTF8') AND key = convert_to($2, 'UTF8'))`,
		"graveler/"+gone, gone); n != 0 {
		t.Fatalf("%d rows of the deleted tenant's records left", n)
	}
	if got, err := e.svc.Get(e.ctx, kept, "first"); err != nil || got != k {
		t.Fatalf("other tenant's repository = %+v, %v", got, err)
	}
	if n := e.instanceRows(kept, "first", k.InstanceUID); n != 2 {
		t.Fatalf("other tenant's rows = %d", n)
	}
}
