package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/syncstate"
)

// syncRev is a TID rev i seconds after 2025-01-01.
func syncRev(i int) string {
	return syncstate.NewTID(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Second), 0)
}

// indicators picks the rule's fields of a repository response.
func indicators(r map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"repo", "host", "last_indexed_rev", "first_rev_since_reset", "first_cursor_since_reset",
		"last_firehose_rev", "host_first_cursor_since_reset", "needs_index", "reason"} {
		out[k] = r[k]
	}
	return out
}

func assertIndicators(t *testing.T, got map[string]any, want map[string]any) {
	t.Helper()
	g, _ := json.Marshal(indicators(got))
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("repository:\n got  %s\n want %s", g, w)
	}
}

func TestSyncAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	tok := e.tenant("sync-api")
	const host = "pds.example.com:2583"
	// A repository id with '/' and '%' in it travels percent-encoded.
	odd := "did:web:example.com%3A8080/x"
	oddPath := "/v1/sync/repos/" + url.PathEscape(odd)

	h := e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/"+host, tok, nil)
	if h["name"] != host || h["cursor"] != nil || h["first_cursor_since_reset"] != 0.0 || h["strict_cursor"] != false {
		t.Fatalf("created host %v", h)
	}
	h = e.must(http.StatusOK, http.MethodPut, "/v1/sync/hosts/"+host, tok, map[string]any{"strict_cursor": true})
	if h["strict_cursor"] != true {
		t.Fatalf("host after PUT %v", h)
	}
	e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/other.example", tok, map[string]any{})

	// Discovery.
	res := e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/listing", tok, map[string]any{
		"cursor_before": 0,
		"repos":         []map[string]any{{"repo": "did:plc:a", "rev": syncRev(10)}, {"repo": odd, "rev": syncRev(3)}},
	})
	if res["created"] != 2.0 || res["initialized"] != 0.0 || res["unchanged"] != 0.0 {
		t.Fatalf("listing %v", res)
	}
	// Index, then events.
	r := e.must(http.StatusOK, http.MethodPost, "/v1/sync/repos/did:plc:a/indexed", tok,
		map[string]any{"host": host, "rev": syncRev(10), "cursor_before": 0})
	assertIndicators(t, r, map[string]any{"repo": "did:plc:a", "host": host, "last_indexed_rev": syncRev(10),
		"first_rev_since_reset": syncRev(10), "first_cursor_since_reset": 0, "last_firehose_rev": "",
		"host_first_cursor_since_reset": 0, "needs_index": false, "reason": ""})
	ev := e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/events", tok, map[string]any{"events": []map[string]any{
		{"cursor": 1, "repo": "did:plc:a", "rev": syncRev(11)},
		{"cursor": 2, "repo": "did:plc:a", "rev": syncRev(11)},
		{"cursor": 3, "repo": "did:plc:b", "rev": syncRev(1), "too_big": true},
	}})
	if ev["applied"] != 2.0 || ev["ignored"] != 1.0 || ev["reset"] != false || ev["host"].(map[string]any)["cursor"] != 3.0 {
		t.Fatalf("events %v", ev)
	}
	assertIndicators(t, e.must(http.StatusOK, http.MethodGet, "/v1/sync/repos/did:plc:a", tok, nil), map[string]any{
		"repo": "did:plc:a", "host": host, "last_indexed_rev": syncRev(10), "first_rev_since_reset": syncRev(10),
		"first_cursor_since_reset": 0, "last_firehose_rev": syncRev(11), "host_first_cursor_since_reset": 0,
		"needs_index": false, "reason": ""})
	assertIndicators(t, e.must(http.StatusOK, http.MethodGet, oddPath, tok, nil), map[string]any{
		"repo": odd, "host": host, "last_indexed_rev": "", "first_rev_since_reset": syncRev(3),
		"first_cursor_since_reset": 0, "last_firehose_rev": "", "host_first_cursor_since_reset": 0,
		"needs_index": true, "reason": "never_indexed"})

	// A reset: the outdated-cursor notice, then the first event.
	c := e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/connect", tok, map[string]any{"outdated_cursor": true})
	if c["reset"] != false || c["host"].(map[string]any)["reset_pending"] != true {
		t.Fatalf("connect %v", c)
	}
	ev = e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/events", tok, map[string]any{"events": []map[string]any{
		{"cursor": 90, "repo": "did:plc:c", "rev": syncRev(1)},
	}})
	if ev["reset"] != true || ev["host"].(map[string]any)["first_cursor_since_reset"] != 90.0 {
		t.Fatalf("first event after the notice %v", ev)
	}
	assertIndicators(t, e.must(http.StatusOK, http.MethodGet, "/v1/sync/repos/did:plc:a", tok, nil), map[string]any{
		"repo": "did:plc:a", "host": host, "last_indexed_rev": syncRev(10), "first_rev_since_reset": syncRev(10),
		"first_cursor_since_reset": 0, "last_firehose_rev": syncRev(11), "host_first_cursor_since_reset": 90,
		"needs_index": true, "reason": "cursor_reset"})

	// The needs-index list, a page at a time.
	var got []string
	var reasons []string
	token := ""
	for range 10 {
		page := e.must(http.StatusOK, http.MethodGet, "/v1/sync/repos?needs_index=true&page_size=1&host="+url.QueryEscape(host)+"&page_token="+token, tok, nil)
		for _, it := range page["items"].([]any) {
			m := it.(map[string]any)
			got = append(got, m["repo"].(string))
			reasons = append(reasons, m["reason"].(string))
		}
		token = page["next_page_token"].(string)
		if token == "" {
			break
		}
	}
	if want := []string{"did:plc:b", "did:plc:c", odd, "did:plc:a"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("needs index %v, want %v", got, want)
	}
	if want := "never_indexed never_indexed never_indexed cursor_reset"; strings.Join(reasons, " ") != want {
		t.Fatalf("reasons %v", reasons)
	}
	// Re-index clears it.
	e.must(http.StatusOK, http.MethodPost, "/v1/sync/repos/did:plc:a/indexed", tok, map[string]any{"host": host, "rev": syncRev(11), "cursor_before": 90})
	all := e.must(http.StatusOK, http.MethodGet, "/v1/sync/repos?host="+url.QueryEscape(host), tok, nil)
	if n := len(all["items"].([]any)); n != 4 || all["next_page_token"] != "" {
		t.Fatalf("all repositories: %d items, next %q", n, all["next_page_token"])
	}
	if empty := e.must(http.StatusOK, http.MethodGet, "/v1/sync/repos?needs_index=true&host=other.example", tok, nil); empty["items"] == nil || len(empty["items"].([]any)) != 0 {
		t.Fatalf("an empty list must be [], got %v", empty)
	}
	hosts := e.must(http.StatusOK, http.MethodGet, "/v1/sync/hosts?page_size=1", tok, nil)
	if items := hosts["items"].([]any); len(items) != 1 || items[0].(map[string]any)["name"] != "other.example" || hosts["next_page_token"] == "" {
		t.Fatalf("hosts page %v", hosts)
	}
	got1 := e.must(http.StatusOK, http.MethodGet, "/v1/sync/hosts/"+host, tok, nil)
	if got1["cursor"] != 90.0 || got1["resets"] != 1.0 {
		t.Fatalf("host %v", got1)
	}
}

