package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// syncTID is a TID rev i seconds after 2025-01-01 (base32-sortable, as
// hosts generate them).
func syncTID(i int) string {
	const alphabet = "234567abcdefghijklmnopqrstuvwxyz"
	v := uint64(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Second).UnixMicro()) << 10
	b := make([]byte, 13)
	for j := 12; j >= 0; j-- {
		b[j] = alphabet[v&31]
		v >>= 5
	}
	return string(b)
}

// TestSyncLifecycle drives the sync routes of the real binary through the
// design's main path: discovery, index, steady state, an outdated-cursor
// reset that flags an idle repository, its re-index, and a too_big event.
func TestSyncLifecycle(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	tok := s.createTenant(t, "sync-e2e")
	const host = "pds.e2e.example"
	call := func(want int, method, path string, body any) map[string]any {
		t.Helper()
		status, resp := s.do(t, method, path, tok, body)
		if status != want {
			t.Fatalf("%s %s: %d, want %d: %v", method, path, status, want, resp)
		}
		return resp
	}
	repo := func(name string) string {
		r := call(http.StatusOK, http.MethodGet, "/v1/sync/repos/"+name, nil)
		return fmt.Sprintf("lir=%v frsr=%v fcsr=%v lfr=%v host_fcsr=%v needs=%v reason=%v",
			r["last_indexed_rev"], r["first_rev_since_reset"], r["first_cursor_since_reset"], r["last_firehose_rev"],
			r["host_first_cursor_since_reset"], r["needs_index"], r["reason"])
	}
	expect := func(name, want string) {
		t.Helper()
		if got := repo(name); got != want {
			t.Fatalf("%s:\n got  %s\n want %s", name, got, want)
		}
	}

	call(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/"+host, nil)
	h := call(http.StatusOK, http.MethodGet, "/v1/sync/hosts/"+host, nil)
	before := h["first_cursor_since_reset"]
	call(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/listing", map[string]any{
		"cursor_before": before,
		"repos":         []map[string]any{{"repo": "did:plc:idle", "rev": syncTID(1)}, {"repo": "did:plc:busy", "rev": syncTID(1)}},
	})
	expect("did:plc:idle", fmt.Sprintf("lir= frsr=%s fcsr=0 lfr= host_fcsr=0 needs=true reason=never_indexed", syncTID(1)))
	for _, r := range []string{"did:plc:idle", "did:plc:busy"} {
		call(http.StatusOK, http.MethodPost, "/v1/sync/repos/"+r+"/indexed", map[string]any{"host": host, "rev": syncTID(1), "cursor_before": before})
	}
	ev := call(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/events", map[string]any{"events": []map[string]any{
		{"cursor": 1, "repo": "did:plc:busy", "rev": syncTID(2)},
		{"cursor": 2, "repo": "did:plc:busy", "rev": syncTID(3)},
	}})
	if ev["applied"] != 2.0 {
		t.Fatalf("events %v", ev)
	}
	expect("did:plc:busy", fmt.Sprintf("lir=%s frsr=%s fcsr=0 lfr=%s host_fcsr=0 needs=false reason=", syncTID(1), syncTID(1), syncTID(3)))
	page := call(http.StatusOK, http.MethodGet, "/v1/sync/repos?needs_index=true&host="+host, nil)
	if items := page["items"].([]any); len(items) != 0 {
		t.Fatalf("needs index in steady state: %v", items)
	}

	// The host says our cursor is too old; the first event after that is 100.
	call(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/connect", map[string]any{"outdated_cursor": true, "first_cursor": 100})
	expect("did:plc:idle", fmt.Sprintf("lir=%s frsr=%s fcsr=0 lfr= host_fcsr=100 needs=true reason=cursor_reset", syncTID(1), syncTID(1)))
	page = call(http.StatusOK, http.MethodGet, "/v1/sync/repos?needs_index=true&host="+host, nil)
	if items := page["items"].([]any); len(items) != 2 {
		t.Fatalf("needs index after the reset: %v", items)
	}
	// Re-index: nothing new, but the flag clears.
	call(http.StatusOK, http.MethodPost, "/v1/sync/repos/did:plc:idle/indexed", map[string]any{"host": host, "rev": syncTID(1), "cursor_before": 100})
	expect("did:plc:idle", fmt.Sprintf("lir=%s frsr=%s fcsr=100 lfr= host_fcsr=100 needs=false reason=", syncTID(1), syncTID(1)))

	// too_big keeps last_firehose_rev where it was.
	call(http.StatusOK, http.MethodPost, "/v1/sync/repos/did:plc:busy/indexed", map[string]any{"host": host, "rev": syncTID(3), "cursor_before": 100})
	call(http.StatusOK, http.MethodPost, "/v1/sync/hosts/"+host+"/events", map[string]any{"events": []map[string]any{
		{"cursor": 100, "repo": "did:plc:busy", "rev": syncTID(4)},
		{"cursor": 101, "repo": "did:plc:busy", "rev": syncTID(5), "too_big": true},
	}})
	expect("did:plc:busy", fmt.Sprintf("lir=%s frsr=%s fcsr=100 lfr=%s host_fcsr=100 needs=true reason=revision_gap", syncTID(3), syncTID(5), syncTID(4)))

	// A rev dated a day ahead is refused.
	future := call(http.StatusBadRequest, http.MethodPost, "/v1/sync/hosts/"+host+"/events", map[string]any{"events": []map[string]any{
		{"cursor": 102, "repo": "did:plc:busy", "rev": syncTIDAt(time.Now().Add(24 * time.Hour))},
	}})
	if future["error"].(map[string]any)["code"] != "invalid_argument" {
		t.Fatalf("future rev: %v", future)
	}
}

func syncTIDAt(at time.Time) string {
	return syncTID(int(at.Sub(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) / time.Second))
}
