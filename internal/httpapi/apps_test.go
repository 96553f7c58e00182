package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestApplicationsAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	bob := e.tenant("bob")

	status, app := e.call(http.MethodPost, "/v1/applications", alice, map[string]any{
		"name": "web", "repo_url": "https://bot:ghp_TOKEN@github.com/Acme/Web.git", "path": "deploy", "target_revision": "main",
	})
	if status != http.StatusCreated {
		t.Fatalf("create: %d %v", status, app)
	}
	for k, want := range map[string]any{
		"name": "web", "repo_url": "https://github.com/Acme/Web.git", "normalized_url": "github.com/acme/web",
		"path": "deploy", "target_revision": "main",
	} {
		if app[k] != want {
			t.Errorf("%s = %v, want %v", k, app[k], want)
		}
	}
	for _, k := range []string{"id", "lock_id", "created_at", "updated_at"} {
		if s, _ := app[k].(string); s == "" {
			t.Errorf("%s missing in %v", k, app)
		}
	}
	if len(app) != 9 {
		t.Errorf("unexpected fields in %v", app)
	}
	id := app["id"].(string)

	status, got := e.call(http.MethodGet, "/v1/applications/"+id, alice, nil)
	if status != http.StatusOK || got["id"] != id || got["repo_url"] != "https://github.com/Acme/Web.git" {
		t.Fatalf("get: %d %v", status, got)
	}

	status, resp := e.call(http.MethodPost, "/v1/applications", alice, map[string]any{"name": "web", "repo_url": "https://github.com/acme/other"})
	expectError(t, "duplicate", status, resp, 409, "already_exists", `an application named "web" already exists`)

	status, resp = e.call(http.MethodPost, "/v1/applications", bob, map[string]any{"name": "web", "repo_url": "git@github.com:acme/web.git"})
	expectError(t, "claimed", status, resp, 409, "repository_claimed", "a repository URL is already claimed by another user: alice")
	if errorOf(resp)["owner"] != "alice" {
		t.Fatalf("owner missing: %v", resp)
	}

	for _, tc := range []struct {
		name string
		body map[string]any
		msg  string
	}{
		{"invalid URL", map[string]any{"name": "x", "repo_url": "file:///etc/passwd"}, "repo_url: invalid repository URL: file:// URLs are local paths, not repository URLs"},
		{"no URL", map[string]any{"name": "x"}, "repo_url: invalid repository URL: URL is empty"},
		{"bad name", map[string]any{"name": "Web App", "repo_url": "https://github.com/a/b"}, ""},
		{"unknown field", map[string]any{"name": "x", "repo_url": "https://github.com/a/b", "project": "p"}, `unknown field "project"`},
		{"wrong type", map[string]any{"name": 3, "repo_url": "https://github.com/a/b"}, `field "name" must be of type string`},
	} {
		status, resp := e.call(http.MethodPost, "/v1/applications", alice, tc.body)
		expectError(t, tc.name, status, resp, 400, "invalid_argument", tc.msg)
	}
	status, _, raw := e.raw(http.MethodPost, "/v1/applications", alice, "text/plain", []byte(`{}`))
	if status != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: %d %s", status, raw)
	}

	status, got = e.call(http.MethodPatch, "/v1/applications/"+id, alice, map[string]any{"target_revision": "v2"})
	if status != http.StatusOK || got["target_revision"] != "v2" || got["path"] != "deploy" || got["lock_id"] != app["lock_id"] {
		t.Fatalf("patch: %d %v", status, got)
	}
	status, got = e.call(http.MethodPatch, "/v1/applications/"+id, alice, map[string]any{"repo_url": "https://github.com/acme/web-next"})
	if status != http.StatusOK || got["normalized_url"] != "github.com/acme/web-next" || got["lock_id"] == app["lock_id"] {
		t.Fatalf("patch repo_url: %d %v", status, got)
	}
	// The old repository is free now.
	status, resp = e.call(http.MethodPost, "/v1/applications", bob, map[string]any{"name": "web", "repo_url": "git@github.com:acme/web.git"})
	if status != http.StatusCreated {
		t.Fatalf("bob after the move: %d %v", status, resp)
	}
	status, resp = e.call(http.MethodPatch, "/v1/applications/"+id, alice, map[string]any{"repo_url": "https://github.com/acme/web"})
	expectError(t, "patch onto bob's", status, resp, 409, "repository_claimed", "a repository URL is already claimed by another user: bob")

	status, resp = e.call(http.MethodDelete, "/v1/applications/"+id, alice, nil)
	if status != http.StatusNoContent || resp != nil {
		t.Fatalf("delete: %d %v", status, resp)
	}
	status, resp = e.call(http.MethodGet, "/v1/applications/"+id, alice, nil)
	expectError(t, "get deleted", status, resp, 404, "not_found", "application "+id+" not found")
	status, resp = e.call(http.MethodDelete, "/v1/applications/"+id, alice, nil)
	expectError(t, "delete twice", status, resp, 404, "not_found", "")
}

