package httpapi_test

import (
	"net/http"
	"testing"
)

// TestTransfersAPI: denials, an admin transfer (refused while in use, then
// with references deleted) and a handover (offer, list, 409 while in use,
// accept), each exchange checked against the document, with bad input
// answered 4xx and other tenants' ids 404.
func TestTransfersAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("tr-alice")
	bob := e.tenant("tr-bob")
	carol := e.tenant("tr-carol")

	app := e.must(http.StatusCreated, http.MethodPost, "/v1/applications", alice,
		map[string]any{"name": "web", "repo_url": "https://github.com/acme/web.git"})
	lockID := app["lock_id"].(string)
	e.wantErr(http.StatusConflict, "repository_claimed", http.MethodPost, "/v1/locks/acquire", bob, map[string]any{"repo_url": "https://github.com/acme/web"})
	e.wantErr(http.StatusConflict, "repository_claimed", http.MethodPost, "/v1/locks/acquire", bob, map[string]any{"repo_url": "https://github.com/acme/web"})

	// Denials: the owner's, 404 to anyone else.
	ds := e.must(http.StatusOK, http.MethodGet, "/v1/locks/"+lockID+"/denials", alice, nil)
	items := ds["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["tenant"] != "tr-bob" || items[0].(map[string]any)["count"] != 2.0 {
		t.Fatalf("denials %v", ds)
	}
	e.wantErr(http.StatusNotFound, "not_found", http.MethodGet, "/v1/locks/"+lockID+"/denials", bob, nil)
	e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodGet, "/v1/locks/"+lockID+"/denials?page_token=junk", alice, nil)
	e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodGet, "/v1/locks/"+lockID+"/denials?page_size=0", alice, nil)
	// The operator's view: the same items; admin only.
	if ds := e.must(http.StatusOK, http.MethodGet, "/v1/admin/locks/"+lockID+"/denials?page_size=1", adminToken, nil); len(ds["items"].([]any)) != 1 || ds["next_page_token"] != "" {
		t.Fatalf("admin denials %v", ds)
	}
	e.wantErr(http.StatusForbidden, "forbidden", http.MethodGet, "/v1/admin/locks/"+lockID+"/denials", alice, nil)
	e.wantErr(http.StatusNotFound, "not_found", http.MethodGet, "/v1/admin/locks/00000000-0000-0000-0000-000000000000/denials", adminToken, nil)

	// Transfer: admin only; refused while alice uses it.
	e.wantErr(http.StatusForbidden, "forbidden", http.MethodPost, "/v1/admin/locks/"+lockID+"/transfer", alice, map[string]any{"to": "tr-bob"})
	status, resp := e.call(http.MethodPost, "/v1/admin/locks/"+lockID+"/transfer", adminToken, map[string]any{"to": "tr-bob"})
	if status != http.StatusConflict || errorOf(resp)["code"] != "lock_in_use" || len(errorOf(resp)["references"].([]any)) != 1 {
		t.Fatalf("refused transfer: %d %v", status, resp)
	}
	for _, bad := range []struct {
		body   map[string]any
		status int
	}{
		{map[string]any{"to": "tr-bob", "references": "keep"}, http.StatusBadRequest},
		{map[string]any{"to": "tr-bob", "extra": 1}, http.StatusBadRequest},
		{map[string]any{"to": "nobody"}, http.StatusNotFound},
		{map[string]any{"to": "tr-alice"}, http.StatusBadRequest},
	} {
		if st, body := e.call(http.MethodPost, "/v1/admin/locks/"+lockID+"/transfer", adminToken, bad.body); st != bad.status {
			t.Errorf("transfer %v: %d %v, want %d", bad.body, st, body, bad.status)
		}
	}
	e.wantErr(http.StatusNotFound, "not_found", http.MethodPost, "/v1/admin/locks/nope/transfer", adminToken, map[string]any{"to": "tr-bob"})
	tr := e.must(http.StatusOK, http.MethodPost, "/v1/admin/locks/"+lockID+"/transfer", adminToken, map[string]any{"to": "tr-bob", "references": "delete"})
	if tr["from"] != "tr-alice" || tr["to"] != "tr-bob" || len(tr["deleted_references"].([]any)) != 1 {
		t.Fatalf("transfer %v", tr)
	}
	e.wantErr(http.StatusNotFound, "not_found", http.MethodGet, "/v1/applications/"+app["id"].(string), alice, nil)
	if l := e.must(http.StatusOK, http.MethodGet, "/v1/locks/"+lockID, bob, nil); l["id"] != lockID {
		t.Fatalf("bob's lock %v", l)
	}

	// Handover from bob to carol.
	e.must(http.StatusCreated, http.MethodPost, "/v1/applications", bob,
		map[string]any{"name": "web", "repo_url": "https://github.com/acme/web"})
	e.wantErr(http.StatusNotFound, "not_found", http.MethodPost, "/v1/locks/"+lockID+"/handover", alice, map[string]any{"to": "tr-carol"})
	e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodPost, "/v1/locks/"+lockID+"/handover", bob, map[string]any{"to": "tr-carol", "expires_in": "soon"})
	h := e.must(http.StatusCreated, http.MethodPost, "/v1/locks/"+lockID+"/handover", bob, map[string]any{"to": "tr-carol", "expires_in": "1h"})
	hid := h["id"].(string)
	e.wantErr(http.StatusConflict, "handover_pending", http.MethodPost, "/v1/locks/"+lockID+"/handover", bob, map[string]any{"to": "tr-alice"})
	list := e.must(http.StatusOK, http.MethodGet, "/v1/handovers?direction=received", carol, nil)
	if r := list["items"].([]any); len(r) != 1 || r[0].(map[string]any)["id"] != hid || list["next_page_token"] != "" {
		t.Fatalf("carol's handovers %v", list)
	}
	if list := e.must(http.StatusOK, http.MethodGet, "/v1/handovers?direction=offered", carol, nil); len(list["items"].([]any)) != 0 {
		t.Fatalf("carol's offers %v", list)
	}
	if list := e.must(http.StatusOK, http.MethodGet, "/v1/handovers", bob, nil); len(list["items"].([]any)) != 1 {
		t.Fatalf("bob's handovers %v", list)
	}
	e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodGet, "/v1/handovers?direction=sideways", carol, nil)
	if list := e.must(http.StatusOK, http.MethodGet, "/v1/admin/handovers?page_size=1", adminToken, nil); len(list["items"].([]any)) != 1 {
		t.Fatalf("admin handovers %v", list)
	}
	e.wantErr(http.StatusForbidden, "forbidden", http.MethodGet, "/v1/admin/handovers", carol, nil)
	e.wantErr(http.StatusForbidden, "forbidden", http.MethodDelete, "/v1/admin/handovers/"+hid, bob, nil)
	e.wantErr(http.StatusNotFound, "not_found", http.MethodDelete, "/v1/admin/handovers/nope", adminToken, nil)
	e.wantErr(http.StatusNotFound, "not_found", http.MethodPost, "/v1/handovers/"+hid+"/accept", alice, nil)
	e.wantErr(http.StatusNotFound, "not_found", http.MethodDelete, "/v1/handovers/"+hid, carol, nil)
	e.wantErr(http.StatusConflict, "lock_in_use", http.MethodPost, "/v1/handovers/"+hid+"/accept", carol, nil)
	// Bob deletes his application: the lock stays (pinned), carol accepts.
	apps := e.must(http.StatusOK, http.MethodGet, "/v1/applications", bob, nil)["items"].([]any)
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/applications/"+apps[0].(map[string]any)["id"].(string), bob, nil)
	e.wantErr(http.StatusConflict, "repository_claimed", http.MethodPost, "/v1/locks/acquire", alice, map[string]any{"repo_url": "https://github.com/acme/web"})
	acc := e.must(http.StatusOK, http.MethodPost, "/v1/handovers/"+hid+"/accept", carol, nil)
	if acc["from"] != "tr-bob" || acc["to"] != "tr-carol" {
		t.Fatalf("accept %v", acc)
	}
	e.must(http.StatusOK, http.MethodGet, "/v1/locks/"+lockID, carol, nil)

	// Decline and withdraw.
	h2 := e.must(http.StatusCreated, http.MethodPost, "/v1/locks/"+lockID+"/handover", carol, map[string]any{"to": "tr-alice"})
	e.must(http.StatusNoContent, http.MethodPost, "/v1/handovers/"+h2["id"].(string)+"/decline", alice, nil)
	h3 := e.must(http.StatusCreated, http.MethodPost, "/v1/locks/"+lockID+"/handover", carol, map[string]any{"to": "tr-alice"})
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/handovers/"+h3["id"].(string), carol, nil)
	e.wantErr(http.StatusNotFound, "not_found", http.MethodDelete, "/v1/handovers/"+h3["id"].(string), carol, nil)
	// An operator withdraws an offer for carol.
	h4 := e.must(http.StatusCreated, http.MethodPost, "/v1/locks/"+lockID+"/handover", carol, map[string]any{"to": "tr-alice"})
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/admin/handovers/"+h4["id"].(string), adminToken, nil)
	e.wantErr(http.StatusNotFound, "not_found", http.MethodDelete, "/v1/admin/handovers/"+h4["id"].(string), adminToken, nil)
	if list := e.must(http.StatusOK, http.MethodGet, "/v1/handovers?direction=offered", carol, nil); len(list["items"].([]any)) != 0 {
		t.Fatalf("offers left %v", list)
	}
}
