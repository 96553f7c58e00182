package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// The life of a repository lock through the real binary: claim, refusal of
// another tenant, reference counting across applications and credentials,
// release, hand-over, tenant deletion, and the operators' views of it.
func TestLocksEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	alice := s.createTenant(t, "alice")
	bob := s.createTenant(t, "bob")

	status, app := s.do(t, http.MethodPost, "/v1/applications", alice, map[string]any{
		"name": "web", "repo_url": "https://ci-bot:ghp_E2ESECRET@github.com/Acme/Web.git", "path": "deploy", "target_revision": "main",
	})
	if status != http.StatusCreated || app["repo_url"] != "https://github.com/Acme/Web.git" || app["normalized_url"] != "github.com/acme/web" {
		t.Fatalf("create: %d %v", status, app)
	}
	lockID := app["lock_id"].(string)

	status, resp := s.do(t, http.MethodPost, "/v1/applications", bob, map[string]any{"name": "web", "repo_url": "git@github.com:acme/web.git"})
	if status != http.StatusConflict || errorCode(resp) != "repository_claimed" ||
		errorMessage(resp) != "a repository URL is already claimed by another user: alice" || resp["error"].(map[string]any)["owner"] != "alice" {
		t.Fatalf("bob: %d %v", status, resp)
	}
	status, resp = s.do(t, http.MethodPost, "/v1/repository-credentials", alice, map[string]any{
		"name": "web-creds", "repo_url": "ssh://git@github.com/acme/web", "username": "git", "ssh_private_key": "-----BEGIN OPENSSH PRIVATE KEY-----",
	})
	if status != http.StatusBadRequest || !strings.Contains(errorMessage(resp), "secret_ref") {
		t.Fatalf("raw key: %d %v", status, resp)
	}
	status, cred := s.do(t, http.MethodPost, "/v1/repository-credentials", alice, map[string]any{
		"name": "web-creds", "repo_url": "ssh://git@github.com/acme/web", "username": "git", "secret_ref": "k8s://argocd/web-deploy-key",
	})
	if status != http.StatusCreated || cred["lock_id"] != lockID {
		t.Fatalf("credential: %d %v", status, cred)
	}
	status, l := s.do(t, http.MethodGet, "/v1/locks/"+lockID, alice, nil)
	if status != http.StatusOK || l["applications"] != 1.0 || l["repository_credentials"] != 1.0 {
		t.Fatalf("lock: %d %v", status, l)
	}

	// The operators' view, through the CLI.
	out, errOut, code := runCLI(t, s.DatabaseURL, "locks", "owner", "https://github.com/acme/web")
	if code != 0 || !strings.Contains(out, "github.com/acme/web") || !strings.Contains(out, "alice") || !strings.Contains(out, lockID) {
		t.Fatalf("api locks owner: %d %q %q", code, out, errOut)
	}
	// The denial is audited where the reporting view finds it.
	out, errOut, code = runCLI(t, s.DatabaseURL, "report", "denials", "--format", "json")
	if code != 0 || !strings.Contains(out, "github.com/acme/web") || !strings.Contains(out, "bob") || !strings.Contains(out, "alice") {
		t.Fatalf("api report denials: %d %q %q", code, out, errOut)
	}

	// Deleting the references one by one keeps the lock until the last.
	if status, _ := s.do(t, http.MethodDelete, "/v1/applications/"+app["id"].(string), alice, nil); status != http.StatusNoContent {
		t.Fatalf("delete application: %d", status)
	}
	if status, resp := s.do(t, http.MethodPost, "/v1/applications", bob, map[string]any{"name": "web", "repo_url": "https://github.com/acme/web"}); status != http.StatusConflict {
		t.Fatalf("bob while the credential holds the lock: %d %v", status, resp)
	}
	if status, _ := s.do(t, http.MethodDelete, "/v1/repository-credentials/"+cred["id"].(string), alice, nil); status != http.StatusNoContent {
		t.Fatalf("delete credential: %d", status)
	}
	status, list := s.do(t, http.MethodGet, "/v1/locks", alice, nil)
	if items := list["items"].([]any); status != http.StatusOK || len(items) != 0 {
		t.Fatalf("alice's locks after the last reference: %d %v", status, list)
	}
	status, bobApp := s.do(t, http.MethodPost, "/v1/applications", bob, map[string]any{"name": "web", "repo_url": "https://github.com/acme/web"})
	if status != http.StatusCreated {
		t.Fatalf("bob after the release: %d %v", status, bobApp)
	}

	// Deleting a tenant releases its locks.
	status, resp = s.do(t, http.MethodDelete, "/v1/admin/users/bob", s.AdminToken, nil)
	if status != http.StatusOK || resp["applications"] != 1.0 || resp["locks_released"] != 1.0 {
		t.Fatalf("delete bob: %d %v", status, resp)
	}
	status, resp = s.do(t, http.MethodPost, "/v1/locks/acquire", alice, map[string]any{"repo_url": "github.com/acme/web"})
	if status != http.StatusOK || resp["acquired"] != true {
		t.Fatalf("alice takes it back: %d %v", status, resp)
	}
}

// Tenants racing for the same repositories over HTTP get 201 or 409
// repository_claimed, never anything else, and each repository ends with
// one owner.
func TestLocksRaceEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	tokens := []string{s.createTenant(t, "t1"), s.createTenant(t, "t2"), s.createTenant(t, "t3")}
	urls := []string{"https://github.com/race/r%d", "git@github.com:race/r%d.git", "ssh://git@github.com/race/r%d/"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for ti, token := range tokens {
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func(ti, c int, token string) {
				defer wg.Done()
				for r := 0; r < 10; r++ {
					body, _ := json.Marshal(map[string]any{"name": "c" + string(rune('a'+c)) + "-" + string(rune('a'+r)), "repo_url": strings.Replace(urls[(c+r)%3], "%d", string(rune('0'+(r+ti)%10)), 1)})
					status, _, raw := s.doRaw(t, http.MethodPost, "/v1/applications", token, http.Header{"Content-Type": {"application/json"}}, strings.NewReader(string(body)))
					mu.Lock()
					statuses[status]++
					if status != http.StatusCreated && !(status == http.StatusConflict && strings.Contains(string(raw), `"repository_claimed"`)) {
						t.Errorf("unexpected %d %s", status, raw)
					}
					mu.Unlock()
				}
			}(ti, c, token)
		}
	}
	wg.Wait()
	owned := 0
	for _, token := range tokens {
		_, list := s.do(t, http.MethodGet, "/v1/locks?page_size=100", token, nil)
		owned += len(list["items"].([]any))
	}
	if owned != 10 || statuses[http.StatusCreated]+statuses[http.StatusConflict] != 120 {
		t.Fatalf("%d locks for 10 repositories; statuses %v", owned, statuses)
	}
}
