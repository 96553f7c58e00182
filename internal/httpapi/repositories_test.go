package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func items(resp map[string]any) []map[string]any {
	raw, _ := resp["items"].([]any)
	out := make([]map[string]any, len(raw))
	for i, v := range raw {
		out[i] = v.(map[string]any)
	}
	return out
}

func names(resp map[string]any, field string) []string {
	var out []string
	for _, it := range items(resp) {
		out = append(out, fmt.Sprint(it[field]))
	}
	return out
}

func TestRepositoriesAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice, bob := e.tenant("alice"), e.tenant("bob")

	r := e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice,
		map[string]any{"name": "data-lake", "storage_namespace": "s3://bucket/lake", "default_branch": "trunk"})
	uid, _ := r["instance_uid"].(string)
	if r["name"] != "data-lake" || r["storage_namespace"] != "s3://bucket/lake" || r["default_branch"] != "trunk" ||
		r["state"] != "active" || len(uid) != 32 || r["created_at"] == nil || len(r) != 6 {
		t.Fatalf("create response = %v", r)
	}
	if got := e.must(http.StatusOK, http.MethodGet, "/v1/repositories/data-lake", alice, nil); fmt.Sprint(got) != fmt.Sprint(r) {
		t.Fatalf("GET = %v, want %v", got, r)
	}
	e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "bare-one", "storage_namespace": "s3://b", "bare": true})

	// Errors.
	e.wantErr(409, "already_exists", http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "data-lake", "storage_namespace": "s3://x"})
	e.wantErr(400, "invalid_argument", http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "Data", "storage_namespace": "s3://x"})
	e.wantErr(400, "invalid_argument", http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "abc"})
	e.wantErr(400, "invalid_argument", http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "abc", "storage_namespace": "s3://x", "extra": 1})
	e.wantErr(400, "invalid_argument", http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "abc", "storage_namespace": "s3://x", "default_branch": "a..b"})
	e.wantErr(404, "not_found", http.MethodGet, "/v1/repositories/nope", alice, nil)
	e.wantErr(404, "not_found", http.MethodGet, "/v1/repositories/NOT_VALID", alice, nil)
	e.wantErr(401, "unauthenticated", http.MethodGet, "/v1/repositories", "", nil)
	e.wantErr(403, "forbidden", http.MethodGet, "/v1/repositories", adminToken, nil)

	// Tenant isolation: bob sees nothing of alice's and can use the name.
	e.wantErr(404, "not_found", http.MethodGet, "/v1/repositories/data-lake", bob, nil)
	e.wantErr(404, "not_found", http.MethodDelete, "/v1/repositories/data-lake", bob, nil)
	e.wantErr(404, "not_found", http.MethodGet, "/v1/repositories/data-lake/branches", bob, nil)
	if got := e.must(http.StatusOK, http.MethodGet, "/v1/repositories", bob, nil); len(items(got)) != 0 {
		t.Fatalf("bob's list = %v", got)
	}
	e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", bob, map[string]any{"name": "data-lake", "storage_namespace": "s3://bob"})

	// List with paging.
	page := e.must(http.StatusOK, http.MethodGet, "/v1/repositories?page_size=1", alice, nil)
	if fmt.Sprint(names(page, "name")) != "[bare-one]" || page["next_page_token"] == "" {
		t.Fatalf("page 1 = %v", page)
	}
	page = e.must(http.StatusOK, http.MethodGet, "/v1/repositories?page_size=1&page_token="+page["next_page_token"].(string), alice, nil)
	if fmt.Sprint(names(page, "name")) != "[data-lake]" || page["next_page_token"] != "" {
		t.Fatalf("page 2 = %v", page)
	}
	e.wantErr(400, "invalid_argument", http.MethodGet, "/v1/repositories?page_token=%21%21", alice, nil)
	e.wantErr(400, "invalid_argument", http.MethodGet, "/v1/repositories?page_size=0", alice, nil)

	// Branches, with a '/' in a name (percent-encoded in the path).
	base := "/v1/repositories/data-lake"
	trunk := e.must(http.StatusOK, http.MethodGet, base+"/branches/trunk", alice, nil)
	initial := trunk["commit_id"].(string)
	b := e.must(http.StatusCreated, http.MethodPost, base+"/branches", alice, map[string]any{"name": "feature/x", "source": "trunk"})
	if b["name"] != "feature/x" || b["commit_id"] != initial {
		t.Fatalf("create branch = %v", b)
	}
	e.must(http.StatusOK, http.MethodGet, base+"/branches/feature%2Fx", alice, nil)
	e.wantErr(409, "already_exists", http.MethodPost, base+"/branches", alice, map[string]any{"name": "feature/x", "source": "trunk"})
	e.wantErr(404, "not_found", http.MethodPost, base+"/branches", alice, map[string]any{"name": "y", "source": "nope"})
	e.wantErr(400, "invalid_argument", http.MethodPost, base+"/branches", alice, map[string]any{"name": "bad name", "source": "trunk"})
	e.wantErr(404, "not_found", http.MethodGet, base+"/branches/nope", alice, nil)
	if got := names(e.must(http.StatusOK, http.MethodGet, base+"/branches", alice, nil), "name"); fmt.Sprint(got) != "[feature/x trunk]" {
		t.Fatalf("branches = %v", got)
	}

	// Commits and the log.
	c1 := e.must(http.StatusCreated, http.MethodPost, base+"/branches/feature%2Fx/commits", alice,
		map[string]any{"message": "add data", "metadata": map[string]string{"k": "v"}, "meta_range_id": "mr1"})
	c1id := c1["id"].(string)
	if c1["committer"] != "alice" || c1["message"] != "add data" || c1["meta_range_id"] != "mr1" ||
		fmt.Sprint(c1["parents"]) != "["+initial+"]" || c1["generation"] != float64(2) || len(c1id) != 64 {
		t.Fatalf("commit = %v", c1)
	}
	c2 := e.must(http.StatusCreated, http.MethodPost, base+"/branches/feature%2Fx/commits", alice, map[string]any{"message": "more", "committer": "ci"})
	if c2["committer"] != "ci" || c2["meta_range_id"] != "mr1" {
		t.Fatalf("second commit = %v", c2)
	}
	e.wantErr(400, "invalid_argument", http.MethodPost, base+"/branches/trunk/commits", alice, map[string]any{"message": ""})
	e.wantErr(404, "not_found", http.MethodPost, base+"/branches/nope/commits", alice, map[string]any{"message": "m"})
	if got := e.must(http.StatusOK, http.MethodGet, base+"/commits/"+c1id, alice, nil); got["id"] != c1id {
		t.Fatalf("get commit = %v", got)
	}
	e.wantErr(404, "not_found", http.MethodGet, base+"/commits/"+strings.Repeat("0", 64), alice, nil)
	e.wantErr(404, "not_found", http.MethodGet, base+"/commits/xyz", alice, nil)
	log1 := e.must(http.StatusOK, http.MethodGet, base+"/branches/feature%2Fx/log?page_size=2", alice, nil)
	if fmt.Sprint(names(log1, "message")) != "[more add data]" || log1["next_page_token"] == "" {
		t.Fatalf("log page 1 = %v", log1)
	}
	log2 := e.must(http.StatusOK, http.MethodGet, base+"/branches/feature%2Fx/log?page_size=2&page_token="+log1["next_page_token"].(string), alice, nil)
	if fmt.Sprint(names(log2, "message")) != "[Repository created]" || log2["next_page_token"] != "" {
		t.Fatalf("log page 2 = %v", log2)
	}

	// Branch update with an expected commit.
	e.wantErr(412, "precondition_failed", http.MethodPut, base+"/branches/trunk", alice, map[string]any{"commit_id": c1id, "expected_commit_id": c1id})
	upd := e.must(http.StatusOK, http.MethodPut, base+"/branches/trunk", alice, map[string]any{"commit_id": c1id, "expected_commit_id": initial})
	if upd["commit_id"] != c1id {
		t.Fatalf("update = %v", upd)
	}
	e.wantErr(404, "not_found", http.MethodPut, base+"/branches/trunk", alice, map[string]any{"commit_id": strings.Repeat("a", 64)})
	e.wantErr(400, "invalid_argument", http.MethodPut, base+"/branches/trunk", alice, map[string]any{"commit_id": "zz"})

	// Tags.
	tag := e.must(http.StatusCreated, http.MethodPost, base+"/tags", alice, map[string]any{"name": "v1/rc", "commit_id": c1id})
	if tag["name"] != "v1/rc" || tag["commit_id"] != c1id {
		t.Fatalf("tag = %v", tag)
	}
	e.wantErr(409, "already_exists", http.MethodPost, base+"/tags", alice, map[string]any{"name": "v1/rc", "commit_id": initial})
	e.must(http.StatusOK, http.MethodGet, base+"/tags/v1%2Frc", alice, nil)
	if got := names(e.must(http.StatusOK, http.MethodGet, base+"/tags", alice, nil), "name"); fmt.Sprint(got) != "[v1/rc]" {
		t.Fatalf("tags = %v", got)
	}
	e.must(http.StatusNoContent, http.MethodDelete, base+"/tags/v1%2Frc", alice, nil)
	e.wantErr(404, "not_found", http.MethodGet, base+"/tags/v1%2Frc", alice, nil)
	e.wantErr(404, "not_found", http.MethodDelete, base+"/tags/v1%2Frc", alice, nil)

	// Branch delete.
	e.wantErr(400, "invalid_argument", http.MethodDelete, base+"/branches/trunk", alice, nil)
	e.must(http.StatusNoContent, http.MethodDelete, base+"/branches/feature%2Fx", alice, nil)
	e.wantErr(404, "not_found", http.MethodGet, base+"/branches/feature%2Fx", alice, nil)

	// Repository delete: 204, then 404; the name is reusable at once and
	// the new instance sees nothing of the old one.
	e.must(http.StatusNoContent, http.MethodDelete, base, alice, nil)
	e.wantErr(404, "not_found", http.MethodGet, base, alice, nil)
	e.wantErr(404, "not_found", http.MethodDelete, base, alice, nil)
	r2 := e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "data-lake", "storage_namespace": "s3://again"})
	if r2["instance_uid"] == uid || r2["default_branch"] != "main" {
		t.Fatalf("recreated = %v", r2)
	}
	e.wantErr(404, "not_found", http.MethodGet, base+"/commits/"+c1id, alice, nil)
	e.wantErr(404, "not_found", http.MethodGet, base+"/branches/trunk", alice, nil)
	// Bob's repository of the same name was never touched.
	e.must(http.StatusOK, http.MethodGet, base, bob, nil)
}

