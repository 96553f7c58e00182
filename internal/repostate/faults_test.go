package repostate_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/repostate/kv/kvtest"
)

// createWrites is the number of writes of a clean Create by a tenant's
// first repository: tenant registration, record (initial), initial commit,
// default branch, promotion.
const createWrites = 5

// deleteWrites: record to deleting, deleted-list entry, record DeleteIf.
const deleteWrites = 3

func TestCreateWritesAreTheDocumentedSteps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	r := e.create(tenant, "steps")
	log := e.faults.Log()
	want := []struct{ op, pk, key string }{
		{"SetIf", "graveler_tenants", tenant},
		{"SetIf", "graveler/" + tenant, "repos/steps"},
		{"SetIf", tenant + "/steps-" + r.InstanceUID, "commits/"},
		{"SetIf", tenant + "/steps-" + r.InstanceUID, "branches/main"},
		{"SetIf", "graveler/" + tenant, "repos/steps"},
	}
	if len(log) != len(want) {
		t.Fatalf("Create made %d writes, want %d: %+v", len(log), len(want), log)
	}
	for i, w := range want {
		if log[i].Op != w.op || string(log[i].Partition) != w.pk || !strings.HasPrefix(string(log[i].Key), w.key) {
			t.Fatalf("write %d = %s %q %q, want %s %q %q...", i+1, log[i].Op, log[i].Partition, log[i].Key, w.op, w.pk, w.key)
		}
	}
	before := e.faults.Writes()
	if err := e.svc.Delete(e.ctx, tenant, "steps"); err != nil {
		t.Fatal(err)
	}
	log = e.faults.Log()[before:]
	wantDel := []struct{ op, pk, key string }{
		{"SetIf", "graveler/" + tenant, "repos/steps"},
		{"Set", "graveler_deleted", tenant + "/steps/" + r.InstanceUID},
		{"DeleteIf", "graveler/" + tenant, "repos/steps"},
	}
	if len(log) != deleteWrites {
		t.Fatalf("Delete made %d writes, want %d: %+v", len(log), deleteWrites, log)
	}
	for i, w := range wantDel {
		if log[i].Op != w.op || string(log[i].Partition) != w.pk || string(log[i].Key) != w.key {
			t.Fatalf("delete write %d = %s %q %q, want %s %q %q", i+1, log[i].Op, log[i].Partition, log[i].Key, w.op, w.pk, w.key)
		}
	}
}

