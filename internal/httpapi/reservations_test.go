package httpapi_test

import (
	"net/http"
	"testing"
)

// TestReservationsAPI: the admin routes of reservations and the claims they
// refuse, every exchange validated against the document.
func TestReservationsAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	acme, eve := e.tenant("acme"), e.tenant("eve")

	e.must(http.StatusOK, http.MethodPost, "/v1/locks/acquire", eve, map[string]any{"repo_url": "https://github.com/acme/old"})

	// Dry run lists eve's lock; the plain add is refused listing it.
	dry := e.must(http.StatusOK, http.MethodPost, "/v1/admin/reservations?dry_run=true", adminToken, map[string]any{"prefix": "https://GitHub.com/Acme", "tenant": "acme"})
	if dry["prefix"] != "github.com/acme" || len(dry["locks"].([]any)) != 1 {
		t.Fatalf("dry run: %v", dry)
	}
	status, resp := e.call(http.MethodPost, "/v1/admin/reservations", adminToken, map[string]any{"prefix": "github.com/acme", "tenant": "acme"})
	errObj := errorOf(resp)
	if status != http.StatusConflict || errObj["code"] != "reservation_conflict" || errObj["total"] != float64(1) {
		t.Fatalf("conflict: %d %v", status, resp)
	}
	if l := errObj["locks"].([]any)[0].(map[string]any); l["normalized_url"] != "github.com/acme/old" || l["tenant"] != "eve" {
		t.Fatalf("conflict lists %v", l)
	}
	e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodPost, "/v1/admin/reservations", adminToken, map[string]any{"prefix": "github.com/acme", "tenant": "acme", "existing": "drop"})
	e.wantErr(http.StatusNotFound, "not_found", http.MethodPost, "/v1/admin/reservations", adminToken, map[string]any{"prefix": "github.com/acme", "tenant": "nobody"})
	e.wantErr(http.StatusForbidden, "forbidden", http.MethodPost, "/v1/admin/reservations", acme, map[string]any{"prefix": "github.com/acme", "tenant": "acme"})

	created := e.must(http.StatusCreated, http.MethodPost, "/v1/admin/reservations", adminToken, map[string]any{"prefix": "github.com/acme", "tenant": "acme", "existing": "keep"})
	r := created["reservation"].(map[string]any)
	if r["prefix"] != "github.com/acme" || r["tenant"] != "acme" || len(created["grandfathered"].([]any)) != 1 {
		t.Fatalf("created: %v", created)
	}
	e.wantErr(http.StatusConflict, "already_exists", http.MethodPost, "/v1/admin/reservations", adminToken, map[string]any{"prefix": "github.com/acme", "tenant": "eve", "existing": "keep"})

	// Claims: eve is refused under the prefix (bare acquire and an
	// Application), keeps her grandfathered lock; acme claims.
	status, resp = e.call(http.MethodPost, "/v1/locks/acquire", eve, map[string]any{"repo_url": "https://github.com/acme/new"})
	errObj = errorOf(resp)
	if status != http.StatusConflict || errObj["code"] != "repository_reserved" || errObj["tenant"] != "acme" || errObj["prefix"] != "github.com/acme" {
		t.Fatalf("eve's claim: %d %v", status, resp)
	}
	e.wantErr(http.StatusConflict, "repository_reserved", http.MethodPost, "/v1/applications", eve, map[string]any{"name": "x", "repo_url": "https://github.com/acme/app"})
	e.must(http.StatusOK, http.MethodPost, "/v1/locks/acquire", eve, map[string]any{"repo_url": "https://github.com/acme/old"})
	e.must(http.StatusCreated, http.MethodPost, "/v1/applications", acme, map[string]any{"name": "x", "repo_url": "https://github.com/acme/app"})

	// List (paginated) and delete.
	e.must(http.StatusCreated, http.MethodPost, "/v1/admin/reservations", adminToken, map[string]any{"prefix": "gitlab.com", "tenant": "eve"})
	page := e.must(http.StatusOK, http.MethodGet, "/v1/admin/reservations?page_size=1", adminToken, nil)
	if len(page["items"].([]any)) != 1 || page["next_page_token"] == "" {
		t.Fatalf("page 1: %v", page)
	}
	page2 := e.must(http.StatusOK, http.MethodGet, "/v1/admin/reservations?page_size=1&page_token="+page["next_page_token"].(string), adminToken, nil)
	if items := page2["items"].([]any); len(items) != 1 || items[0].(map[string]any)["prefix"] != "gitlab.com" || page2["next_page_token"] != "" {
		t.Fatalf("page 2: %v", page2)
	}
	e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodGet, "/v1/admin/reservations?page_token=bogus", adminToken, nil)
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/admin/reservations/"+r["id"].(string), adminToken, nil)
	e.wantErr(http.StatusNotFound, "not_found", http.MethodDelete, "/v1/admin/reservations/"+r["id"].(string), adminToken, nil)
	e.must(http.StatusOK, http.MethodPost, "/v1/locks/acquire", eve, map[string]any{"repo_url": "https://github.com/acme/new"})
}