// TestRepositoryStatesAPI: a record in the deleting state answers 410 and
// is not listed; DELETE completes it. A stale initial record answers 404
// and is retired.
func TestRepositoryStatesAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	for _, n := range []string{"going", "stuck", "fine"} {
		e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice, map[string]any{"name": n, "storage_namespace": "s3://x"})
	}
	// Rewrite the records' state in place, as a crashed delete or create
	// would have left them.
	setState := func(name, state, createdAt string) {
		e.exec(`UPDATE kv SET value = convert_to(
				(convert_from(value, 'UTF8')::jsonb || jsonb_build_object('state', $2::text, 'created_at', $3::text))::text, 'UTF8')
			WHERE partition_key LIKE 'graveler/%' AND key = convert_to('repos/' || $1, 'UTF8')`, name, state, createdAt)
	}
	setState("going", "deleting", "2025-01-01T00:00:00Z")
	setState("stuck", "initial", "2000-01-01T00:00:00Z")

	e.wantErr(410, "repository_deleting", http.MethodGet, "/v1/repositories/going", alice, nil)
	e.wantErr(410, "repository_deleting", http.MethodGet, "/v1/repositories/going/branches", alice, nil)
	e.wantErr(409, "conflict", http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "going", "storage_namespace": "s3://x"})
	if got := names(e.must(http.StatusOK, http.MethodGet, "/v1/repositories", alice, nil), "name"); fmt.Sprint(got) != "[fine]" {
		t.Fatalf("list = %v", got)
	}
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/repositories/going", alice, nil)
	e.wantErr(404, "not_found", http.MethodGet, "/v1/repositories/going", alice, nil)

	e.wantErr(404, "not_found", http.MethodGet, "/v1/repositories/stuck", alice, nil)
	var left int
	if err := e.db.GetContext(t.Context(), &left, `SELECT count(*) FROM kv WHERE partition_key LIKE 'graveler/%' AND key = 'repos/stuck'`); err != nil || left != 0 {
		t.Fatalf("stale initial record left: %d, %v", left, err)
	}
	e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "stuck", "storage_namespace": "s3://x"})
}

