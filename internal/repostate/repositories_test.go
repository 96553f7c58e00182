package repostate_test

import (
	"slices"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/repostate"
)

func TestRepositoryLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant, other := newTenant(), newTenant()

	r := e.create(tenant, "alpha")
	if r.Name != "alpha" || r.State != repostate.StateActive || r.DefaultBranch != "main" ||
		r.StorageNamespace != "s3://bucket/alpha" || len(r.InstanceUID) != 32 || !r.CreatedAt.Equal(e.clock.Now()) {
		t.Fatalf("Create = %+v", r)
	}
	got, err := e.svc.Get(e.ctx, tenant, "alpha")
	if err != nil || got != r {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, r)
	}
	// Another tenant sees nothing of it and may use the name.
	_, err = e.svc.Get(e.ctx, other, "alpha")
	wantCode(t, "Get by another tenant", err, repolock.ENotFound)
	if list, _, err := e.svc.List(e.ctx, other, "", 10); err != nil || len(list) != 0 {
		t.Fatalf("List by another tenant = %v, %v", list, err)
	}
	e.create(other, "alpha")

	// Creating it again is 409.
	_, err = e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "alpha", StorageNamespace: "s3://x"})
	wantCode(t, "Create existing", err, repolock.EAlreadyExists)

	// The initial commit and the default branch.
	main, err := e.svc.GetBranch(e.ctx, tenant, "alpha", "main")
	if err != nil {
		t.Fatal(err)
	}
	initial, err := e.svc.GetCommit(e.ctx, tenant, "alpha", main.CommitID)
	if err != nil {
		t.Fatal(err)
	}
	if initial.Message != repostate.InitialCommitMessage || len(initial.Parents) != 0 || initial.Generation != 1 || initial.ID != repostate.CommitID(initial) {
		t.Fatalf("initial commit = %+v", initial)
	}

	c1 := e.commit(tenant, "alpha", "main", "first")
	if !slices.Equal(c1.Parents, []string{initial.ID}) || c1.Generation != 2 || c1.ID != repostate.CommitID(c1) || c1.Committer != "tester" {
		t.Fatalf("commit = %+v", c1)
	}
	if _, err := e.svc.CreateTag(e.ctx, tenant, "alpha", "v1.0", c1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateBranch(e.ctx, tenant, "alpha", "feature/x", "main"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.StageObject(e.ctx, tenant, "alpha", "feature/x", "a/b.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}

	list, more, err := e.svc.List(e.ctx, tenant, "", 10)
	if err != nil || more || len(list) != 1 || list[0] != r {
		t.Fatalf("List = %+v, %v, %v", list, more, err)
	}

	// Delete: the name is reusable at once, the new instance sees none of
	// the old one's branches, commits or tags.
	if err := e.svc.Delete(e.ctx, tenant, "alpha"); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Get(e.ctx, tenant, "alpha")
	wantCode(t, "Get deleted", err, repolock.ENotFound)
	wantCode(t, "Delete deleted", e.svc.Delete(e.ctx, tenant, "alpha"), repolock.ENotFound)
	e.clock.Advance(time.Second)
	r2 := e.create(tenant, "alpha")
	if r2.InstanceUID == r.InstanceUID {
		t.Fatal("a re-created repository reused the instance uid")
	}
	_, err = e.svc.GetBranch(e.ctx, tenant, "alpha", "feature/x")
	wantCode(t, "old branch in new instance", err, repolock.ENotFound)
	_, err = e.svc.GetTag(e.ctx, tenant, "alpha", "v1.0")
	wantCode(t, "old tag in new instance", err, repolock.ENotFound)
	_, err = e.svc.GetCommit(e.ctx, tenant, "alpha", c1.ID)
	wantCode(t, "old commit in new instance", err, repolock.ENotFound)
	log, next, err := e.svc.Log(e.ctx, tenant, "alpha", "main", "", 10)
	if err != nil || len(log) != 1 || log[0].Message != repostate.InitialCommitMessage || next != "" {
		t.Fatalf("log of new instance = %+v, %q, %v", log, next, err)
	}

	// The old instance still has rows until the Cleaner runs.
	if n := e.instanceRows(tenant, "alpha", r.InstanceUID); n != 6 { // 2 commits, 2 branches, 1 tag, 1 staged object
		t.Fatalf("old instance rows before cleaning = %d, want 6", n)
	}
	res := e.runCleaner()
	if res.Scanned != 1 || res.Cleaned != 1 || res.Failed != 0 || res.RowsDeleted != 6 || res.StaleInitial != 0 {
		t.Fatalf("Cleaner = %+v", res)
	}
	if n := e.instanceRows(tenant, "alpha", r.InstanceUID); n != 0 {
		t.Fatalf("old instance rows after cleaning = %d, want 0", n)
	}
	if n := e.deletedEntries(tenant, "alpha", r.InstanceUID); n != 0 {
		t.Fatalf("deleted entries after cleaning = %d, want 0", n)
	}
	// The new instance is untouched.
	if n := e.instanceRows(tenant, "alpha", r2.InstanceUID); n != 2 {
		t.Fatalf("new instance rows = %d, want 2", n)
	}
	if res := e.runCleaner(); res != (repostate.CleanerResult{}) {
		t.Fatalf("second Cleaner run = %+v, want nothing to do", res)
	}
}
