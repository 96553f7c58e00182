package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"
)

// TestLeasesAPI: acquire, held, keepalive, list, release, with bad input
// answered 400 and another tenant's lease 404; every exchange is checked
// against the document.
func TestLeasesAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("lease-alice")
	bob := e.tenant("lease-bob")

	l := e.must(http.StatusCreated, http.MethodPost, "/v1/leases", alice, map[string]any{"key": "indexer/github.com", "ttl": "15s", "holder": "host-1"})
	if l["fencing_token"] != 1.0 || l["key"] != "indexer/github.com" || l["ttl"] != "15s" || l["holder"] != "host-1" {
		t.Fatalf("lease %v", l)
	}
	id := l["lease_id"].(string)
	e.wantErr(http.StatusConflict, "lease_held", http.MethodPost, "/v1/leases", alice, map[string]any{"key": "indexer/github.com", "ttl": "15s", "wait": "100ms"})
	k := e.must(http.StatusOK, http.MethodPost, "/v1/leases/"+id+"/keepalive", alice, nil)
	if k["lease_id"] != id || k["fencing_token"] != 1.0 {
		t.Fatalf("keepalive %v", k)
	}
	e.must(http.StatusCreated, http.MethodPost, "/v1/leases", alice, map[string]any{"key": "other", "ttl": "1m"})
	list := e.must(http.StatusOK, http.MethodGet, "/v1/leases?key_prefix=indexer/", alice, nil)
	if items := list["items"].([]any); len(items) != 1 || items[0].(map[string]any)["lease_id"] != id {
		t.Fatalf("list %v", list)
	}
	// Another tenant sees none of it.
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/v1/leases/" + id + "/keepalive"},
		{http.MethodDelete, "/v1/leases/" + id},
	} {
		if status, body := e.call(c.method, c.path, bob, nil); status != http.StatusNotFound {
			t.Fatalf("bob %s %s: %d %v", c.method, c.path, status, body)
		}
	}
	if list := e.must(http.StatusOK, http.MethodGet, "/v1/leases", bob, nil); len(list["items"].([]any)) != 0 {
		t.Fatalf("bob's list %v", list)
	}
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/leases/"+id, alice, nil)
	if status, _ := e.call(http.MethodPost, "/v1/leases/"+id+"/keepalive", alice, nil); status != http.StatusNotFound {
		t.Fatalf("keepalive after release: %d", status)
	}
	l2 := e.must(http.StatusCreated, http.MethodPost, "/v1/leases", alice, map[string]any{"key": "indexer/github.com", "ttl": "15s"})
	if l2["fencing_token"] != 2.0 {
		t.Fatalf("second lease %v", l2)
	}

	for _, bad := range []map[string]any{
		{"key": "k"},
		{"key": "k", "ttl": "15"},
		{"key": "k", "ttl": "1ms"},
		{"key": "", "ttl": "15s"},
		{"key": "k", "ttl": "15s", "wait": "1h"},
		{"key": "k", "ttl": "15s", "wait": "-1s"},
		{"key": "k", "ttl": "15s", "extra": true},
	} {
		if status, body := e.call(http.MethodPost, "/v1/leases", alice, bad); status != http.StatusBadRequest {
			t.Errorf("%v: %d %v, want 400", bad, status, body)
		}
	}
	if status, _ := e.call(http.MethodGet, "/v1/leases?page_size=0", alice, nil); status != http.StatusBadRequest {
		t.Errorf("page_size=0: %d", status)
	}
}