// checkVisibility asserts the repository is either fully visible (active,
// default branch at an existing initial commit, listed) or invisible (404,
// not listed). It returns whether it is visible.
func checkVisibility(t *testing.T, e *env, svc *repostate.Service, tenant, name string) bool {
	t.Helper()
	list, _, err := svc.List(e.ctx, tenant, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, r := range list {
		listed = listed || r.Name == name
	}
	r, err := svc.Get(e.ctx, tenant, name)
	if err != nil {
		wantCode(t, "Get of a half-created repository", err, repolock.ENotFound)
		if listed {
			t.Fatal("an invisible repository is listed")
		}
		_, err := svc.GetBranch(e.ctx, tenant, name, "main")
		wantCode(t, "branch of an invisible repository", err, repolock.ENotFound)
		return false
	}
	if r.State != repostate.StateActive || !listed {
		t.Fatalf("visible repository %+v listed=%v", r, listed)
	}
	b, err := svc.GetBranch(e.ctx, tenant, name, r.DefaultBranch)
	if err != nil {
		t.Fatalf("visible repository without its default branch: %v", err)
	}
	if !strings.Contains(b.StagingToken, name+"-"+r.InstanceUID+"/") {
		t.Fatalf("default branch %+v does not belong to instance %s", b, r.InstanceUID)
	}
	log, _, err := svc.Log(e.ctx, tenant, name, r.DefaultBranch, "", 10)
	if err != nil || len(log) != 1 || log[0].Message != repostate.InitialCommitMessage {
		t.Fatalf("visible repository's log = %+v, %v", log, err)
	}
	return true
}

// TestCreateFaults fails each write of Create, once or from then on, before
// or after the write lands. The repository is always either fully visible
// or invisible; a retried create succeeds (after the initial timeout when
// an outage left an initial record); the Cleaner leaves nothing of failed
// instances; the new instance sees nothing of them.
func TestCreateFaults(t *testing.T) {
	t.Parallel()
	// Subtests run one after another on one database: each uses its own
	// tenant and leaves nothing for the next one's Cleaner.
	db := dbtest.New(t)
	for n := 1; n <= createWrites; n++ {
		for _, mode := range []kvtest.FaultMode{kvtest.FailBefore, kvtest.FailAfter} {
			for _, outage := range []bool{false, true} {
				name := fmt.Sprintf("write%d-%s-outage%v", n, mode, outage)
				t.Run(name, func(t *testing.T) {
					e := newEnvWithDB(t, db)
					clean := e.service(e.raw, repostate.RetryPolicy{})
					tenant := newTenant()
					if outage {
						e.faults.FailWritesFrom(n, mode)
					} else {
						e.faults.FailNthWrite(n, mode)
					}
					_, err := e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "repo", StorageNamespace: "s3://b/repo"})
					if e.faults.Injected() == 0 {
						t.Fatal("no fault was injected")
					}
					e.faults.Heal()
					visible := checkVisibility(t, e, clean, tenant, "repo")
					if (err == nil) != visible {
						t.Fatalf("Create error = %v but visible = %v", err, visible)
					}
					// Ambiguous failures are resolved by reading back, and a
					// single lost write is compensated: only an outage before
					// promotion can leave the caller with an error.
					if !outage && mode == kvtest.FailAfter && err != nil {
						t.Fatalf("a write that landed but reported failure failed Create: %v", err)
					}

					if !visible {
						_, err := e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "repo", StorageNamespace: "s3://b/repo"})
						if err != nil {
							// Only an initial record the outage left behind may
							// block the retry, and only until it is stale.
							rec, ok := e.rawRecord(tenant, "repo")
							if !outage || !ok || rec.State != repostate.StateInitial {
								t.Fatalf("retried Create: %v (record %+v present %v)", err, rec, ok)
							}
							wantCode(t, "retry while the initial record is fresh", err, repolock.EAlreadyExists)
							e.clock.Advance(initialTimeout)
							if _, err := e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "repo", StorageNamespace: "s3://b/repo"}); err != nil {
								t.Fatalf("retried Create after the initial timeout: %v", err)
							}
						}
						if !checkVisibility(t, e, clean, tenant, "repo") {
							t.Fatal("retried Create succeeded but the repository is not visible")
						}
					}
					live, _ := e.rawRecord(tenant, "repo")

					// The Cleaner removes every failed instance and nothing of
					// the live one.
					e.runCleaner()
					liveRows := e.instanceRows(tenant, "repo", live.InstanceUID)
					if liveRows != 2 {
						t.Fatalf("live instance rows = %d, want 2 (commit, branch)", liveRows)
					}
					if all := e.allInstanceRows(tenant, "repo"); all != liveRows {
						t.Fatalf("rows of failed instances left after the Cleaner: %d", all-liveRows)
					}
					branches, _, err := clean.ListBranches(e.ctx, tenant, "repo", "", 10)
					if err != nil || len(branches) != 1 || !strings.Contains(branches[0].StagingToken, live.InstanceUID) {
						t.Fatalf("branches of the live instance = %+v, %v", branches, err)
					}

					// Delete and clean: nothing of any instance is left.
					if err := e.svc.Delete(e.ctx, tenant, "repo"); err != nil {
						t.Fatal(err)
					}
					e.runCleaner()
					if all := e.allInstanceRows(tenant, "repo"); all != 0 {
						t.Fatalf("%d instance rows left after delete and clean", all)
					}
					if n := e.count(`SELECT count(*) FROM kv WHERE partition_key = convert_to('graveler_deleted', 'UTF8') AND key LIKE convert_to($1, 'UTF8')`, tenant+"/%"); n != 0 {
						t.Fatalf("%d deleted-list entries left", n)
					}
					if n := e.count(`SELECT count(*) FROM kv WHERE partition_key = convert_to($1, 'UTF8')`, "graveler/"+tenant); n != 0 {
						t.Fatalf("%d repository records left", n)
					}
				})
			}
		}
	}
}

