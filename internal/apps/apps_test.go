package apps_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/dbtest"
)

func ptr(s string) *string { return &s }

// Two applications and one credential on one repository, written three
// different ways, share one lock; deleting them one by one keeps the lock
// until the last is gone.
func TestReferenceCounting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, ls := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	const key = "github.com/acme/platform"

	a1, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "a1", RepoURL: "https://github.com/acme/platform"})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "a2", RepoURL: "git@github.com:acme/platform.git", Path: "deploy/prod", TargetRevision: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	c1, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "c1", RepoURL: "ssh://git@GitHub.com/Acme/Platform/", Username: "git", SecretRef: "k8s://argocd/platform-key"})
	if err != nil {
		t.Fatal(err)
	}
	lockID, owner := lockOf(t, db, key)
	if owner != "alice" || a1.LockID != lockID || a2.LockID != lockID || c1.LockID != lockID {
		t.Fatalf("lock %s of %s; a1 %s a2 %s c1 %s", lockID, owner, a1.LockID, a2.LockID, c1.LockID)
	}
	for _, got := range []string{a1.NormalizedURL, a2.NormalizedURL, c1.NormalizedURL} {
		if got != key {
			t.Fatalf("normalized_url %q, want %q", got, key)
		}
	}
	if a2.Path != "deploy/prod" || a2.TargetRevision != "v1.2.3" || a2.RepoURL != "git@github.com:acme/platform.git" {
		t.Fatalf("a2 = %+v", a2)
	}
	checkInvariants(t, db)
	// The one-statement create wrote the lock with its reference: not a GC
	// candidate. Losing one of its references makes it one (the reference
	// tables' triggers), though it is still referenced.
	candidate := func() bool {
		t.Helper()
		var c bool
		if err := db.GetContext(ctx, &c, `SELECT gc_candidate FROM RepositoryLockOwner WHERE id = $1`, lockID); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if candidate() {
		t.Fatal("a lock created with its application is a GC candidate")
	}

	steps := []struct {
		del         func() error
		apps, creds int
	}{
		{func() error { return svc.DeleteApplication(ctx, alice.ID, a1.ID) }, 1, 1},
		{func() error { return svc.DeleteRepositoryCredential(ctx, alice.ID, c1.ID) }, 1, 0},
		{func() error { return svc.DeleteApplication(ctx, alice.ID, a2.ID) }, 0, 0},
	}
	for i, st := range steps {
		if err := st.del(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		id, _ := lockOf(t, db, key)
		if st.apps+st.creds > 0 {
			l, err := ls.Get(ctx, alice.ID, lockID)
			if err != nil || id != lockID || l.Applications != st.apps || l.RepositoryCredentials != st.creds {
				t.Fatalf("step %d: lock %q %+v %v, want %s with %d apps %d creds", i, id, l, err, lockID, st.apps, st.creds)
			}
			if !candidate() {
				t.Fatalf("step %d: the lock lost a reference and is not a GC candidate", i)
			}
		} else if id != "" {
			t.Fatalf("step %d: lock %s survived its last reference", i, id)
		}
		checkInvariants(t, db)
	}
	evs := lockEvents(t, db, key)
	if s := eventSummary(evs); s["acquired"] != 1 || s["released"] != 1 {
		t.Fatalf("events %+v", evs)
	}
	checkLifecycle(t, evs)
	// One event per operation, each naming its Application or Credential:
	// the lock's acquired and released rows name the create that made it
	// and the delete that freed it.
	var named []string
	if err := db.SelectContext(ctx, &named, `
		SELECT event || ' ' || coalesce(application_id::text || ' ' || application_name, credential_id::text || ' ' || credential_name, '')
			|| ' ' || coalesce(lock_id::text, '')
		FROM repository_lock_events WHERE git_repository_url = $1 ORDER BY id`, key); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"acquired " + a1.ID + " a1 " + lockID,
		"application_created " + a2.ID + " a2 " + lockID,
		"credential_created " + c1.ID + " c1 " + lockID,
		"application_deleted " + a1.ID + " a1 " + lockID,
		"credential_deleted " + c1.ID + " c1 " + lockID,
		"released " + a2.ID + " a2 " + lockID,
	}
	if !slices.Equal(named, want) {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(named, "\n"), strings.Join(want, "\n"))
	}
}

func TestCreateApplicationValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	for _, tc := range []struct {
		name string
		in   apps.NewApplication
		msg  string
	}{
		{"empty name", apps.NewApplication{RepoURL: "https://github.com/a/b"}, "name must be 1-253 characters"},
		{"upper-case name", apps.NewApplication{Name: "App", RepoURL: "https://github.com/a/b"}, "name must be 1-253 characters"},
		{"long name", apps.NewApplication{Name: strings.Repeat("a", 254), RepoURL: "https://github.com/a/b"}, "name must be 1-253 characters"},
		{"empty URL", apps.NewApplication{Name: "a"}, "repo_url: invalid repository URL: URL is empty"},
		{"local path", apps.NewApplication{Name: "a", RepoURL: "/srv/git/repo"}, "repo_url: invalid repository URL: local paths are not repository URLs"},
		{"file URL", apps.NewApplication{Name: "a", RepoURL: "file:///srv/git/repo"}, "repo_url: invalid repository URL: file:// URLs are local paths"},
		{"helper syntax", apps.NewApplication{Name: "a", RepoURL: "ext::sh -c touch% /tmp/pwned"}, "repo_url: invalid repository URL: remote-helper syntax"},
		{"absolute path", apps.NewApplication{Name: "a", RepoURL: "https://github.com/a/b", Path: "/etc"}, "path must be relative"},
		{"dot-dot path", apps.NewApplication{Name: "a", RepoURL: "https://github.com/a/b", Path: "deploy/../../x"}, "path must not contain '..'"},
		{"revision with space", apps.NewApplication{Name: "a", RepoURL: "https://github.com/a/b", TargetRevision: "main branch"}, "target_revision must not contain whitespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.CreateApplication(ctx, alice.ID, tc.in)
			if repolock.ErrorCode(err) != repolock.EInvalid || !strings.HasPrefix(repolock.ErrorMessage(err), tc.msg) {
				t.Fatalf("got %v, want invalid_argument %q", err, tc.msg)
			}
		})
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT (SELECT count(*) FROM applications) + (SELECT count(*) FROM RepositoryLockOwner) + (SELECT count(*) FROM repository_lock_events)`); err != nil || n != 0 {
		t.Fatalf("rows written by rejected requests: %d %v", n, err)
	}
}

// A duplicate name fails with already_exists and leaves nothing behind: not
// even the lock acquired for it in the same transaction.
func TestDuplicateNameWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	if _, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "web", RepoURL: "https://github.com/a/one"}); err != nil {
		t.Fatal(err)
	}
	_, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "web", RepoURL: "https://github.com/a/two"})
	if repolock.ErrorCode(err) != repolock.EAlreadyExists || repolock.ErrorMessage(err) != `an application named "web" already exists` {
		t.Fatalf("duplicate: %v", err)
	}
	if id, _ := lockOf(t, db, "github.com/a/two"); id != "" {
		t.Fatalf("lock on github.com/a/two left behind")
	}
	if evs := lockEvents(t, db, "github.com/a/two"); len(evs) != 0 {
		t.Fatalf("events left behind: %+v", evs)
	}
	// Names are per tenant.
	if _, err := svc.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "web", RepoURL: "https://github.com/b/one"}); err != nil {
		t.Fatalf("bob's web: %v", err)
	}
	if _, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "web", RepoURL: "https://github.com/a/one", SecretRef: "vault://x"}); err != nil {
		t.Fatalf("a credential may share an application's name: %v", err)
	}
	_, err = svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "web", RepoURL: "https://github.com/a/one", SecretRef: "vault://y"})
	if repolock.ErrorCode(err) != repolock.EAlreadyExists || repolock.ErrorMessage(err) != `a repository credential named "web" already exists` {
		t.Fatalf("duplicate credential: %v", err)
	}
	checkInvariants(t, db)
}

// Another tenant's repository is refused with repository_claimed naming the
// owner, nothing is written for it, and the denial is audited.
func TestClaimedByAnotherTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	if _, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "web", RepoURL: "https://github.com/acme/web"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		create func() error
	}{
		{"application", func() error {
			_, err := svc.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "web", RepoURL: "git@github.com:ACME/web.git"})
			return err
		}},
		{"credential", func() error {
			_, err := svc.CreateRepositoryCredential(ctx, bob.ID, apps.NewRepositoryCredential{Name: "web", RepoURL: "https://github.com/acme/web", SecretRef: "vault://b"})
			return err
		}},
	} {
		err := tc.create()
		if repolock.ErrorCode(err) != repolock.ERepositoryClaimed ||
			repolock.ErrorMessage(err) != "a repository URL is already claimed by another user: alice" ||
			repolock.ErrorDetails(err)["owner"] != "alice" {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT (SELECT count(*) FROM applications WHERE cluster_user_id = $1) + (SELECT count(*) FROM repository_credentials WHERE cluster_user_id = $1)`, bob.ID); err != nil || n != 0 {
		t.Fatalf("bob's rows: %d %v", n, err)
	}
	// Both denials: one row (coalesced within the window) counting 2.
	evs := lockEvents(t, db, "github.com/acme/web")
	if len(evs) != 2 || evs[1].Event != "denied" || evs[1].Count != 2 || evs[1].TenantName.String != "bob" || evs[1].OwnerName.String != "alice" {
		t.Fatalf("events %+v", evs)
	}
}