// TestFencedWritesAPI: every guarded write route takes the token from the
// header or the body, admits the current one, refuses a stale one with
// 409 fenced (after a newer lease was granted, before its holder wrote)
// and bad tokens with 400.
func TestFencedWritesAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("fence-alice")
	lease := func(key string) (string, int64) {
		l := e.must(http.StatusCreated, http.MethodPost, "/v1/leases", alice, map[string]any{"key": key, "ttl": "1m"})
		return l["lease_id"].(string), int64(l["fencing_token"].(float64))
	}
	// sendTok sends body with the token in the header (0: none).
	sendTok := func(method, path string, tok int64, body any) (int, map[string]any) {
		t.Helper()
		hdr := http.Header{"Content-Type": {"application/json"}}
		if tok != 0 {
			hdr.Set("Repolock-Fencing-Token", strconv.FormatInt(tok, 10))
		}
		var b []byte
		if body != nil {
			b = mustJSON(t, body)
		} else {
			hdr.Del("Content-Type")
		}
		status, _, out := e.send(method, path, alice, hdr, b)
		return status, e.object(method, path, status, out)
	}
	e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "fenced-repo", "storage_namespace": "s3://b/r"})
	main := e.must(http.StatusOK, http.MethodGet, "/v1/repositories/fenced-repo/branches/main", alice, nil)

	// Branch: commit with the body's token, update with the header's.
	id1, tok1 := lease("repositories/fenced-repo/branches/main")
	c1 := e.must(http.StatusCreated, http.MethodPost, "/v1/repositories/fenced-repo/branches/main/commits", alice, map[string]any{"message": "one", "fencing_token": tok1})
	if status, body := sendTok(http.MethodPut, "/v1/repositories/fenced-repo/branches/main", tok1, map[string]any{"commit_id": main["commit_id"]}); status != http.StatusOK {
		t.Fatalf("update with the current token: %d %v", status, body)
	}
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/leases/"+id1, alice, nil)
	_, tok2 := lease("repositories/fenced-repo/branches/main")
	for _, c := range []struct {
		method, path string
		body         map[string]any
	}{
		{http.MethodPut, "/v1/repositories/fenced-repo/branches/main", map[string]any{"commit_id": c1["id"]}},
		{http.MethodPost, "/v1/repositories/fenced-repo/branches/main/commits", map[string]any{"message": "late"}},
	} {
		status, body := sendTok(c.method, c.path, tok1, c.body)
		if status != http.StatusConflict || errorOf(body)["code"] != "fenced" {
			t.Fatalf("%s %s with the stale token: %d %v, want 409 fenced", c.method, c.path, status, body)
		}
	}
	if b := e.must(http.StatusOK, http.MethodGet, "/v1/repositories/fenced-repo/branches/main", alice, nil); b["commit_id"] != main["commit_id"] {
		t.Fatalf("a refused write moved the branch: %v", b)
	}
	if status, body := sendTok(http.MethodPut, "/v1/repositories/fenced-repo/branches/main", tok2, map[string]any{"commit_id": c1["id"], "fencing_token": tok1}); status != http.StatusBadRequest {
		t.Fatalf("header and body disagree: %d %v", status, body)
	}
	e.must(http.StatusOK, http.MethodPut, "/v1/repositories/fenced-repo/branches/main", alice, map[string]any{"commit_id": c1["id"], "fencing_token": tok2})

	// Tags.
	_, tt1 := lease("repositories/fenced-repo/tags")
	e.must(http.StatusCreated, http.MethodPost, "/v1/repositories/fenced-repo/tags", alice, map[string]any{"name": "v1", "commit_id": c1["id"], "fencing_token": tt1})
	if status, body := sendTok(http.MethodDelete, "/v1/repositories/fenced-repo/tags/v1", tt1+1, nil); status != http.StatusBadRequest {
		t.Fatalf("tag delete with a token never issued: %d %v", status, body)
	}
	if status, body := sendTok(http.MethodDelete, "/v1/repositories/fenced-repo/tags/v1", tt1, nil); status != http.StatusNoContent {
		t.Fatalf("tag delete: %d %v", status, body)
	}

	// Sync host cursors.
	e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/h.example", alice, nil)
	hid, ht1 := lease("sync/hosts/h.example")
	ev := func(cursor int) map[string]any {
		return map[string]any{"events": []map[string]any{{"cursor": cursor, "repo": "did:plc:a", "rev": syncRev(cursor)}}}
	}
	if status, body := sendTok(http.MethodPost, "/v1/sync/hosts/h.example/events", ht1, ev(1)); status != http.StatusOK {
		t.Fatalf("events: %d %v", status, body)
	}
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/leases/"+hid, alice, nil)
	_, ht2 := lease("sync/hosts/h.example")
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/sync/hosts/h.example/events", ev(2)},
		{"/v1/sync/hosts/h.example/connect", map[string]any{}},
	} {
		if status, body := sendTok(http.MethodPost, c.path, ht1, c.body); status != http.StatusConflict || errorOf(body)["code"] != "fenced" {
			t.Fatalf("%s with the stale token: %d %v", c.path, status, body)
		}
	}
	if h := e.must(http.StatusOK, http.MethodGet, "/v1/sync/hosts/h.example", alice, nil); h["cursor"] != 1.0 {
		t.Fatalf("a refused batch moved the cursor: %v", h)
	}
	body := ev(2)
	body["fencing_token"] = ht2
	e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/h.example/events", alice, body)
	e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/h.example/connect", alice, map[string]any{"fencing_token": ht2})
	for _, bad := range []string{"0", "-1", "x", "99999999999999999999"} {
		hdr := http.Header{"Content-Type": {"application/json"}, "Repolock-Fencing-Token": {bad}}
		if status, _, _ := e.send(http.MethodPost, "/v1/sync/hosts/h.example/connect", alice, hdr, []byte(`{}`)); status != http.StatusBadRequest {
			t.Errorf("token %q: %d, want 400", bad, status)
		}
	}
}