// TestDeleteFaults fails each write of Delete. The repository is either
// fully visible or answers 410 (never half there); a retried delete
// completes; the name is reusable; the Cleaner removes every row of the old
// instance, including its staging partitions, and nothing of the new one.
func TestDeleteFaults(t *testing.T) {
	t.Parallel()
	// Subtests run one after another on one database: each uses its own
	// tenant and leaves nothing for the next one's Cleaner.
	db := dbtest.New(t)
	for n := 1; n <= deleteWrites; n++ {
		for _, mode := range []kvtest.FaultMode{kvtest.FailBefore, kvtest.FailAfter} {
			for _, outage := range []bool{false, true} {
				name := fmt.Sprintf("write%d-%s-outage%v", n, mode, outage)
				t.Run(name, func(t *testing.T) {
					e := newEnvWithDB(t, db)
					clean := e.service(e.raw, repostate.RetryPolicy{})
					tenant := newTenant()
					old := e.create(tenant, "repo")
					c := e.commit(tenant, "repo", "main", "data")
					if _, err := clean.CreateBranch(e.ctx, tenant, "repo", "dev", "main"); err != nil {
						t.Fatal(err)
					}
					if _, err := clean.CreateTag(e.ctx, tenant, "repo", "v1", c.ID); err != nil {
						t.Fatal(err)
					}
					for _, b := range []string{"main", "dev"} {
						if err := clean.StageObject(e.ctx, tenant, "repo", b, "obj", []byte("x")); err != nil {
							t.Fatal(err)
						}
					}
					const oldRows = 2 + 2 + 1 + 2 // commits, branches, tag, staged objects
					if got := e.instanceRows(tenant, "repo", old.InstanceUID); got != oldRows {
						t.Fatalf("rows before delete = %d, want %d", got, oldRows)
					}

					if outage {
						e.faults.FailWritesFrom(n, mode)
					} else {
						e.faults.FailNthWrite(n, mode)
					}
					err := e.svc.Delete(e.ctx, tenant, "repo")
					e.faults.Heal()
					if !outage && mode == kvtest.FailAfter && err != nil {
						t.Fatalf("a write that landed but reported failure failed Delete: %v", err)
					}
					cleanedEarly := false
					if _, gerr := clean.Get(e.ctx, tenant, "repo"); err == nil {
						// A delete that stopped after its mark succeeded:
						// 410 until the Cleaner completes it.
						if repolock.IsCode(gerr, repolock.EGone) {
							res := e.runCleaner()
							if res.Failed != 0 || res.Cleaned != 1 || res.RowsDeleted != oldRows {
								t.Fatalf("Cleaner completing a marked delete = %+v, want 1 cleaned, %d rows", res, oldRows)
							}
							cleanedEarly = true
							_, gerr = clean.Get(e.ctx, tenant, "repo")
						}
						wantCode(t, "Get after Delete", gerr, repolock.ENotFound)
					} else {
						switch repolock.ErrorCode(gerr) {
						case "":
							// Untouched: fully there.
							if b, _, err := clean.ListBranches(e.ctx, tenant, "repo", "", 10); err != nil || len(b) != 2 {
								t.Fatalf("a repository still visible after a failed delete lost branches: %v %v", b, err)
							}
						case repolock.EGone:
							if list, _, _ := clean.List(e.ctx, tenant, "", 10); len(list) != 0 {
								t.Fatalf("a repository being deleted is listed: %+v", list)
							}
						default:
							t.Fatalf("Get after a failed delete: %v", gerr)
						}
						if err := e.svc.Delete(e.ctx, tenant, "repo"); err != nil {
							t.Fatalf("retried Delete: %v", err)
						}
					}
					_, gerr := clean.Get(e.ctx, tenant, "repo")
					wantCode(t, "Get after completed delete", gerr, repolock.ENotFound)

					// The name is reusable; the new instance sees nothing old.
					fresh := e.create(tenant, "repo")
					for _, probe := range []func() error{
						func() error { _, err := clean.GetBranch(e.ctx, tenant, "repo", "dev"); return err },
						func() error { _, err := clean.GetTag(e.ctx, tenant, "repo", "v1"); return err },
						func() error { _, err := clean.GetCommit(e.ctx, tenant, "repo", c.ID); return err },
					} {
						wantCode(t, "old entity in the new instance", probe(), repolock.ENotFound)
					}
					if staged, _, err := clean.ListStaged(e.ctx, tenant, "repo", "main", "", 10); err != nil || len(staged) != 0 {
						t.Fatalf("staged objects of the new instance = %+v, %v", staged, err)
					}

					res := e.runCleaner()
					if !cleanedEarly && (res.Failed != 0 || res.Cleaned != 1 || res.RowsDeleted != oldRows) {
						t.Fatalf("Cleaner = %+v, want 1 cleaned, %d rows", res, oldRows)
					}
					if got := e.instanceRows(tenant, "repo", old.InstanceUID); got != 0 {
						t.Fatalf("old instance rows after the Cleaner = %d", got)
					}
					if got := e.deletedEntries(tenant, "repo", old.InstanceUID); got != 0 {
						t.Fatalf("deleted-list entries after the Cleaner = %d", got)
					}
					if got := e.instanceRows(tenant, "repo", fresh.InstanceUID); got != 2 {
						t.Fatalf("new instance rows = %d, want 2", got)
					}
				})
			}
		}
	}
}

