package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
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
	ctx := t.Context()
	c := s.tenant(t, "sync-e2e")
	const host = "pds.e2e.example"
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	repo := func(name string) string {
		t.Helper()
		r, err := c.GetSyncRepository(ctx, name)
		must("GET "+name, err)
		return fmt.Sprintf("lir=%v frsr=%v fcsr=%v lfr=%v host_fcsr=%v needs=%v reason=%v",
			r.LastIndexedRev, r.FirstRevSinceReset, r.FirstCursorSinceReset, r.LastFirehoseRev,
			r.HostFirstCursorSinceReset, r.NeedsIndex, r.Reason)
	}
	expect := func(name, want string) {
		t.Helper()
		if got := repo(name); got != want {
			t.Fatalf("%s:\n got  %s\n want %s", name, got, want)
		}
	}
	needsIndex := func() int {
		t.Helper()
		page, err := c.ListSyncRepositoriesPage(ctx, client.SyncRepositoryListOptions{Host: host, NeedsIndex: true})
		must("needs index", err)
		return len(page.Items)
	}

	if _, created, err := c.PutSyncHost(ctx, host, nil); err != nil || !created {
		t.Fatalf("PUT host: created %v, %v", created, err)
	}
	h, err := c.GetSyncHost(ctx, host)
	must("GET host", err)
	before := h.FirstCursorSinceReset
	_, err = c.RecordSyncListing(ctx, host, client.SyncListingRequest{
		CursorBefore: before,
		Repos:        []client.ListedRepo{{Repo: "did:plc:idle", Rev: syncTID(1)}, {Repo: "did:plc:busy", Rev: syncTID(1)}},
	})
	must("listing", err)
	expect("did:plc:idle", fmt.Sprintf("lir= frsr=%s fcsr=0 lfr= host_fcsr=0 needs=true reason=never_indexed", syncTID(1)))
	for _, r := range []string{"did:plc:idle", "did:plc:busy"} {
		_, err := c.RecordSyncIndexed(ctx, r, client.SyncIndexedRequest{Host: host, Rev: syncTID(1), CursorBefore: before})
		must("indexed "+r, err)
	}
	ev, err := c.ApplySyncEvents(ctx, host, []client.SyncEvent{
		{Cursor: 1, Repo: "did:plc:busy", Rev: syncTID(2)},
		{Cursor: 2, Repo: "did:plc:busy", Rev: syncTID(3)},
	})
	if err != nil || ev.Applied != 2 {
		t.Fatalf("events %v %+v", err, ev)
	}
	expect("did:plc:busy", fmt.Sprintf("lir=%s frsr=%s fcsr=0 lfr=%s host_fcsr=0 needs=false reason=", syncTID(1), syncTID(1), syncTID(3)))
	if n := needsIndex(); n != 0 {
		t.Fatalf("%d repositories need an index in steady state", n)
	}

	// The host says our cursor is too old; the first event after that is 100.
	first := int64(100)
	_, err = c.ConnectSyncHost(ctx, host, client.ConnectRequest{OutdatedCursor: true, FirstCursor: &first})
	must("connect", err)
	expect("did:plc:idle", fmt.Sprintf("lir=%s frsr=%s fcsr=0 lfr= host_fcsr=100 needs=true reason=cursor_reset", syncTID(1), syncTID(1)))
	if n := needsIndex(); n != 2 {
		t.Fatalf("%d repositories need an index after the reset, want 2", n)
	}
	// Re-index: nothing new, but the flag clears.
	_, err = c.RecordSyncIndexed(ctx, "did:plc:idle", client.SyncIndexedRequest{Host: host, Rev: syncTID(1), CursorBefore: 100})
	must("re-index", err)
	expect("did:plc:idle", fmt.Sprintf("lir=%s frsr=%s fcsr=100 lfr= host_fcsr=100 needs=false reason=", syncTID(1), syncTID(1)))

	// too_big keeps last_firehose_rev where it was.
	_, err = c.RecordSyncIndexed(ctx, "did:plc:busy", client.SyncIndexedRequest{Host: host, Rev: syncTID(3), CursorBefore: 100})
	must("indexed busy", err)
	_, err = c.ApplySyncEvents(ctx, host, []client.SyncEvent{
		{Cursor: 100, Repo: "did:plc:busy", Rev: syncTID(4)},
		{Cursor: 101, Repo: "did:plc:busy", Rev: syncTID(5), TooBig: true},
	})
	must("events with too_big", err)
	expect("did:plc:busy", fmt.Sprintf("lir=%s frsr=%s fcsr=100 lfr=%s host_fcsr=100 needs=true reason=revision_gap", syncTID(3), syncTID(5), syncTID(4)))

	// A rev dated a day ahead is refused.
	_, err = c.ApplySyncEvents(ctx, host, []client.SyncEvent{
		{Cursor: 102, Repo: "did:plc:busy", Rev: syncTIDAt(time.Now().Add(24 * time.Hour))},
	})
	wantAPIError(t, "future rev", err, 400, client.CodeInvalidArgument, "")
}

func syncTIDAt(at time.Time) string {
	return syncTID(int(at.Sub(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) / time.Second))
}