// The stored repo_url is the URL as given without what can be a secret
// (normalize.DisplayURL pins the forms); an ssh login name is kept; no
// secret from the URL is stored anywhere.
func TestUserInfoStripped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	for _, tc := range []struct{ in, want string }{
		{"https://x-access-token:ghp_SECRET1@github.com/acme/a.git", "https://github.com/acme/a.git"},
		{"https://ghp_SECRET2@github.com/acme/b", "https://github.com/acme/b"},
		{"ssh://git@github.com/acme/c", "ssh://git@github.com/acme/c"},
		{"git@github.com:acme/e.git", "git@github.com:acme/e.git"},
		{"ghp_SECRET3abcdefghijklmnop@github.com:acme/f.git", "github.com:acme/f.git"},
		{"  https://github.com/acme/d  ", "https://github.com/acme/d"},
	} {
		app, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "n" + fmt.Sprint(len(tc.want)) + tc.want[len(tc.want)-1:], RepoURL: tc.in})
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		got, err := svc.GetApplication(ctx, alice.ID, app.ID)
		if err != nil || app.RepoURL != tc.want || got.RepoURL != tc.want {
			t.Fatalf("%q: stored %q (returned %q), want %q", tc.in, got.RepoURL, app.RepoURL, tc.want)
		}
	}
	var leaks int
	if err := db.GetContext(ctx, &leaks, `
		SELECT (SELECT count(*) FROM applications WHERE repo_url LIKE '%SECRET%' OR normalized_url LIKE '%SECRET%')
		     + (SELECT count(*) FROM repository_lock_events WHERE git_repository_url LIKE '%SECRET%')
		     + (SELECT count(*) FROM RepositoryLockOwner WHERE git_repository_url LIKE '%SECRET%')`); err != nil || leaks != 0 {
		t.Fatalf("secret stored %d times (%v)", leaks, err)
	}
}

func TestCredentialSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	for _, tc := range []struct {
		name string
		in   apps.NewRepositoryCredential
		msg  string
	}{
		{"password in URL", apps.NewRepositoryCredential{Name: "c", RepoURL: "https://me:hunter2@github.com/a/b", SecretRef: "vault://x"}, "repo_url must not contain a password or token"},
		{"no secret_ref", apps.NewRepositoryCredential{Name: "c", RepoURL: "https://github.com/a/b"}, "secret_ref is required"},
		{"whitespace in secret_ref", apps.NewRepositoryCredential{Name: "c", RepoURL: "https://github.com/a/b", SecretRef: "my secret"}, "secret_ref must be a reference"},
		{"control character in username", apps.NewRepositoryCredential{Name: "c", RepoURL: "https://github.com/a/b", Username: "a\nb", SecretRef: "vault://x"}, "username must not contain control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.CreateRepositoryCredential(ctx, alice.ID, tc.in)
			want := repolock.EInvalid
			if strings.Contains(tc.name, "password in URL") {
				want = repolock.ESecretInField
			}
			if repolock.ErrorCode(err) != want || !strings.HasPrefix(repolock.ErrorMessage(err), tc.msg) {
				t.Fatalf("got %v, want %s %q", err, want, tc.msg)
			}
			if strings.Contains(repolock.ErrorMessage(err), "hunter2") || strings.Contains(repolock.ErrorMessage(err), "ghp_") {
				t.Fatalf("message echoes the secret: %q", repolock.ErrorMessage(err))
			}
		})
	}
	// Secrets in credential fields: 400 secret_in_field naming the field
	// and what was found, never the value; nothing is stored.
	const ghp = "ghp_abcdefabcdefabcdefabcdefabcdef123456"
	for _, tc := range []struct {
		name            string
		in              apps.NewRepositoryCredential
		field, detected string
	}{
		{"GitHub token as username", apps.NewRepositoryCredential{Username: ghp}, "username", "a GitHub personal access token"},
		{"GitHub OAuth token as username", apps.NewRepositoryCredential{Username: "gho_abcdefghijklmnopqrstuvwxyz"}, "username", "a GitHub OAuth token"},
		{"GitHub app token as username", apps.NewRepositoryCredential{Username: "ghs_abcdefghijklmnopqrstuvwxyz"}, "username", "a GitHub server-to-server token"},
		{"fine-grained token as username", apps.NewRepositoryCredential{Username: "github_pat_11AAAAAAA0abcdefghijklmnop"}, "username", "a GitHub fine-grained access token"},
		{"GitLab token as username", apps.NewRepositoryCredential{Username: "glpat-abcdefghijklmnopqrst"}, "username", "a GitLab personal access token"},
		{"Bitbucket app password as username", apps.NewRepositoryCredential{Username: "ATBBabcdefghijklmnopqrstuvwx"}, "username", "a Bitbucket app password"},
		{"JWT as username", apps.NewRepositoryCredential{Username: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"}, "username", "a JSON Web Token"},
		{"user:password as username", apps.NewRepositoryCredential{Username: "x:hunter2"}, "username", "a user:password pair"},
		{"private key as username", apps.NewRepositoryCredential{Username: "-----BEGIN OPENSSH PRIVATE KEY-----"}, "username", "a PEM private key"},
		{"GitHub token as secret_ref", apps.NewRepositoryCredential{SecretRef: ghp}, "secret_ref", "a GitHub personal access token"},
		{"token inside secret_ref", apps.NewRepositoryCredential{SecretRef: "vault://kv/" + ghp}, "secret_ref", "a GitHub personal access token"},
		{"JWT as secret_ref", apps.NewRepositoryCredential{SecretRef: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"}, "secret_ref", "a JSON Web Token"},
		{"URL with a password as secret_ref", apps.NewRepositoryCredential{SecretRef: "https://x:hunter2@vault.example/v1/kv/git"}, "secret_ref", "a URL with a password"},
		{"URL with a token user as secret_ref", apps.NewRepositoryCredential{SecretRef: "https://" + ghp + "@vault.example/v1/kv/git"}, "secret_ref", "a URL with a GitHub personal access token as its user"},
		{"private key as secret_ref", apps.NewRepositoryCredential{SecretRef: "-----BEGIN OPENSSH PRIVATE KEY-----"}, "secret_ref", "a PEM private key"},
		{"token user in repo_url", apps.NewRepositoryCredential{RepoURL: "https://" + ghp + "@github.com/a/b"}, "repo_url", "a GitHub personal access token as its user"},
		{"password in repo_url", apps.NewRepositoryCredential{RepoURL: "https://x-access-token:hunter2@github.com/a/b"}, "repo_url", "a password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Name = "s"
			if in.RepoURL == "" {
				in.RepoURL = "https://github.com/a/secret"
			}
			if in.SecretRef == "" {
				in.SecretRef = "k8s://ns/name"
			}
			_, err := svc.CreateRepositoryCredential(ctx, alice.ID, in)
			msg := repolock.ErrorMessage(err)
			if repolock.ErrorCode(err) != repolock.ESecretInField || repolock.ErrorDetails(err)["field"] != tc.field || !strings.Contains(msg, tc.detected) {
				t.Fatalf("got %v %v, want secret_in_field on %s naming %q", err, repolock.ErrorDetails(err), tc.field, tc.detected)
			}
			for _, secret := range []string{"hunter2", "abcdef", "eyJ", "BEGIN"} {
				if strings.Contains(msg, secret) {
					t.Fatalf("message echoes the secret: %q", msg)
				}
			}
		})
	}
	// Not secrets: kept as given.
	for i, in := range []apps.NewRepositoryCredential{
		{Username: "git", SecretRef: "vault://kv/data/git/github"},
		{Username: "deploy-bot", SecretRef: "k8s://argocd/repo-creds"},
		{Username: "x-access-token", SecretRef: "aws-sm://arn:aws:secretsmanager:us-east-1:123456789012:secret:git"},
		{Username: "APKAEIBAERJR2EXAMPLE", SecretRef: "env:GIT_TOKEN"},
	} {
		in.Name, in.RepoURL = fmt.Sprintf("ok%d", i), fmt.Sprintf("https://github.com/a/ok%d", i)
		c, err := svc.CreateRepositoryCredential(ctx, alice.ID, in)
		if err != nil || c.Username != in.Username || c.SecretRef != in.SecretRef {
			t.Fatalf("%+v: %+v %v", in, c, err)
		}
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT count(*) FROM repository_credentials WHERE name = 's'`); err != nil || n != 0 {
		t.Fatalf("a refused credential was stored: %d %v", n, err)
	}
	// A user name without a password is fine, and stripped.
	c, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "ok", RepoURL: "https://deployer@github.com/a/b", Username: "deployer", SecretRef: "k8s://ns/secret"})
	if err != nil || c.RepoURL != "https://github.com/a/b" || c.Username != "deployer" || c.SecretRef != "k8s://ns/secret" {
		t.Fatalf("%+v %v", c, err)
	}
	// Updates are held to the same rules.
	_, err = svc.UpdateRepositoryCredential(ctx, alice.ID, c.ID, apps.RepositoryCredentialPatch{RepoURL: ptr("https://me:pw@github.com/a/b")})
	if repolock.ErrorCode(err) != repolock.ESecretInField {
		t.Fatalf("update with a password: %v", err)
	}
	_, err = svc.UpdateRepositoryCredential(ctx, alice.ID, c.ID, apps.RepositoryCredentialPatch{Username: ptr("ghp_abcdefabcdefabcdefabcdefabcdef123456")})
	if repolock.ErrorCode(err) != repolock.ESecretInField {
		t.Fatalf("update with a password: %v", err)
	}
	_, err = svc.UpdateRepositoryCredential(ctx, alice.ID, c.ID, apps.RepositoryCredentialPatch{SecretRef: ptr("")})
	if repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("update to an empty secret_ref: %v", err)
	}
}

func TestUpdateApplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	create := func(name, url string) apps.Application {
		t.Helper()
		a, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: name, RepoURL: url})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	web := create("web", "https://github.com/acme/web")
	webLock := web.LockID
	if _, err := svc.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "bobs", RepoURL: "https://github.com/bob/x"}); err != nil {
		t.Fatal(err)
	}

	t.Run("no change", func(t *testing.T) {
		got, err := svc.UpdateApplication(ctx, alice.ID, web.ID, apps.ApplicationPatch{Name: ptr("web")})
		if err != nil || got != web {
			t.Fatalf("got %+v %v, want %+v", got, err, web)
		}
	})
	t.Run("fields", func(t *testing.T) {
		got, err := svc.UpdateApplication(ctx, alice.ID, web.ID, apps.ApplicationPatch{Path: ptr("k8s"), TargetRevision: ptr("main")})
		if err != nil || got.Path != "k8s" || got.TargetRevision != "main" || got.LockID != webLock || got.Name != "web" || !got.UpdatedAt.After(web.UpdatedAt) {
			t.Fatalf("%+v %v", got, err)
		}
	})
	t.Run("another spelling keeps the lock", func(t *testing.T) {
		got, err := svc.UpdateApplication(ctx, alice.ID, web.ID, apps.ApplicationPatch{RepoURL: ptr("git@github.com:acme/web.git")})
		if err != nil || got.RepoURL != "git@github.com:acme/web.git" || got.LockID != webLock || got.NormalizedURL != "github.com/acme/web" {
			t.Fatalf("%+v %v", got, err)
		}
		if s := eventSummary(lockEvents(t, db, "github.com/acme/web")); s["acquired"] != 1 || s["released"] != 0 {
			t.Fatalf("events %v", s)
		}
	})
	t.Run("claimed repository", func(t *testing.T) {
		_, err := svc.UpdateApplication(ctx, alice.ID, web.ID, apps.ApplicationPatch{RepoURL: ptr("https://github.com/bob/x"), Path: ptr("changed")})
		if repolock.ErrorCode(err) != repolock.ERepositoryClaimed || repolock.ErrorDetails(err)["owner"] != "bob" {
			t.Fatalf("%v", err)
		}
		got, err := svc.GetApplication(ctx, alice.ID, web.ID)
		if err != nil || got.NormalizedURL != "github.com/acme/web" || got.Path != "k8s" || got.LockID != webLock {
			t.Fatalf("changed by a refused update: %+v %v", got, err)
		}
		if s := eventSummary(lockEvents(t, db, "github.com/bob/x")); s["denied"] != 1 {
			t.Fatalf("denial not audited: %v", s)
		}
	})
	t.Run("move releases the old lock", func(t *testing.T) {
		got, err := svc.UpdateApplication(ctx, alice.ID, web.ID, apps.ApplicationPatch{RepoURL: ptr("https://github.com/acme/web-v2")})
		if err != nil || got.NormalizedURL != "github.com/acme/web-v2" || got.LockID == webLock || got.LockID == "" {
			t.Fatalf("%+v %v", got, err)
		}
		if id, _ := lockOf(t, db, "github.com/acme/web"); id != "" {
			t.Fatalf("old lock kept")
		}
		if id, owner := lockOf(t, db, "github.com/acme/web-v2"); id != got.LockID || owner != "alice" {
			t.Fatalf("new lock %s of %s, want %s", id, owner, got.LockID)
		}
		checkLifecycle(t, lockEvents(t, db, "github.com/acme/web"))
		checkInvariants(t, db)
	})
	t.Run("move keeps an old lock still in use", func(t *testing.T) {
		a := create("a", "https://github.com/acme/shared")
		b := create("b", "https://github.com/acme/shared")
		got, err := svc.UpdateApplication(ctx, alice.ID, a.ID, apps.ApplicationPatch{RepoURL: ptr("https://github.com/acme/other")})
		if err != nil || got.LockID == b.LockID {
			t.Fatalf("%+v %v", got, err)
		}
		if id, _ := lockOf(t, db, "github.com/acme/shared"); id != b.LockID {
			t.Fatalf("lock still used by b was released")
		}
		checkInvariants(t, db)
	})
	t.Run("rename to an existing name", func(t *testing.T) {
		create("taken", "https://github.com/acme/taken")
		_, err := svc.UpdateApplication(ctx, alice.ID, web.ID, apps.ApplicationPatch{Name: ptr("taken"), RepoURL: ptr("https://github.com/acme/fresh")})
		if repolock.ErrorCode(err) != repolock.EAlreadyExists {
			t.Fatalf("%v", err)
		}
		if id, _ := lockOf(t, db, "github.com/acme/fresh"); id != "" {
			t.Fatalf("lock acquired by a failed update was kept")
		}
		checkInvariants(t, db)
	})
	t.Run("invalid patch", func(t *testing.T) {
		for _, p := range []apps.ApplicationPatch{{Name: ptr("")}, {RepoURL: ptr("nope")}, {Path: ptr("/abs")}, {TargetRevision: ptr("a b")}} {
			if _, err := svc.UpdateApplication(ctx, alice.ID, web.ID, p); repolock.ErrorCode(err) != repolock.EInvalid {
				t.Fatalf("%+v: %v", p, err)
			}
		}
	})
}

func TestUpdateRepositoryCredential(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	c, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "c", RepoURL: "https://github.com/acme/one", Username: "u", SecretRef: "vault://one"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := svc.UpdateRepositoryCredential(ctx, alice.ID, c.ID, apps.RepositoryCredentialPatch{RepoURL: ptr("https://github.com/acme/two"), SecretRef: ptr("vault://two"), Username: ptr("v"), Name: ptr("c2")})
	if err != nil || got.NormalizedURL != "github.com/acme/two" || got.SecretRef != "vault://two" || got.Username != "v" || got.Name != "c2" || got.LockID == c.LockID {
		t.Fatalf("%+v %v", got, err)
	}
	if id, _ := lockOf(t, db, "github.com/acme/one"); id != "" {
		t.Fatalf("old lock kept")
	}
	checkInvariants(t, db)
}

// A tenant sees and touches only its own rows: another tenant's id is
// not_found everywhere, and lists hold only the caller's rows.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, ls := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	app, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "a", RepoURL: "https://github.com/alice/a"})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "c", RepoURL: "https://github.com/alice/a", SecretRef: "vault://a"})
	if err != nil {
		t.Fatal(err)
	}
	notFound := func(what string, err error) {
		t.Helper()
		if repolock.ErrorCode(err) != repolock.ENotFound {
			t.Errorf("%s as bob: %v, want not_found", what, err)
		}
	}
	_, err = svc.GetApplication(ctx, bob.ID, app.ID)
	notFound("get application", err)
	_, err = svc.UpdateApplication(ctx, bob.ID, app.ID, apps.ApplicationPatch{Path: ptr("x")})
	notFound("update application", err)
	notFound("delete application", svc.DeleteApplication(ctx, bob.ID, app.ID))
	_, err = svc.GetRepositoryCredential(ctx, bob.ID, cred.ID)
	notFound("get credential", err)
	_, err = svc.UpdateRepositoryCredential(ctx, bob.ID, cred.ID, apps.RepositoryCredentialPatch{Username: ptr("x")})
	notFound("update credential", err)
	notFound("delete credential", svc.DeleteRepositoryCredential(ctx, bob.ID, cred.ID))
	_, err = ls.Get(ctx, bob.ID, app.LockID)
	notFound("get lock", err)
	for _, id := range []string{"", "nope", "00000000-0000-0000-0000-000000000000"} {
		_, err = svc.GetApplication(ctx, alice.ID, id)
		notFound("get application "+id, err)
		notFound("delete credential "+id, svc.DeleteRepositoryCredential(ctx, alice.ID, id))
	}
	as, _, err := svc.ListApplications(ctx, bob.ID, 50, "")
	if err != nil || len(as) != 0 {
		t.Fatalf("bob lists %+v %v", as, err)
	}
	cs, _, err := svc.ListRepositoryCredentials(ctx, bob.ID, 50, "")
	if err != nil || len(cs) != 0 {
		t.Fatalf("bob lists %+v %v", cs, err)
	}
	lks, _, err := ls.List(ctx, bob.ID, 50, "")
	if err != nil || len(lks) != 0 {
		t.Fatalf("bob lists %+v %v", lks, err)
	}
	got, err := svc.GetApplication(ctx, alice.ID, app.ID)
	if err != nil || got != app {
		t.Fatalf("alice's application changed: %+v %v", got, err)
	}
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	var appIDs, credIDs []string
	for i := 0; i < 11; i++ {
		a, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: fmt.Sprintf("a%02d", i), RepoURL: fmt.Sprintf("https://github.com/p/r%d", i%3)})
		if err != nil {
			t.Fatal(err)
		}
		appIDs = append(appIDs, a.ID)
		c, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: fmt.Sprintf("c%02d", i), RepoURL: fmt.Sprintf("https://github.com/p/r%d", i%3), SecretRef: "vault://p"})
		if err != nil {
			t.Fatal(err)
		}
		credIDs = append(credIDs, c.ID)
	}
	for _, size := range []int{1, 4, 11, 12} {
		var gotApps, gotCreds []string
		for token := ""; ; {
			page, next, err := svc.ListApplications(ctx, alice.ID, size, token)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range page {
				gotApps = append(gotApps, a.ID)
			}
			if token = next; token == "" {
				break
			}
		}
		for token := ""; ; {
			page, next, err := svc.ListRepositoryCredentials(ctx, alice.ID, size, token)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range page {
				gotCreds = append(gotCreds, c.ID)
			}
			if token = next; token == "" {
				break
			}
		}
		if strings.Join(gotApps, ",") != strings.Join(appIDs, ",") || strings.Join(gotCreds, ",") != strings.Join(credIDs, ",") {
			t.Fatalf("size %d: apps %v creds %v", size, gotApps, gotCreds)
		}
	}
	_, appToken, err := svc.ListApplications(ctx, alice.ID, 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ListRepositoryCredentials(ctx, alice.ID, 2, appToken); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("an applications token on the credentials list: %v", err)
	}
	if _, _, err := svc.ListApplications(ctx, alice.ID, 2, "garbage"); !errors.Is(err, &repolock.Error{Code: repolock.EInvalid}) {
		t.Fatalf("garbage token: %v", err)
	}
}

func TestDeleteTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	svc, ls := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	for i := 0; i < 3; i++ {
		if _, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: fmt.Sprintf("a%d", i), RepoURL: fmt.Sprintf("https://github.com/alice/r%d", i%2)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "c", RepoURL: "https://github.com/alice/r2", SecretRef: "vault://c"}); err != nil {
		t.Fatal(err)
	}
	// A bare lock without references is released too.
	if _, err := ls.Acquire(ctx, alice.ID, "github.com/alice/bare"); err != nil {
		t.Fatal(err)
	}
	bobApp, err := svc.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "b", RepoURL: "https://github.com/bob/b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "x", RepoURL: "https://github.com/alice/r0"}); repolock.ErrorCode(err) != repolock.ERepositoryClaimed {
		t.Fatalf("bob on alice's repository: %v", err)
	}

	d, err := svc.DeleteTenant(ctx, "alice")
	want := apps.TenantDeletion{Tenant: "alice", Applications: 3, RepositoryCredentials: 1, LocksReleased: 4}
	if err != nil || d != want {
		t.Fatalf("delete: %+v %v, want %+v", d, err, want)
	}
	var left int
	if err := db.GetContext(ctx, &left, `
		SELECT (SELECT count(*) FROM applications WHERE cluster_user_id = $1)
		     + (SELECT count(*) FROM repository_credentials WHERE cluster_user_id = $1)
		     + (SELECT count(*) FROM RepositoryLockOwner WHERE cluster_user_id = $1)
		     + (SELECT count(*) FROM api_tokens WHERE cluster_user_id = $1)
		     + (SELECT count(*) FROM cluster_users WHERE id = $1)`, alice.ID); err != nil || left != 0 {
		t.Fatalf("%d rows of alice left (%v)", left, err)
	}
	for _, key := range []string{"github.com/alice/r0", "github.com/alice/r1", "github.com/alice/r2", "github.com/alice/bare"} {
		evs := lockEvents(t, db, key)
		last := evs[len(evs)-1]
		if last.Event != "released" || last.TenantName.String != "alice" {
			t.Fatalf("%s: events %+v", key, evs)
		}
		checkLifecycle(t, evs)
	}
	// Bob is untouched and can now take alice's repositories.
	if got, err := svc.GetApplication(ctx, bob.ID, bobApp.ID); err != nil || got != bobApp {
		t.Fatalf("bob's application: %+v %v", got, err)
	}
	if _, err := svc.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "x", RepoURL: "https://github.com/alice/r0"}); err != nil {
		t.Fatalf("bob after alice's deletion: %v", err)
	}
	checkInvariants(t, db)
	if _, err := svc.DeleteTenant(ctx, "alice"); repolock.ErrorCode(err) != repolock.ENotFound {
		t.Fatalf("second delete: %v", err)
	}
}