// TestCleanerFaults fails each write of a Cleaner run over two deleted
// repositories: the failing entry is counted as failed and kept, the other
// is cleaned, and the next run finishes the job.
func TestCleanerFaults(t *testing.T) {
	t.Parallel()
	// Subtests run one after another on one database: each uses its own
	// tenant and leaves nothing for the next one's Cleaner.
	db := dbtest.New(t)
	// Per entry: DeletePartition of each branch's staging partition (1
	// branch), of the instance partition, Delete of the entry.
	const writesPerEntry = 3
	for n := 1; n <= 2*writesPerEntry; n++ {
		for _, mode := range []kvtest.FaultMode{kvtest.FailBefore, kvtest.FailAfter} {
			t.Run(fmt.Sprintf("write%d-%s", n, mode), func(t *testing.T) {
				e := newEnvWithDB(t, db)
				tenant := newTenant()
				var uids []string
				for _, name := range []string{"one", "two"} {
					r := e.create(tenant, name)
					uids = append(uids, r.InstanceUID)
					if err := e.svc.StageObject(e.ctx, tenant, name, "main", "f", []byte("x")); err != nil {
						t.Fatal(err)
					}
					if err := e.svc.Delete(e.ctx, tenant, name); err != nil {
						t.Fatal(err)
					}
				}
				e.faults.FailNthWrite(n, mode)
				res := e.runCleaner()
				if e.faults.Injected() != 1 {
					t.Fatalf("%d faults injected, want 1", e.faults.Injected())
				}
				if res.Scanned != 2 || res.Failed != 1 || res.Cleaned != 1 {
					t.Fatalf("Cleaner with a fault = %+v, want 2 scanned, 1 failed, 1 cleaned", res)
				}
				// A Delete of the entry that landed but reported failure
				// leaves nothing for the next run.
				wantNext := 1
				if n%writesPerEntry == 0 && mode == kvtest.FailAfter {
					wantNext = 0
				}
				res = e.runCleaner()
				if res.Scanned != wantNext || res.Failed != 0 || res.Cleaned != wantNext {
					t.Fatalf("next Cleaner run = %+v, want %d entries cleaned", res, wantNext)
				}
				for i, name := range []string{"one", "two"} {
					if got := e.instanceRows(tenant, name, uids[i]); got != 0 {
						t.Fatalf("%s: %d rows left", name, got)
					}
					if got := e.deletedEntries(tenant, name, uids[i]); got != 0 {
						t.Fatalf("%s: %d deleted entries left", name, got)
					}
				}
			})
		}
	}
}