// TestConcurrentCommitsAPI: 16 clients commit to one branch at once; every
// 201 is in the log exactly once and every other answer is 409 conflict.
func TestConcurrentCommitsAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", alice, map[string]any{"name": "hot", "storage_namespace": "s3://x"})
	const clients = 16
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		landed = map[string]bool{}
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprintf("client %d", i)
			st, resp := e.call(http.MethodPost, "/v1/repositories/hot/branches/main/commits", alice, map[string]any{"message": msg})
			switch st {
			case http.StatusCreated:
				mu.Lock()
				landed[msg] = true
				mu.Unlock()
			case http.StatusConflict:
				if errorOf(resp)["code"] != "conflict" {
					t.Errorf("409 body = %v", resp)
				}
			default:
				t.Errorf("%s: %d %v", msg, st, resp)
			}
		}()
	}
	wg.Wait()
	log := e.must(http.StatusOK, http.MethodGet, "/v1/repositories/hot/branches/main/log?page_size=500", alice, nil)
	msgs := names(log, "message")
	if len(msgs) != len(landed)+1 {
		t.Fatalf("log has %d commits, %d landed", len(msgs), len(landed))
	}
	for _, m := range msgs[:len(msgs)-1] {
		if !landed[m] {
			t.Fatalf("%q in the log twice or without a 201", m)
		}
		delete(landed, m)
	}
}
