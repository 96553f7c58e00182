package tests

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/repolock/repolock/client"
)

// The life of a repository lock through the real binary: claim, refusal of
// another tenant, reference counting across applications and credentials,
// release, hand-over, tenant deletion, and the operators' views of it.
func TestLocksEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := t.Context()
	aliceToken := s.createTenant(t, "alice")
	alice := s.client(t, aliceToken)
	bob := s.tenant(t, "bob")

	app, err := alice.CreateApplication(ctx, client.CreateApplicationRequest{
		Name: "web", RepoURL: "https://ci-bot:ghp_E2ESECRET@github.com/Acme/Web.git", Path: "deploy", TargetRevision: "main",
	})
	if err != nil || app.RepoURL != "https://github.com/Acme/Web.git" || app.NormalizedURL != "github.com/acme/web" {
		t.Fatalf("create: %v %+v", err, app)
	}
	lockID := app.LockID

	_, err = bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: "git@github.com:acme/web.git"})
	ce := wantAPIError(t, "bob", err, http.StatusConflict, client.CodeRepositoryClaimed, "")
	if ce.Message != "a repository URL is already claimed by another user: alice" || ce.Owner() != "alice" {
		t.Fatalf("bob: %+v", ce)
	}
	// A raw key is a field the contract does not have: raw HTTP.
	status, resp := s.do(t, http.MethodPost, "/v1/repository-credentials", aliceToken, map[string]any{
		"name": "web-creds", "repo_url": "ssh://git@github.com/acme/web", "username": "git", "ssh_private_key": "-----BEGIN OPENSSH PRIVATE KEY-----",
	})
	if status != http.StatusBadRequest || !strings.Contains(errorMessage(resp), "secret_ref") {
		t.Fatalf("raw key: %d %v", status, resp)
	}
	cred, err := alice.CreateRepositoryCredential(ctx, client.CreateRepositoryCredentialRequest{
		Name: "web-creds", RepoURL: "ssh://git@github.com/acme/web", Username: "git", SecretRef: "k8s://argocd/web-deploy-key",
	})
	if err != nil || cred.LockID != lockID {
		t.Fatalf("credential: %v %+v", err, cred)
	}
	l, err := alice.GetLock(ctx, lockID)
	if err != nil || l.Applications != 1 || l.RepositoryCredentials != 1 {
		t.Fatalf("lock: %v %+v", err, l)
	}

	// The operators' view, through the CLI.
	out, errOut, code := runCLI(t, s.DatabaseURL, "locks", "owner", "https://github.com/acme/web")
	if code != 0 || !strings.Contains(out, "github.com/acme/web") || !strings.Contains(out, "alice") || !strings.Contains(out, lockID) {
		t.Fatalf("repolock locks owner: %d %q %q", code, out, errOut)
	}
	// The denial is audited where the reporting view finds it.
	out, errOut, code = runCLI(t, s.DatabaseURL, "report", "denials", "--format", "json")
	if code != 0 || !strings.Contains(out, "github.com/acme/web") || !strings.Contains(out, "bob") || !strings.Contains(out, "alice") {
		t.Fatalf("repolock report denials: %d %q %q", code, out, errOut)
	}

	// Deleting the references one by one keeps the lock until the last.
	if err := alice.DeleteApplication(ctx, app.ID); err != nil {
		t.Fatalf("delete application: %v", err)
	}
	if _, err := bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: "https://github.com/acme/web"}); !client.IsClaimed(err) {
		t.Fatalf("bob while the credential holds the lock: %v", err)
	}
	if err := alice.DeleteRepositoryCredential(ctx, cred.ID); err != nil {
		t.Fatalf("delete credential: %v", err)
	}
	if locks, err := alice.ListLocksPage(ctx, client.ListOptions{}); err != nil || len(locks.Items) != 0 {
		t.Fatalf("alice's locks after the last reference: %v %+v", err, locks)
	}
	if _, err := bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: "https://github.com/acme/web"}); err != nil {
		t.Fatalf("bob after the release: %v", err)
	}

	// Deleting a tenant releases its locks.
	del, err := s.admin(t).DeleteUser(ctx, "bob")
	if err != nil || del.Applications != 1 || del.LocksReleased != 1 {
		t.Fatalf("delete bob: %v %+v", err, del)
	}
	acq, err := alice.AcquireLock(ctx, "github.com/acme/web")
	if err != nil || !acq.Acquired {
		t.Fatalf("alice takes it back: %v %+v", err, acq)
	}
}

// Tenants racing for the same repositories over HTTP get 201 or 409
// repository_claimed, never anything else, and each repository ends with
// one owner.
func TestLocksRaceEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	tenants := []*client.Client{s.tenant(t, "t1"), s.tenant(t, "t2"), s.tenant(t, "t3")}
	urls := []string{"https://github.com/race/r%d", "git@github.com:race/r%d.git", "ssh://git@github.com/race/r%d/"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for ti, tenant := range tenants {
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func(ti, c int, tenant *client.Client) {
				defer wg.Done()
				for r := 0; r < 10; r++ {
					_, err := tenant.CreateApplication(t.Context(), client.CreateApplicationRequest{
						Name:    "c" + string(rune('a'+c)) + "-" + string(rune('a'+r)),
						RepoURL: strings.Replace(urls[(c+r)%3], "%d", string(rune('0'+(r+ti)%10)), 1),
					})
					status := http.StatusCreated
					var ce *client.Error
					if errors.As(err, &ce) {
						status = ce.StatusCode
					}
					mu.Lock()
					statuses[status]++
					if err != nil && !client.IsClaimed(err) {
						t.Errorf("unexpected %v", err)
					}
					mu.Unlock()
				}
			}(ti, c, tenant)
		}
	}
	wg.Wait()
	owned := 0
	for _, tenant := range tenants {
		list, err := tenant.ListLocksPage(t.Context(), client.ListOptions{PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		owned += len(list.Items)
	}
	if owned != 10 || statuses[http.StatusCreated]+statuses[http.StatusConflict] != 120 {
		t.Fatalf("%d locks for 10 repositories; statuses %v", owned, statuses)
	}
}

// Concurrent acquires and creates through the real binary at its defaults
// share statements (group commit): every one of them succeeds with its own
// lock, and /metrics counts the statements and the requests they carried.
func TestConcurrentWritesAreBatched(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := t.Context()
	alice := s.tenant(t, "alice")
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	lockIDs := make(chan string, n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			acq, err := alice.AcquireLock(ctx, "https://github.com/acme/lock-"+strconv.Itoa(i))
			if err != nil {
				errs <- err
				return
			}
			lockIDs <- acq.LockID
		}()
		go func() {
			defer wg.Done()
			_, err := alice.CreateApplication(ctx, client.CreateApplicationRequest{
				Name: "app-" + strconv.Itoa(i), RepoURL: "https://github.com/acme/app-" + strconv.Itoa(i)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	close(lockIDs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	seen := map[string]bool{}
	for id := range lockIDs {
		if id == "" || seen[id] {
			t.Errorf("lock id %q empty or given twice", id)
		}
		seen[id] = true
	}
	body, err := s.client(t, "").Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`repolock_db_batch_calls_total{statement="locks.insertLocks"} 40`,
		`repolock_db_batch_calls_total{statement="apps.create.application"} 40`,
		`repolock_db_batches_total{statement="locks.insertLocks"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