func TestCredentialsAPISecrets(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "c", "repo_url": "https://github.com/acme/infra", "username": "git", "secret_ref": "k8s://argocd/infra"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	const hint = "; remove it, store the secret in your secret store and send its location in secret_ref"
	for _, field := range []string{"password", "ssh_private_key", "token", "sshPrivateKey", "Password", "bearerToken"} {
		for _, method := range []string{http.MethodPost, http.MethodPatch} {
			path := "/v1/repository-credentials"
			if method == http.MethodPatch {
				path += "/00000000-0000-0000-0000-000000000000"
			}
			status, _, out := e.raw(method, path, alice, "application/json", mustJSON(t, base(map[string]any{field: "hunter2-SECRET"})))
			var resp map[string]any
			_ = json.Unmarshal(out, &resp)
			msg, _ := errorOf(resp)["message"].(string)
			if status != 400 || errorOf(resp)["code"] != "invalid_argument" || !strings.Contains(msg, hint) || !strings.Contains(msg, "repository credentials never carry secrets") {
				t.Fatalf("%s %s: %d %s", method, field, status, out)
			}
			if !strings.EqualFold(errorOf(resp)["field"].(string), field) {
				t.Fatalf("%s: field detail %v", field, errorOf(resp))
			}
			if bytes.Contains(out, []byte("hunter2")) {
				t.Fatalf("%s: the secret is echoed: %s", field, out)
			}
		}
	}
	status, _, out := e.raw(http.MethodPost, "/v1/repository-credentials", alice, "application/json",
		mustJSON(t, base(map[string]any{"repo_url": "https://git:hunter2@github.com/acme/infra"})))
	if status != 400 || bytes.Contains(out, []byte("hunter2")) || !bytes.Contains(out, []byte("repo_url must not contain a password or token")) ||
		!bytes.Contains(out, []byte(`"code":"secret_in_field"`)) {
		t.Fatalf("password in URL: %d %s", status, out)
	}
	// A token in a field that names or locates a credential: its own code,
	// the field in details, the value never echoed.
	for field, value := range map[string]string{
		"username":   "ghp_abcdefabcdefabcdefabcdefabcdef123456",
		"secret_ref": "https://x:hunter2@vault.example/v1/kv/git",
	} {
		status, _, out := e.raw(http.MethodPost, "/v1/repository-credentials", alice, "application/json", mustJSON(t, base(map[string]any{field: value})))
		var resp map[string]any
		_ = json.Unmarshal(out, &resp)
		if status != 400 || errorOf(resp)["code"] != "secret_in_field" || errorOf(resp)["field"] != field ||
			bytes.Contains(out, []byte("hunter2")) || bytes.Contains(out, []byte("abcdef")) {
			t.Fatalf("%s holding a secret: %d %s", field, status, out)
		}
	}
	var n int
	if err := e.db.GetContext(t.Context(), &n, `SELECT count(*) FROM repository_credentials`); err != nil || n != 0 {
		t.Fatalf("%d credentials written by refused requests (%v)", n, err)
	}

	status, cred := e.call(http.MethodPost, "/v1/repository-credentials", alice, base(map[string]any{"repo_url": "ssh://git@github.com/acme/infra.git"}))
	if status != http.StatusCreated || cred["repo_url"] != "ssh://git@github.com/acme/infra.git" || cred["username"] != "git" ||
		cred["secret_ref"] != "k8s://argocd/infra" || cred["normalized_url"] != "github.com/acme/infra" || cred["lock_id"] == "" {
		t.Fatalf("create: %d %v", status, cred)
	}
	id := cred["id"].(string)
	status, got := e.call(http.MethodPatch, "/v1/repository-credentials/"+id, alice, map[string]any{"secret_ref": "vault://infra"})
	if status != 200 || got["secret_ref"] != "vault://infra" {
		t.Fatalf("patch: %d %v", status, got)
	}
	status, list := e.call(http.MethodGet, "/v1/repository-credentials", alice, nil)
	if items, _ := list["items"].([]any); status != 200 || len(items) != 1 || list["next_page_token"] != "" {
		t.Fatalf("list: %d %v", status, list)
	}
	status, _ = e.call(http.MethodDelete, "/v1/repository-credentials/"+id, alice, nil)
	if status != http.StatusNoContent {
		t.Fatalf("delete: %d", status)
	}
}

func TestLocksAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	bob := e.tenant("bob")

	status, acq := e.call(http.MethodPost, "/v1/locks/acquire", alice, map[string]any{"repo_url": "git@github.com:acme/api.git"})
	if status != 200 || acq["acquired"] != true || acq["normalized_url"] != "github.com/acme/api" || acq["lock_id"] == "" || len(acq) != 3 {
		t.Fatalf("acquire: %d %v", status, acq)
	}
	lockID := acq["lock_id"].(string)
	status, again := e.call(http.MethodPost, "/v1/locks/acquire", alice, map[string]any{"repo_url": "https://github.com/acme/api"})
	if status != 200 || again["lock_id"] != lockID {
		t.Fatalf("acquire again: %d %v", status, again)
	}
	status, resp := e.call(http.MethodPost, "/v1/locks/acquire", bob, map[string]any{"repo_url": "https://github.com/ACME/api/"})
	expectError(t, "bob acquires", status, resp, 409, "repository_claimed", "a repository URL is already claimed by another user: alice")
	status, resp = e.call(http.MethodPost, "/v1/locks/acquire", bob, map[string]any{"repo_url": "ext::sh"})
	expectError(t, "helper syntax", status, resp, 400, "invalid_argument", "repo_url: invalid repository URL: remote-helper syntax (transport::address) is not allowed")

	for i, url := range []string{"https://github.com/acme/api", "github.com/acme/api.git"} {
		if status, resp := e.call(http.MethodPost, "/v1/applications", alice, map[string]any{"name": fmt.Sprintf("a%d", i), "repo_url": url}); status != 201 || resp["lock_id"] != lockID {
			t.Fatalf("app %d: %d %v", i, status, resp)
		}
	}
	if status, resp := e.call(http.MethodPost, "/v1/repository-credentials", alice, map[string]any{"name": "c", "repo_url": "https://github.com/acme/api", "secret_ref": "vault://api"}); status != 201 {
		t.Fatalf("credential: %d %v", status, resp)
	}
	status, l := e.call(http.MethodGet, "/v1/locks/"+lockID, alice, nil)
	if status != 200 || l["id"] != lockID || l["normalized_url"] != "github.com/acme/api" || l["applications"] != 2.0 || l["repository_credentials"] != 1.0 {
		t.Fatalf("get lock: %d %v", status, l)
	}
	status, list := e.call(http.MethodGet, "/v1/locks", alice, nil)
	items, _ := list["items"].([]any)
	if status != 200 || len(items) != 1 || items[0].(map[string]any)["id"] != lockID {
		t.Fatalf("list: %d %v", status, list)
	}
	status, resp = e.call(http.MethodGet, "/v1/locks/"+lockID, bob, nil)
	expectError(t, "bob gets alice's lock", status, resp, 404, "not_found", "lock "+lockID+" not found")
}

func TestPaginationAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")

	for i := 0; i < 5; i++ {
		e.call(http.MethodPost, "/v1/applications", alice, map[string]any{"name": fmt.Sprintf("a%d", i), "repo_url": fmt.Sprintf("https://github.com/p/r%d", i)})

		e.call(http.MethodPost, "/v1/repository-credentials", alice, map[string]any{"name": fmt.Sprintf("c%d", i), "repo_url": fmt.Sprintf("https://github.com/p/r%d", i), "secret_ref": "vault://p"})
	}
	for _, list := range []string{"/v1/applications", "/v1/repository-credentials", "/v1/locks"} {
		var got []string
		pages := 0
		for token := ""; ; {
			status, resp := e.call(http.MethodGet, list+"?page_size=2&page_token="+token, alice, nil)
			pages++
			if status != 200 {
				t.Fatalf("%s: %d %v", list, status, resp)
			}
			for _, it := range resp["items"].([]any) {
				got = append(got, it.(map[string]any)["normalized_url"].(string))
			}
			if token = resp["next_page_token"].(string); token == "" {
				break
			}
		}
		if len(got) != 5 || pages != 3 || got[0] != "github.com/p/r0" || got[4] != "github.com/p/r4" {
			t.Fatalf("%s: %v in %d pages, want 5 in 3", list, got, pages)
		}
	}
	for _, q := range []string{"?page_token=garbage", "?page_size=0", "?page_size=501", "?page_size=x"} {
		status, resp := e.call(http.MethodGet, "/v1/applications"+q, alice, nil)
		expectError(t, q, status, resp, 400, "invalid_argument", "")
	}
	_, first := e.call(http.MethodGet, "/v1/applications?page_size=1", alice, nil)
	status, resp := e.call(http.MethodGet, "/v1/locks?page_token="+first["next_page_token"].(string), alice, nil)
	expectError(t, "an applications token on /v1/locks", status, resp, 400, "invalid_argument", "page_token is not valid for this list")
}

// Every route refuses another tenant's ids with 404 and lists only the
// caller's rows; the admin token and missing tokens are refused.
func TestTenantIsolationAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	bob := e.tenant("bob")
	_, app := e.call(http.MethodPost, "/v1/applications", alice, map[string]any{"name": "a", "repo_url": "https://github.com/alice/a"})
	_, cred := e.call(http.MethodPost, "/v1/repository-credentials", alice, map[string]any{"name": "c", "repo_url": "https://github.com/alice/a", "secret_ref": "vault://a"})
	appPath := "/v1/applications/" + app["id"].(string)
	credPath := "/v1/repository-credentials/" + cred["id"].(string)
	lockPath := "/v1/locks/" + app["lock_id"].(string)
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, appPath, nil},
		{http.MethodPatch, appPath, map[string]any{"path": "x"}},
		{http.MethodDelete, appPath, nil},
		{http.MethodGet, credPath, nil},
		{http.MethodPatch, credPath, map[string]any{"username": "x"}},
		{http.MethodDelete, credPath, nil},
		{http.MethodGet, lockPath, nil},
		{http.MethodGet, "/v1/applications/not-a-uuid", nil},
	} {
		status, resp := e.call(tc.method, tc.path, bob, tc.body)
		expectError(t, "bob "+tc.method+" "+tc.path, status, resp, 404, "not_found", "")
	}
	for _, list := range []string{"/v1/applications", "/v1/repository-credentials", "/v1/locks"} {
		status, resp := e.call(http.MethodGet, list, bob, nil)
		if items := resp["items"].([]any); status != 200 || len(items) != 0 {
			t.Fatalf("bob lists %s: %v", list, resp)
		}
		status, resp = e.call(http.MethodGet, list, "", nil)
		expectError(t, "no token "+list, status, resp, 401, "unauthenticated", "")
		status, resp = e.call(http.MethodGet, list, adminToken, nil)
		expectError(t, "admin token "+list, status, resp, 403, "forbidden", "")
	}
	// Alice's rows are untouched.
	for _, p := range []string{appPath, credPath, lockPath} {
		if status, resp := e.call(http.MethodGet, p, alice, nil); status != 200 {
			t.Fatalf("alice %s: %d %v", p, status, resp)
		}
	}
}

func TestDeleteUserAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	bob := e.tenant("bob")
	e.call(http.MethodPost, "/v1/applications", alice, map[string]any{"name": "a", "repo_url": "https://github.com/alice/a"})
	e.call(http.MethodPost, "/v1/applications", alice, map[string]any{"name": "b", "repo_url": "https://github.com/alice/b"})
	e.call(http.MethodPost, "/v1/repository-credentials", alice, map[string]any{"name": "c", "repo_url": "https://github.com/alice/a", "secret_ref": "vault://a"})

	status, resp := e.call(http.MethodDelete, "/v1/admin/users/alice", bob, nil)
	expectError(t, "tenant token", status, resp, 403, "forbidden", "")
	status, resp = e.call(http.MethodDelete, "/v1/admin/users/alice", adminToken, nil)
	if status != 200 || resp["user"] != "alice" || resp["applications"] != 2.0 || resp["repository_credentials"] != 1.0 || resp["locks_released"] != 2.0 {
		t.Fatalf("delete: %d %v", status, resp)
	}
	status, resp = e.call(http.MethodGet, "/v1/applications", alice, nil)
	expectError(t, "deleted tenant's token", status, resp, 401, "unauthenticated", "")
	status, resp = e.call(http.MethodDelete, "/v1/admin/users/alice", adminToken, nil)
	expectError(t, "delete again", status, resp, 404, "not_found", `user "alice" not found`)
	if status, resp := e.call(http.MethodPost, "/v1/applications", bob, map[string]any{"name": "a", "repo_url": "https://github.com/alice/a"}); status != 201 {
		t.Fatalf("bob takes alice's repository: %d %v", status, resp)
	}
	var released int
	if err := e.db.GetContext(t.Context(), &released, `SELECT count(*) FROM repository_lock_events WHERE event = 'released' AND cluster_user_name = 'alice'`); err != nil || released != 2 {
		t.Fatalf("released events: %d %v", released, err)
	}
}

// Tenants race over HTTP for the same repositories: every request is a 201
// or a 409 repository_claimed naming the final owner.
func TestCreateRaceAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	const tenants, clients, repos = 4, 4, 20
	tokens := make([]string, tenants)
	for i := range tokens {
		tokens[i] = e.tenant(fmt.Sprintf("t%d", i))
	}
	type result struct {
		tenant, repo, owner int
		status              int
		code                string
	}
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	for ti := range tokens {
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(ti, c int) {
				defer wg.Done()
				for r := 0; r < repos; r++ {
					repo := (r + c*5 + ti*3) % repos
					url := []string{"https://github.com/race/r%d", "git@github.com:race/r%d.git", "ssh://git@GITHUB.com/race/r%d/"}[(c+r)%3]
					body := mustJSON(t, map[string]any{"name": fmt.Sprintf("c%d-r%d", c, r), "repo_url": fmt.Sprintf(url, repo)})
					status, _, out := e.raw(http.MethodPost, "/v1/applications", tokens[ti], "application/json", body)
					var resp map[string]any
					_ = json.Unmarshal(out, &resp)
					owner := -1
					if o, ok := errorOf(resp)["owner"].(string); ok {
						fmt.Sscanf(o, "t%d", &owner)
					}
					code, _ := errorOf(resp)["code"].(string)
					mu.Lock()
					results = append(results, result{ti, repo, owner, status, code})
					mu.Unlock()
				}
			}(ti, c)
		}
	}
	wg.Wait()
	owners := map[int]int{}
	for r := 0; r < repos; r++ {
		var name string
		if err := e.db.GetContext(t.Context(), &name, `SELECT u.name FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id WHERE o.git_repository_url = $1`, fmt.Sprintf("github.com/race/r%d", r)); err != nil {
			t.Fatalf("repo %d: %v", r, err)
		}
		var o int
		fmt.Sscanf(name, "t%d", &o)
		owners[r] = o
	}
	for _, r := range results {
		switch {
		case r.status == 201 && r.tenant == owners[r.repo]:
		case r.status == 409 && r.code == "repository_claimed" && r.owner == owners[r.repo] && r.tenant != owners[r.repo]:
		default:
			t.Errorf("tenant t%d on repo %d (owner t%d): %d %s owner t%d", r.tenant, r.repo, owners[r.repo], r.status, r.code, r.owner)
		}
	}
}
