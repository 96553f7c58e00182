package repostate_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/repostate"
)

func TestRefNames(t *testing.T) {
	t.Parallel()
	valid := []string{"main", "feature/x", "a", "v1.0", "release-2025.01", "UPPER", "über", "a@b", "x/y/z", "a.b/c.d"}
	invalid := []string{
		"", "@", "HEAD", "-leading-dash", "/lead", "trail/", "a//b", "a..b", "a@{1}", "dot.", "a/.hidden", ".hidden",
		"x.lock", "a/b.lock/c", "sp ace", "til~de", "ca^ret", "co:lon", "ques?tion", "st*ar", "br[acket", "back\\slash",
		"ctl\x01", "del\x7f", "tab\t", "bad\xffutf8", strings.Repeat("a", 256),
	}
	for _, name := range valid {
		if err := repostate.ValidateBranchName(name); err != nil {
			t.Errorf("ValidateBranchName(%q) = %v, want valid", name, err)
		}
		if err := repostate.ValidateTagName(name); err != nil {
			t.Errorf("ValidateTagName(%q) = %v, want valid", name, err)
		}
	}
	for _, name := range invalid {
		if err := repostate.ValidateBranchName(name); !repolock.IsCode(err, repolock.EInvalid) {
			t.Errorf("ValidateBranchName(%q) = %v, want invalid_argument", name, err)
		}
	}
	repoNames := map[string]bool{
		"abc": true, "a-b": true, "0ab": true, strings.Repeat("a", 63): true,
		"ab": false, strings.Repeat("a", 64): false, "-ab": false, "Abc": false, "a_b": false, "a.b": false, "": false, "abc/": false,
	}
	for name, ok := range repoNames {
		if err := repostate.ValidateRepositoryName(name); (err == nil) != ok {
			t.Errorf("ValidateRepositoryName(%q) = %v, want valid %v", name, err, ok)
		}
	}
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	tests := []struct {
		name string
		p    repostate.CreateParams
	}{
		{"bad name", repostate.CreateParams{Name: "A", StorageNamespace: "s3://x"}},
		{"no namespace", repostate.CreateParams{Name: "abc"}},
		{"namespace with control character", repostate.CreateParams{Name: "abc", StorageNamespace: "s3://x\n"}},
		{"namespace too long", repostate.CreateParams{Name: "abc", StorageNamespace: strings.Repeat("x", 1025)}},
		{"bad default branch", repostate.CreateParams{Name: "abc", StorageNamespace: "s3://x", DefaultBranch: "a..b"}},
		{"bad default branch, bare", repostate.CreateParams{Name: "abc", StorageNamespace: "s3://x", DefaultBranch: "-x", Bare: true}},
	}
	for _, tc := range tests {
		_, err := e.svc.Create(e.ctx, tenant, tc.p)
		wantCode(t, tc.name, err, repolock.EInvalid)
	}
	if e.faults.Writes() != 0 {
		t.Fatalf("rejected creates wrote %d times", e.faults.Writes())
	}
	_, err := e.svc.Create(e.ctx, "", repostate.CreateParams{Name: "abc", StorageNamespace: "s3://x"})
	wantCode(t, "no tenant", err, repolock.EInvalid)
}

