package httpapi_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/pagetoken"
)

// Every paginated route answers a corrupt token, and a token of another
// list or another tenant, with 400 invalid_argument (regression: the
// name-keyed lists took "W1tbW1tb", base64 of "[[[[[[", as a name and
// answered 200).
func TestCorruptPageTokens(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice, bob := e.tenant("alice"), e.tenant("bob")
	for _, tok := range []string{alice, bob} {
		e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", tok, map[string]any{"name": "lake", "storage_namespace": "s3://b/lake"})
		e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", tok, map[string]any{"name": "pond", "storage_namespace": "s3://b/pond"})
		e.must(http.StatusCreated, http.MethodPost, "/v1/repositories/lake/branches", tok, map[string]any{"name": "dev", "source": "main"})
		main := e.must(http.StatusOK, http.MethodGet, "/v1/repositories/lake/branches/main", tok, nil)
		e.must(http.StatusCreated, http.MethodPost, "/v1/repositories/lake/tags", tok, map[string]any{"name": "v1", "commit_id": main["commit_id"]})
		e.must(http.StatusCreated, http.MethodPost, "/v1/repositories/lake/tags", tok, map[string]any{"name": "v2", "commit_id": main["commit_id"]})
		e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/pds.example", tok, nil)
		e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/pds2.example", tok, nil)
	}
	lists := []string{
		"/v1/locks",
		"/v1/applications",
		"/v1/repository-credentials",
		"/v1/repositories",
		"/v1/repositories/lake/branches",
		"/v1/repositories/lake/tags",
		"/v1/repositories/lake/branches/main/log",
		"/v1/sync/hosts",
		"/v1/sync/repos",
		"/v1/sync/repos?host=pds.example&needs_index=true",
	}
	// Tokens of real pages, to be replayed elsewhere.
	bobTokens := map[string]string{}
	for _, list := range []string{"/v1/repositories", "/v1/repositories/lake/branches", "/v1/repositories/lake/tags", "/v1/sync/hosts"} {
		page := e.must(http.StatusOK, http.MethodGet, withQuery(list, "page_size=1"), bob, nil)
		tok, _ := page["next_page_token"].(string)
		if tok == "" {
			t.Fatalf("%s: no next page for bob", list)
		}
		bobTokens[list] = tok
	}
	for _, list := range lists {
		for name, tok := range map[string]string{
			"corrupt":           "W1tbW1tb",
			"not base64":        "!!!",
			"another list's":    bobTokens["/v1/sync/hosts"],
			"another tenant's":  bobTokens["/v1/repositories"],
			"another tenant's2": bobTokens["/v1/repositories/lake/tags"],
		} {
			if list == "/v1/sync/hosts" && name == "another list's" {
				continue // that token is bob's sync/hosts token: covered by "another tenant's"
			}
			e.on(t).wantErr(http.StatusBadRequest, "invalid_argument", http.MethodGet, withQuery(list, "page_token="+url.QueryEscape(tok)), alice, nil)
		}
	}
	// Bob's own tokens still work for bob.
	for list, tok := range bobTokens {
		e.must(http.StatusOK, http.MethodGet, withQuery(list, "page_token="+url.QueryEscape(tok)), bob, nil)
	}
}

// A (created_at, id) token whose timestamp carries an offset Postgres does
// not take (-23:59) is normalized to UTC before it reaches SQL (regression:
// /v1/locks, /v1/applications and /v1/repository-credentials answered 500).
func TestPageTokenTimestampOffsets(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	aliceID, alice := e.newTenant("alice")
	e.must(http.StatusCreated, http.MethodPost, "/v1/applications", alice, map[string]any{"name": "web", "repo_url": "https://github.com/acme/web"})
	e.must(http.StatusCreated, http.MethodPost, "/v1/repository-credentials", alice,
		map[string]any{"name": "c", "repo_url": "https://github.com/acme/infra", "username": "git", "secret_ref": "k8s://argocd/infra"})
	e.must(http.StatusOK, http.MethodPost, "/v1/locks/acquire", alice, map[string]any{"repo_url": "https://github.com/acme/bare"})

	westOfEverything := time.FixedZone("", -(23*3600 + 59*60))
	before := time.Date(2000, 1, 1, 0, 0, 0, 0, westOfEverything)
	for _, tc := range []struct {
		path, kind string
		want       int
	}{
		{"/v1/locks", pagetoken.KindLocks, 3},
		{"/v1/applications", pagetoken.KindApplications, 1},
		{"/v1/repository-credentials", pagetoken.KindRepositoryCredentials, 1},
	} {
		tok := pagetoken.Encode(tc.kind, aliceID, pagetoken.TimeID{CreatedAt: before, ID: "00000000-0000-0000-0000-000000000000"})
		page := e.must(http.StatusOK, http.MethodGet, tc.path+"?page_token="+url.QueryEscape(tok), alice, nil)
		if items, _ := page["items"].([]any); len(items) != tc.want {
			t.Errorf("%s: %d items, want %d", tc.path, len(items), tc.want)
		}
		// Out of range once in UTC: refused, not a 500.
		far := pagetoken.Encode(tc.kind, aliceID, pagetoken.TimeID{CreatedAt: time.Date(9999, 12, 31, 23, 0, 0, 0, westOfEverything), ID: "00000000-0000-0000-0000-000000000000"})
		e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodGet, tc.path+"?page_token="+url.QueryEscape(far), alice, nil)
	}
}

func withQuery(path, q string) string {
	u, err := url.Parse(path)
	if err != nil {
		panic(err)
	}
	if u.RawQuery != "" {
		return path + "&" + q
	}
	return path + "?" + q
}
