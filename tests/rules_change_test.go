package tests

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/repolock/repolock/client"
)

// TestAliasChangeKeepsOneOwner is issue 24's story, through the real
// binary at its defaults: an alias change is a re-key applied as one
// operation, so the moment the admin's POST answers, the repository it
// merges has one key and one owner; there is no window before `repolock rekey`.
// A change that would give a repository two owners is refused with
// alias_conflict, and nothing changes.
func TestAliasChangeKeepsOneOwner(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := t.Context()
	admin := s.admin(t)
	alice, bob := s.tenant(t, "alice"), s.tenant(t, "bob")

	// 1. alice claims the repository through the ssh host's name.
	web, err := alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: "git@gitlab-ssh.example.com:o/r.git"})
	if err != nil || web.NormalizedURL != "gitlab-ssh.example.com/o/r" {
		t.Fatalf("alice's application: %v %+v", err, web)
	}

	// 2. The alias: 201, and the change re-keyed alice's lock in the same
	// operation.
	alias, err := admin.CreateAlias(ctx, client.CreateAliasRequest{From: "gitlab-ssh.example.com", To: "gitlab.example.com"})
	if err != nil {
		t.Fatalf("create alias: %v", err)
	}
	if ch := alias.Change; alias.From != "gitlab-ssh.example.com" || alias.To != "gitlab.example.com" || ch.DryRun || ch.Action != "add" ||
		ch.Endpoint != "gitlab-ssh.example.com" || ch.ExaminedLocks != 1 || ch.RekeyedLocks != 1 || len(ch.Conflicts) != 0 || len(ch.Rejected) != 0 {
		t.Fatalf("create alias = %+v", alias)
	}
	if got, err := alice.GetApplication(ctx, web.ID); err != nil || got.NormalizedURL != "gitlab.example.com/o/r" {
		t.Fatalf("alice's application after the alias: %v %+v", err, got)
	}

	// 3. bob's claim on the alias target's spelling, at once (no wait for
	// ALIAS_REFRESH, no `repolock rekey`): claimed by alice.
	_, err = bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "mirror", RepoURL: "https://gitlab.example.com/o/r"})
	if ce := wantAPIError(t, "bob's application", err, http.StatusConflict, client.CodeRepositoryClaimed, ""); ce.Owner() != "alice" {
		t.Fatalf("bob's application: owner %q, want alice", ce.Owner())
	}

	// 4. One owner in the reports, and nothing stale for `repolock rekey`.
	wantOneOwner := func(when string) {
		t.Helper()
		out, errOut, code := runCLI(t, s.DatabaseURL, "report", "ownership", "--format", "json")
		var own struct {
			Items []map[string]any `json:"items"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &own) != nil {
			t.Fatalf("%s: repolock report ownership: exit %d\n%s\n%s", when, code, out, errOut)
		}
		locksOf := map[string]float64{}
		for _, row := range own.Items {
			name, _ := row["tenant_name"].(string)
			locksOf[name], _ = row["locks"].(float64)
		}
		if len(locksOf) != 2 || locksOf["alice"] != 1 || locksOf["bob"] != 0 {
			t.Fatalf("%s: repolock report ownership = %s, want alice 1 lock, bob none", when, out)
		}
		rows, err := admin.GetReport(ctx, "locks", client.ReportOptions{})
		if err != nil || len(rows.Items) != 1 || rows.Items[0]["git_repository_url"] != "gitlab.example.com/o/r" || rows.Items[0]["owner_name"] != "alice" {
			t.Fatalf("%s: locks report: %v %+v, want alice's one lock on gitlab.example.com/o/r", when, err, rows)
		}
	}
	wantOneOwner("after the alias")
	if rep, err := admin.RunRekey(ctx, client.RekeyOptions{DryRun: true}); err != nil || rep.StaleLocks != 0 {
		t.Fatalf("rekey dry run: %v %+v, want nothing stale", err, rep)
	}

	// The conflict case: each tenant holds one spelling of a repository
	// that another alias would merge. The change and its dry run (HTTP and
	// CLI) are refused with every conflict named; nothing changes.
	alices, err := alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "api", RepoURL: "git@git-ssh.example.org:o/s.git"})
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "api", RepoURL: "https://git.example.org/o/s"})
	if err != nil {
		t.Fatal(err)
	}
	merge := client.CreateAliasRequest{From: "git-ssh.example.org", To: "git.example.org"}
	_, err = admin.CreateAlias(ctx, merge)
	ce := wantAPIError(t, "conflicting alias", err, http.StatusConflict, client.CodeAliasConflict, "nothing was changed")
	conflicts, rejected, ok := ce.AliasConflicts()
	if !ok || len(conflicts) != 1 || len(rejected) != 0 {
		t.Fatalf("conflicting alias: %+v %+v %v, want one conflict", conflicts, rejected, ok)
	}
	if c := conflicts[0]; c.User != "alice" || c.RepoURL != alices.RepoURL || c.RefID != alices.ID || c.OldKey != "git-ssh.example.org/o/s" ||
		c.NewKey != "git.example.org/o/s" || c.OtherUser != "bob" || c.OtherRepoURL != bobs.RepoURL || c.OtherLockID != bobs.LockID {
		t.Fatalf("conflicting alias: conflict %+v", c)
	}
	if _, err := admin.PlanCreateAlias(ctx, merge); !client.IsAliasConflict(err) {
		t.Fatalf("conflicting alias, dry run: %v, want alias_conflict", err)
	}
	out, errOut, code := runCLI(t, s.DatabaseURL, "alias", "--dry-run", "add", merge.From, merge.To)
	var plan client.AliasChange
	if code != 3 || json.Unmarshal([]byte(out), &plan) != nil || !plan.DryRun || len(plan.Conflicts) != 1 || plan.Conflicts[0].OtherUser != "bob" {
		t.Fatalf("repolock alias --dry-run add: exit %d, want 3 with the plan\n%s\n%s", code, out, errOut)
	}
	if as, err := admin.ListAliases(ctx); err != nil || len(as) != 1 || as[0].ID != alias.ID {
		t.Fatalf("aliases after the refused change: %v %+v, want only the first", err, as)
	}
	for _, c := range []struct {
		who      *client.Client
		id, want string
	}{{alice, web.ID, "gitlab.example.com/o/r"}, {bob, bobs.ID, "git.example.org/o/s"}} {
		if got, err := c.who.GetApplication(ctx, c.id); err != nil || got.NormalizedURL != c.want {
			t.Fatalf("application %s after the refused change: %v %+v, want %s", c.id, err, got, c.want)
		}
	}
	apps, err := alice.ListApplicationsPage(ctx, client.ListOptions{})
	if err != nil || len(apps.Items) != 2 {
		t.Fatalf("alice's applications: %v %+v", err, apps)
	}
	for _, a := range apps.Items {
		if a.Name == "api" && a.NormalizedURL != "git-ssh.example.org/o/s" {
			t.Fatalf("alice's api application after the refused change: %+v", a)
		}
	}
}