func TestSyncAPIErrors(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	tok := e.tenant("sync-errors")
	other := e.tenant("sync-other")
	const host = "pds.example"
	e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/"+host, tok, nil)
	e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/events", tok, map[string]any{"events": []map[string]any{
		{"cursor": 5, "repo": "did:plc:a", "rev": syncRev(1)},
	}})
	future := syncstate.NewTID(time.Now().Add(24*time.Hour), 0)
	events := "/v1/sync/hosts/" + host + "/events"

	for _, tc := range []struct {
		name        string
		method      string
		path        string
		token       string
		contentType string
		body        string
		status      int
		code        string
		message     string // a part of the message
	}{
		{"no token", http.MethodGet, "/v1/sync/hosts", "", "", "", 401, "unauthenticated", ""},
		{"admin token", http.MethodGet, "/v1/sync/hosts", adminToken, "", "", 403, "forbidden", ""},
		{"bad host name", http.MethodPut, "/v1/sync/hosts/Bad_Host", tok, "", "", 400, "invalid_argument", "host name"},
		{"unknown host", http.MethodPost, "/v1/sync/hosts/nope.example/events", tok, "application/json", `{"events":[{"cursor":1,"repo":"r","rev":"1"}]}`, 404, "not_found", "nope.example"},
		{"another tenant's host", http.MethodPost, events, other, "application/json", `{"events":[{"cursor":6,"repo":"r","rev":"1"}]}`, 404, "not_found", ""},
		{"another tenant's repository", http.MethodGet, "/v1/sync/repos/did:plc:a", other, "", "", 404, "not_found", ""},
		{"not JSON", http.MethodPost, events, tok, "text/plain", `{}`, 415, "unsupported_media_type", ""},
		{"bad JSON", http.MethodPost, events, tok, "application/json", `{"events":[`, 400, "invalid_argument", "not valid JSON"},
		{"unknown field", http.MethodPost, events, tok, "application/json", `{"events":[],"x":1}`, 400, "invalid_argument", "unknown field"},
		{"no events", http.MethodPost, events, tok, "application/json", `{"events":[]}`, 400, "invalid_argument", "at least one event"},
		{"missing cursor", http.MethodPost, events, tok, "application/json", `{"events":[{"repo":"r","rev":"1"}]}`, 400, "invalid_argument", "events[0]: cursor, repo and rev are required"},
		{"cursor as a string", http.MethodPost, events, tok, "application/json", `{"events":[{"cursor":"7","repo":"r","rev":"1"}]}`, 400, "invalid_argument", "cursor"},
		{"cursors not increasing", http.MethodPost, events, tok, "application/json", `{"events":[{"cursor":7,"repo":"r","rev":"1"},{"cursor":6,"repo":"s","rev":"1"}]}`, 400, "invalid_argument", "strictly increasing"},
		{"future TID", http.MethodPost, events, tok, "application/json", `{"events":[{"cursor":7,"repo":"r","rev":"` + future + `"}]}`, 400, "invalid_argument", "ahead of the server clock"},
		{"future TID indexed", http.MethodPost, "/v1/sync/repos/did:plc:a/indexed", tok, "application/json", `{"host":"pds.example","rev":"` + future + `","cursor_before":0}`, 400, "invalid_argument", "ahead of the server clock"},
		{"indexed without cursor_before", http.MethodPost, "/v1/sync/repos/did:plc:a/indexed", tok, "application/json", `{"host":"pds.example","rev":"1"}`, 400, "invalid_argument", "cursor_before is required"},
		{"indexed cursor_before ahead", http.MethodPost, "/v1/sync/repos/did:plc:a/indexed", tok, "application/json", `{"host":"pds.example","rev":"1","cursor_before":6}`, 400, "invalid_argument", "ahead of host"},
		{"listing without cursor_before", http.MethodPost, "/v1/sync/hosts/" + host + "/listing", tok, "application/json", `{"repos":[]}`, 400, "invalid_argument", "cursor_before is required"},
		{"listing without rev", http.MethodPost, "/v1/sync/hosts/" + host + "/listing", tok, "application/json", `{"cursor_before":0,"repos":[{"repo":"x"}]}`, 400, "invalid_argument", "repos[0]: rev is required"},
		{"negative first cursor", http.MethodPost, "/v1/sync/hosts/" + host + "/connect", tok, "application/json", `{"outdated_cursor":true,"first_cursor":-1}`, 400, "invalid_argument", "first_cursor"},
		{"needs index without host", http.MethodGet, "/v1/sync/repos?needs_index=true", tok, "", "", 400, "invalid_argument", "needs host"},
		{"needs index not a bool", http.MethodGet, "/v1/sync/repos?needs_index=maybe", tok, "", "", 400, "invalid_argument", "needs_index"},
		{"bad page token", http.MethodGet, "/v1/sync/repos?host=pds.example&needs_index=true&page_token=zz", tok, "", "", 400, "invalid_argument", "page_token"},
		{"page size", http.MethodGet, "/v1/sync/repos?page_size=0", tok, "", "", 400, "invalid_argument", "page_size"},
		{"unknown repository", http.MethodGet, "/v1/sync/repos/did:plc:nope", tok, "", "", 404, "not_found", "did:plc:nope"},
	} {
		status, resp := e.callRaw(tc.method, tc.path, tc.token, tc.contentType, []byte(tc.body))
		errObj := errorOf(resp)
		if status != tc.status || errObj["code"] != tc.code || !strings.Contains(errObj["message"].(string), tc.message) {
			t.Errorf("%s: %d %v; want %d %s containing %q", tc.name, status, resp, tc.status, tc.code, tc.message)
		}
	}
	// None of the rejected requests wrote anything.
	h := e.must(http.StatusOK, http.MethodGet, "/v1/sync/hosts/"+host, tok, nil)
	if h["cursor"] != 5.0 || h["first_cursor_since_reset"] != 0.0 || h["reset_pending"] != false {
		t.Fatalf("host after rejected requests %v", h)
	}
	page := e.must(http.StatusOK, http.MethodGet, "/v1/sync/repos", tok, nil)
	if items := page["items"].([]any); len(items) != 1 {
		t.Fatalf("repositories after rejected requests %v", items)
	}
}