func TestBranches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	e.create(tenant, "refs")
	main, err := e.svc.GetBranch(e.ctx, tenant, "refs", "main")
	if err != nil {
		t.Fatal(err)
	}
	c1 := e.commit(tenant, "refs", "main", "one")

	// Create from a branch and from a commit id.
	fromBranch, err := e.svc.CreateBranch(e.ctx, tenant, "refs", "feature/a", "main")
	if err != nil || fromBranch.CommitID != c1.ID || fromBranch.Name != "feature/a" || len(fromBranch.SealedTokens) != 0 ||
		!strings.Contains(fromBranch.StagingToken, "/feature/a/") || fromBranch.StagingToken == main.StagingToken {
		t.Fatalf("CreateBranch from branch = %+v, %v", fromBranch, err)
	}
	fromCommit, err := e.svc.CreateBranch(e.ctx, tenant, "refs", "old", main.CommitID)
	if err != nil || fromCommit.CommitID != main.CommitID {
		t.Fatalf("CreateBranch from commit = %+v, %v", fromCommit, err)
	}

	errCases := []struct {
		name string
		call func() error
		code repolock.Code
	}{
		{"create existing", func() error { _, err := e.svc.CreateBranch(e.ctx, tenant, "refs", "old", "main"); return err }, repolock.EAlreadyExists},
		{"create from missing source", func() error { _, err := e.svc.CreateBranch(e.ctx, tenant, "refs", "x", "nope"); return err }, repolock.ENotFound},
		{"create from missing commit", func() error {
			_, err := e.svc.CreateBranch(e.ctx, tenant, "refs", "x", strings.Repeat("a", 64))
			return err
		}, repolock.ENotFound},
		{"create with empty source", func() error { _, err := e.svc.CreateBranch(e.ctx, tenant, "refs", "x", ""); return err }, repolock.EInvalid},
		{"create bad name", func() error { _, err := e.svc.CreateBranch(e.ctx, tenant, "refs", "a..b", "main"); return err }, repolock.EInvalid},
		{"create in missing repo", func() error { _, err := e.svc.CreateBranch(e.ctx, tenant, "nope", "x", "main"); return err }, repolock.ENotFound},
		{"create in another tenant's repo", func() error { _, err := e.svc.CreateBranch(e.ctx, newTenant(), "refs", "x", "main"); return err }, repolock.ENotFound},
		{"get missing", func() error { _, err := e.svc.GetBranch(e.ctx, tenant, "refs", "nope"); return err }, repolock.ENotFound},
		{"delete default", func() error { return e.svc.DeleteBranch(e.ctx, tenant, "refs", "main") }, repolock.EInvalid},
		{"delete missing", func() error { return e.svc.DeleteBranch(e.ctx, tenant, "refs", "nope") }, repolock.ENotFound},
		{"update to missing commit", func() error {
			_, err := e.svc.UpdateBranch(e.ctx, tenant, "refs", "old", strings.Repeat("b", 64), "")
			return err
		}, repolock.ENotFound},
		{"update to malformed commit", func() error { _, err := e.svc.UpdateBranch(e.ctx, tenant, "refs", "old", "xyz", ""); return err }, repolock.EInvalid},
		{"update with stale expectation", func() error {
			_, err := e.svc.UpdateBranch(e.ctx, tenant, "refs", "old", c1.ID, c1.ID)
			return err
		}, repolock.EPrecondition},
		{"update missing branch", func() error { _, err := e.svc.UpdateBranch(e.ctx, tenant, "refs", "nope", c1.ID, ""); return err }, repolock.ENotFound},
		{"commit to missing branch", func() error {
			_, err := e.svc.Commit(e.ctx, tenant, "refs", "nope", repostate.CommitParams{Message: "m"})
			return err
		}, repolock.ENotFound},
		{"commit without message", func() error {
			_, err := e.svc.Commit(e.ctx, tenant, "refs", "main", repostate.CommitParams{})
			return err
		}, repolock.EInvalid},
		{"commit with too much metadata", func() error {
			md := map[string]string{}
			for i := range 101 {
				md[fmt.Sprint(i)] = "v"
			}
			_, err := e.svc.Commit(e.ctx, tenant, "refs", "main", repostate.CommitParams{Message: "m", Metadata: md})
			return err
		}, repolock.EInvalid},
	}
	for _, c := range errCases {
		wantCode(t, c.name, c.call(), c.code)
	}
	if err := e.svc.DeleteBranch(e.ctx, tenant, "refs", "old"); err == nil {
		// Restore for the update checks below.
		if _, err := e.svc.CreateBranch(e.ctx, tenant, "refs", "old", main.CommitID); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Fatal(err)
	}

	// Update with the right expectation, then without one.
	upd, err := e.svc.UpdateBranch(e.ctx, tenant, "refs", "old", c1.ID, main.CommitID)
	if err != nil || upd.CommitID != c1.ID {
		t.Fatalf("UpdateBranch = %+v, %v", upd, err)
	}
	_, err = e.svc.UpdateBranch(e.ctx, tenant, "refs", "old", main.CommitID, main.CommitID)
	wantCode(t, "update with the old expectation", err, repolock.EPrecondition)
	if d := repolock.ErrorDetails(err); d["commit_id"] != c1.ID {
		t.Fatalf("precondition details = %v", d)
	}
	if upd, err := e.svc.UpdateBranch(e.ctx, tenant, "refs", "old", main.CommitID, ""); err != nil || upd.CommitID != main.CommitID {
		t.Fatalf("unconditional UpdateBranch = %+v, %v", upd, err)
	}

	// Deleting a branch deletes its staging partition.
	if err := e.svc.StageObject(e.ctx, tenant, "refs", "feature/a", "f", []byte("x")); err != nil {
		t.Fatal(err)
	}
	staged := e.count(`SELECT count(*) FROM kv WHERE partition_key = convert_to($1, 'UTF8')`, fromBranch.StagingToken)
	if staged != 1 {
		t.Fatalf("staged rows = %d", staged)
	}
	if err := e.svc.DeleteBranch(e.ctx, tenant, "refs", "feature/a"); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM kv WHERE partition_key = convert_to($1, 'UTF8')`, fromBranch.StagingToken); n != 0 {
		t.Fatalf("staging rows after branch delete = %d", n)
	}
	err = e.svc.StageObject(e.ctx, tenant, "refs", "feature/a", "g", []byte("x"))
	wantCode(t, "stage into deleted branch", err, repolock.ENotFound)
}

func TestBranchAndTagListing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	e.create(tenant, "lists")
	head := e.commit(tenant, "lists", "main", "c")
	names := []string{"a", "a/b", "a0", "B", "main", "z", "é"}
	for _, n := range names {
		if n == "main" {
			continue
		}
		if _, err := e.svc.CreateBranch(e.ctx, tenant, "lists", n, "main"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.CreateTag(e.ctx, tenant, "lists", n, head.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.CreateTag(e.ctx, tenant, "lists", "main", head.ID); err != nil {
		t.Fatal(err)
	}
	// Byte order: "B" < "a" < "a/b" < "a0" < "main" < "z" < "é".
	want := "B a a/b a0 main z é"
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		page, more, err := e.svc.ListBranches(e.ctx, tenant, "lists", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page {
			got = append(got, b.Name)
			after = b.Name
		}
		if !more {
			if pages != 2 {
				t.Fatalf("%d pages, want 3", pages+1)
			}
			break
		}
	}
	if strings.Join(got, " ") != want {
		t.Fatalf("branches = %v, want %s", got, want)
	}
	got = nil
	after = ""
	for {
		page, more, err := e.svc.ListTags(e.ctx, tenant, "lists", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range page {
			got = append(got, tg.Name)
			after = tg.Name
			if tg.CommitID != head.ID {
				t.Fatalf("tag %+v", tg)
			}
		}
		if !more {
			break
		}
	}
	if strings.Join(got, " ") != want {
		t.Fatalf("tags = %v, want %s", got, want)
	}
}

func TestTags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	e.create(tenant, "tagged")
	c := e.commit(tenant, "tagged", "main", "c")
	tag, err := e.svc.CreateTag(e.ctx, tenant, "tagged", "v1", c.ID)
	if err != nil || tag != (repostate.Tag{Name: "v1", CommitID: c.ID}) {
		t.Fatalf("CreateTag = %+v, %v", tag, err)
	}
	if got, err := e.svc.GetTag(e.ctx, tenant, "tagged", "v1"); err != nil || got != tag {
		t.Fatalf("GetTag = %+v, %v", got, err)
	}
	cases := []struct {
		name string
		call func() error
		code repolock.Code
	}{
		{"create existing", func() error { _, err := e.svc.CreateTag(e.ctx, tenant, "tagged", "v1", c.ID); return err }, repolock.EAlreadyExists},
		{"create on missing commit", func() error {
			_, err := e.svc.CreateTag(e.ctx, tenant, "tagged", "v2", strings.Repeat("c", 64))
			return err
		}, repolock.ENotFound},
		{"create with malformed commit", func() error { _, err := e.svc.CreateTag(e.ctx, tenant, "tagged", "v2", "main"); return err }, repolock.EInvalid},
		{"create bad name", func() error { _, err := e.svc.CreateTag(e.ctx, tenant, "tagged", "v 2", c.ID); return err }, repolock.EInvalid},
		{"get missing", func() error { _, err := e.svc.GetTag(e.ctx, tenant, "tagged", "v2"); return err }, repolock.ENotFound},
		{"delete missing", func() error { return e.svc.DeleteTag(e.ctx, tenant, "tagged", "v2") }, repolock.ENotFound},
		{"get in another tenant", func() error { _, err := e.svc.GetTag(e.ctx, newTenant(), "tagged", "v1"); return err }, repolock.ENotFound},
	}
	for _, tc := range cases {
		wantCode(t, tc.name, tc.call(), tc.code)
	}
	if err := e.svc.DeleteTag(e.ctx, tenant, "tagged", "v1"); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.GetTag(e.ctx, tenant, "tagged", "v1")
	wantCode(t, "get deleted", err, repolock.ENotFound)
}