// TestClobberRace: a deleter reads the record, another delete completes, a
// new repository of the same name is created, the first deleter continues:
// the new repository survives. Both places where the first deleter can be
// held up are covered: before it marks the record deleting, and after
// (before it removes the record).
func TestClobberRace(t *testing.T) {
	t.Parallel()
	// Subtests run one after another on one database: each uses its own
	// tenant and leaves nothing for the next one's Cleaner.
	db := dbtest.New(t)
	tests := []struct {
		name string
		// pauseAt picks the first deleter's write before which the other
		// delete and the create happen.
		pauseOp string
		wantErr repolock.Code
	}{
		{"before marking deleting", "SetIf", repolock.ENotFound},
		{"before removing the record", "DeleteIf", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWithDB(t, db)
			other := e.service(e.raw, repostate.RetryPolicy{})
			tenant := newTenant()
			old := e.create(tenant, "contested")
			var (
				once     sync.Once
				newer    repostate.Repository
				hookErrs []error
			)
			e.faults.SetHook(func(ctx context.Context, w kvtest.Write) error {
				if w.Op != tc.pauseOp || string(w.Key) != "repos/contested" {
					return nil
				}
				once.Do(func() {
					if err := other.Delete(ctx, tenant, "contested"); err != nil {
						hookErrs = append(hookErrs, fmt.Errorf("other delete: %w", err))
					}
					e.clock.Advance(time.Second)
					r, err := other.Create(ctx, tenant, repostate.CreateParams{Name: "contested", StorageNamespace: "s3://new"})
					if err != nil {
						hookErrs = append(hookErrs, fmt.Errorf("create: %w", err))
					}
					newer = r
					if _, err := other.CreateBranch(ctx, tenant, "contested", "keep-me", "main"); err != nil {
						hookErrs = append(hookErrs, fmt.Errorf("branch: %w", err))
					}
				})
				return nil
			})
			err := e.svc.Delete(e.ctx, tenant, "contested")
			e.faults.SetHook(nil)
			for _, herr := range hookErrs {
				t.Fatal(herr)
			}
			wantCode(t, "first deleter", err, tc.wantErr)
			got, err := other.Get(e.ctx, tenant, "contested")
			if err != nil || got != newer || got.InstanceUID == old.InstanceUID {
				t.Fatalf("new repository after the first deleter continued: %+v, %v; want %+v", got, err, newer)
			}
			if _, err := other.GetBranch(e.ctx, tenant, "contested", "keep-me"); err != nil {
				t.Fatalf("new repository's branch: %v", err)
			}
			e.runCleaner()
			if n := e.instanceRows(tenant, "contested", old.InstanceUID); n != 0 {
				t.Fatalf("old instance rows = %d", n)
			}
			if n := e.instanceRows(tenant, "contested", newer.InstanceUID); n != 3 {
				t.Fatalf("new instance rows = %d, want 3 (commit, main, keep-me)", n)
			}
		})
	}
}

// TestWriteIntoDeletedInstanceIsUndone: a write whose repository is deleted
// and cleaned while it is in flight lands in a partition nobody will clean
// again; the writer notices and removes it.
func TestWriteIntoDeletedInstanceIsUndone(t *testing.T) {
	t.Parallel()
	// Subtests run one after another on one database: each uses its own
	// tenant and leaves nothing for the next one's Cleaner.
	db := dbtest.New(t)
	tests := []struct {
		name  string
		key   string // the write before which the repository disappears
		write func(e *env, tenant string, head string) error
	}{
		{"CreateBranch", "branches/late", func(e *env, tenant, _ string) error {
			_, err := e.svc.CreateBranch(e.ctx, tenant, "victim", "late", "main")
			return err
		}},
		{"Commit", "commits/", func(e *env, tenant, _ string) error {
			_, err := e.svc.Commit(e.ctx, tenant, "victim", "main", repostate.CommitParams{Message: "late"})
			return err
		}},
		{"CreateTag", "tags/late", func(e *env, tenant, head string) error {
			_, err := e.svc.CreateTag(e.ctx, tenant, "victim", "late", head)
			return err
		}},
		{"UpdateBranch", "branches/main", func(e *env, tenant, head string) error {
			_, err := e.svc.UpdateBranch(e.ctx, tenant, "victim", "main", head, "")
			return err
		}},
		{"StageObject", "key/late", func(e *env, tenant, _ string) error {
			return e.svc.StageObject(e.ctx, tenant, "victim", "main", "late", []byte("x"))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWithDB(t, db)
			other := e.service(e.raw, repostate.RetryPolicy{})
			otherCleaner := repostate.NewStoreCleaner(e.raw, repostate.CleanerConfig{Now: e.clock.Now, Logger: quiet})
			tenant := newTenant()
			r := e.create(tenant, "victim")
			main, err := other.GetBranch(e.ctx, tenant, "victim", "main")
			if err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			var hookErr error
			e.faults.SetHook(func(ctx context.Context, w kvtest.Write) error {
				if !strings.HasPrefix(string(w.Key), tc.key) {
					return nil
				}
				once.Do(func() {
					hookErr = other.Delete(ctx, tenant, "victim")
					if hookErr == nil {
						_, hookErr = otherCleaner.Run(ctx)
					}
				})
				return nil
			})
			err = tc.write(e, tenant, main.CommitID)
			e.faults.SetHook(nil)
			if hookErr != nil {
				t.Fatal(hookErr)
			}
			wantCode(t, tc.name+" into a deleted repository", err, repolock.ENotFound)
			if n := e.instanceRows(tenant, "victim", r.InstanceUID); n != 0 {
				t.Fatalf("%d rows left in the deleted instance", n)
			}
		})
	}
}
