package syncstate

import (
	"context"
	"slices"
	"testing"
)

// The design's cases. Each step asserts every indicator, not only
// needs_index.

const pds = "pds.example.com"

func TestDiscoveryThenIndex(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.putHost(t, pds)
	f.events(t, pds, Event{Cursor: 1, Repo: "did:other", Rev: rev(1)}, Event{Cursor: 2, Repo: "did:other", Rev: rev(2)})
	hostBefore := f.host(t, pds)
	if *hostBefore.Cursor != 2 || hostBefore.FirstCursorSinceReset != 0 {
		t.Fatalf("host before listing: cursor %v, fcsr %d", *hostBefore.Cursor, hostBefore.FirstCursorSinceReset)
	}

	// Listing, with the host's first_cursor_since_reset noted before it.
	listing := []ListedRepo{{Repo: "did:a", Rev: rev(10)}, {Repo: "did:b", Rev: rev(20)}}
	res, err := f.store.RecordListing(ctx, f.tenant, pds, hostBefore.FirstCursorSinceReset, listing)
	if err != nil {
		t.Fatal(err)
	}
	if res != (ListingResult{Created: 2}) {
		t.Fatalf("listing result %+v", res)
	}
	f.assertRepo(t, "did:a", ind{Host: pds, FRSR: rev(10), FCSR: 0, NeedsIndex: true, Reason: ReasonNeverIndexed})
	f.assertRepo(t, "did:b", ind{Host: pds, FRSR: rev(20), FCSR: 0, NeedsIndex: true, Reason: ReasonNeverIndexed})
	if got := f.needsIndex(t, pds, 50); !slices.Equal(got, []string{"did:a", "did:b", "did:other"}) {
		t.Fatalf("needs index after listing: %v", got)
	}

	// Index did:a at the listed rev.
	r := f.indexed(t, "did:a", pds, rev(10), 0)
	if got, want := indOf(r), (ind{Host: pds, LIR: rev(10), FRSR: rev(10), FCSR: 0}); got != want {
		t.Fatalf("after index: %+v, want %+v", got, want)
	}
	if r.IndexedAt == nil {
		t.Fatal("indexed_at not set")
	}
	// A later event advances last_firehose_rev.
	f.events(t, pds, Event{Cursor: 3, Repo: "did:a", Rev: rev(11)})
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(10), FRSR: rev(10), FCSR: 0, LFR: rev(11)})

	// Replaying the listing changes nothing.
	res, err = f.store.RecordListing(ctx, f.tenant, pds, 0, listing)
	if err != nil {
		t.Fatal(err)
	}
	if res != (ListingResult{Unchanged: 2}) {
		t.Fatalf("replayed listing result %+v", res)
	}
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(10), FRSR: rev(10), FCSR: 0, LFR: rev(11)})
	f.assertRepo(t, "did:b", ind{Host: pds, FRSR: rev(20), FCSR: 0, NeedsIndex: true, Reason: ReasonNeverIndexed})
}

func TestListingInitializesOnlyUnsetFirstRev(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.putHost(t, pds)
	f.putHost(t, "other.example.com")
	f.connect(t, pds, true, ptr(int64(40)))
	f.events(t, pds, Event{Cursor: 40, Repo: "did:x", Rev: rev(1)})
	// did:i is known from a full fetch only: first_rev_since_reset unset.
	f.indexed(t, "did:i", pds, rev(5), 10)
	// did:o lives on another host: a listing does not move it.
	f.indexed(t, "did:o", "other.example.com", rev(5), 0)

	res, err := f.store.RecordListing(ctx, f.tenant, pds, 30, []ListedRepo{
		{Repo: "did:i", Rev: rev(7)}, {Repo: "did:o", Rev: rev(9)}, {Repo: "did:x", Rev: rev(9)}, {Repo: "did:new", Rev: rev(3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res != (ListingResult{Created: 1, Initialized: 1, Unchanged: 2}) {
		t.Fatalf("listing result %+v", res)
	}
	// first_cursor_since_reset raised from 10 to 30; rev(7) > rev(5) is a
	// revision gap (events between the fetch and the listing were not seen).
	f.assertRepo(t, "did:i", ind{Host: pds, LIR: rev(5), FRSR: rev(7), FCSR: 30, HostFCSR: 40, NeedsIndex: true, Reason: ReasonRevisionGap})
	f.assertRepo(t, "did:o", ind{Host: "other.example.com", LIR: rev(5), FCSR: 0})
	f.assertRepo(t, "did:x", ind{Host: pds, FRSR: rev(1), FCSR: 40, HostFCSR: 40, NeedsIndex: true, Reason: ReasonNeverIndexed})
	f.assertRepo(t, "did:new", ind{Host: pds, FRSR: rev(3), FCSR: 30, HostFCSR: 40, NeedsIndex: true, Reason: ReasonNeverIndexed})
}

func TestSteadyStateNeedsNoReindex(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putHost(t, pds)
	f.indexed(t, "did:a", pds, rev(1), 0)
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1)})

	res := f.events(t, pds,
		Event{Cursor: 1, Repo: "did:a", Rev: rev(2)},
		Event{Cursor: 2, Repo: "did:b", Rev: rev(2)},
		Event{Cursor: 3, Repo: "did:a", Rev: rev(3)},
	)
	if res.Applied != 3 || res.Ignored != 0 || res.Reset || *res.Host.Cursor != 3 {
		t.Fatalf("result %+v", res)
	}
	for c := int64(4); c <= 6; c++ {
		f.events(t, pds, Event{Cursor: c, Repo: "did:a", Rev: rev(int(c))})
	}
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), LFR: rev(6)})
	// did:b is new: its first event starts its uninterrupted interval.
	f.assertRepo(t, "did:b", ind{Host: pds, FRSR: rev(2), NeedsIndex: true, Reason: ReasonNeverIndexed})
	if got := f.needsIndex(t, pds, 1); !slices.Equal(got, []string{"did:b"}) {
		t.Fatalf("needs index: %v", got)
	}
	h := f.host(t, pds)
	if *h.Cursor != 6 || h.FirstCursorSinceReset != 0 || h.Resets != 0 {
		t.Fatalf("host %+v", h)
	}
}

// A reset flags every idle repository of the host at once, without writing
// their rows.
func TestOutdatedCursorResetFlagsIdleRepository(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		firstCursor  *int64 // given with the notice, or nil: from the next batch
		wantPending  bool
		wantResetNow bool
	}{
		{name: "first cursor with the notice", firstCursor: ptr(int64(500)), wantResetNow: true},
		{name: "first cursor from the next event", wantPending: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.putHost(t, pds)
			f.indexed(t, "did:idle", pds, rev(1), 0)
			f.indexed(t, "did:busy", pds, rev(1), 0)
			f.events(t, pds, Event{Cursor: 1, Repo: "did:busy", Rev: rev(2)}, Event{Cursor: 2, Repo: "did:busy", Rev: rev(3)})
			idleBefore := f.assertRepo(t, "did:idle", ind{Host: pds, LIR: rev(1)})

			res := f.connect(t, pds, true, tc.firstCursor)
			if res.Reset != tc.wantResetNow || res.Host.ResetPending != tc.wantPending || !res.Host.AwaitingFirstEvent == tc.wantPending {
				t.Fatalf("connect: %+v", res)
			}
			if tc.firstCursor == nil {
				if res.Host.FirstCursorSinceReset != 0 {
					t.Fatalf("fcsr moved before the first event: %d", res.Host.FirstCursorSinceReset)
				}
				// The first event after the notice: an event of another
				// repository, cursor 500.
				ev := f.events(t, pds, Event{Cursor: 500, Repo: "did:third", Rev: rev(1)})
				if !ev.Reset || ev.Host.ResetPending || ev.Host.AwaitingFirstEvent {
					t.Fatalf("first batch after the notice: %+v", ev)
				}
			}
			h := f.host(t, pds)
			if h.FirstCursorSinceReset != 500 || h.Resets != 1 || h.LastResetAt == nil {
				t.Fatalf("host after reset: %+v", h)
			}
			idle := f.assertRepo(t, "did:idle", ind{Host: pds, LIR: rev(1), FCSR: 0, HostFCSR: 500, NeedsIndex: true, Reason: ReasonCursorReset})
			if !idle.UpdatedAt.Equal(idleBefore.UpdatedAt) {
				t.Fatalf("the reset wrote the idle repository's row: updated_at %v -> %v", idleBefore.UpdatedAt, idle.UpdatedAt)
			}
			f.assertRepo(t, "did:busy", ind{Host: pds, LIR: rev(1), LFR: rev(3), HostFCSR: 500, NeedsIndex: true, Reason: ReasonCursorReset})
			want := []string{"did:busy", "did:idle"}
			if tc.firstCursor == nil {
				want = []string{"did:third", "did:busy", "did:idle"} // rev-flagged first, then cursor-flagged
			}
			if got := f.needsIndex(t, pds, 1); !slices.Equal(got, want) {
				t.Fatalf("needs index: %v, want %v", got, want)
			}
			// Replaying the connection changes nothing more.
			again := f.connect(t, pds, true, ptr(int64(500)))
			if again.Reset || again.Host.FirstCursorSinceReset != 500 || again.Host.Resets != 1 {
				t.Fatalf("replayed connect: %+v", again)
			}
		})
	}
}

func TestEventAfterReset(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putHost(t, pds)
	f.indexed(t, "did:a", pds, rev(1), 0)
	f.events(t, pds, Event{Cursor: 1, Repo: "did:a", Rev: rev(2)})
	f.connect(t, pds, true, ptr(int64(500)))

	// The first event after the reset starts a new uninterrupted interval:
	// revisions between rev(2) and rev(5) may have been missed.
	res := f.events(t, pds, Event{Cursor: 500, Repo: "did:a", Rev: rev(5)})
	if res.Applied != 1 {
		t.Fatalf("result %+v", res)
	}
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), FRSR: rev(5), FCSR: 500, LFR: rev(2), HostFCSR: 500, NeedsIndex: true, Reason: ReasonRevisionGap})

	// A second event does not close the gap: advancing last_firehose_rev to
	// rev(6) would make max(last_indexed_rev, last_firehose_rev) >=
	// first_rev_since_reset while rev(3)..rev(4) are still missing.
	res = f.events(t, pds, Event{Cursor: 501, Repo: "did:a", Rev: rev(6)})
	if res.Applied != 0 || res.Ignored != 1 {
		t.Fatalf("event in a gap: %+v", res)
	}
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), FRSR: rev(5), FCSR: 500, LFR: rev(2), HostFCSR: 500, NeedsIndex: true, Reason: ReasonRevisionGap})

	// The re-index closes it; events advance last_firehose_rev again.
	f.indexed(t, "did:a", pds, rev(6), 500)
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(6), FRSR: rev(5), FCSR: 500, LFR: rev(2), HostFCSR: 500})
	f.events(t, pds, Event{Cursor: 502, Repo: "did:a", Rev: rev(7)})
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(6), FRSR: rev(5), FCSR: 500, LFR: rev(7), HostFCSR: 500})
}

func TestEmptyReindexClearsFlagWithoutLooping(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putHost(t, pds)
	f.indexed(t, "did:idle", pds, rev(1), 0)
	f.events(t, pds, Event{Cursor: 1, Repo: "did:other", Rev: rev(1)})
	f.connect(t, pds, true, ptr(int64(700)))
	f.assertRepo(t, "did:idle", ind{Host: pds, LIR: rev(1), HostFCSR: 700, NeedsIndex: true, Reason: ReasonCursorReset})

	// A fetch that started before the reset proves nothing about it.
	f.indexed(t, "did:idle", pds, rev(1), 0)
	f.assertRepo(t, "did:idle", ind{Host: pds, LIR: rev(1), HostFCSR: 700, NeedsIndex: true, Reason: ReasonCursorReset})

	// The re-index fetch brings nothing new (same rev), yet clears the flag.
	f.indexed(t, "did:idle", pds, rev(1), 700)
	f.assertRepo(t, "did:idle", ind{Host: pds, LIR: rev(1), FCSR: 700, HostFCSR: 700})
	if got := f.needsIndex(t, pds, 10); !slices.Equal(got, []string{"did:other"}) {
		t.Fatalf("needs index after the empty re-index: %v", got)
	}
	// And it stays cleared: replaying it, or a stale older result, changes
	// nothing (last_indexed_rev and first_cursor_since_reset never go back).
	f.indexed(t, "did:idle", pds, rev(1), 700)
	f.indexed(t, "did:idle", pds, rev(0), 0)
	f.assertRepo(t, "did:idle", ind{Host: pds, LIR: rev(1), FCSR: 700, HostFCSR: 700})
}

func TestTooBig(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putHost(t, pds)
	f.indexed(t, "did:a", pds, rev(1), 0)
	f.events(t, pds, Event{Cursor: 1, Repo: "did:a", Rev: rev(2)})
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), LFR: rev(2)})

	// too_big: records of rev(3) were dropped. last_firehose_rev stays at
	// rev(2), or max(rev(1), rev(3)) >= rev(3) would hide the gap.
	res := f.events(t, pds, Event{Cursor: 2, Repo: "did:a", Rev: rev(3), TooBig: true})
	if res.Applied != 1 {
		t.Fatalf("result %+v", res)
	}
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), FRSR: rev(3), LFR: rev(2), NeedsIndex: true, Reason: ReasonRevisionGap})
	// Later events, too_big or not, keep the gap open.
	f.events(t, pds, Event{Cursor: 3, Repo: "did:a", Rev: rev(4)})
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), FRSR: rev(3), LFR: rev(2), NeedsIndex: true, Reason: ReasonRevisionGap})
	f.events(t, pds, Event{Cursor: 4, Repo: "did:a", Rev: rev(5), TooBig: true})
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), FRSR: rev(5), LFR: rev(2), NeedsIndex: true, Reason: ReasonRevisionGap})
	// A fetch older than the last drop does not close it; a newer one does.
	f.indexed(t, "did:a", pds, rev(4), 0)
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(4), FRSR: rev(5), LFR: rev(2), NeedsIndex: true, Reason: ReasonRevisionGap})
	f.indexed(t, "did:a", pds, rev(5), 0)
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(5), FRSR: rev(5), LFR: rev(2)})

	// too_big as the very first event of a repository.
	f.events(t, pds, Event{Cursor: 5, Repo: "did:new", Rev: rev(9), TooBig: true})
	f.assertRepo(t, "did:new", ind{Host: pds, FRSR: rev(9), NeedsIndex: true, Reason: ReasonNeverIndexed})
}

func TestRepositoryMovesToHostWithLowerCursor(t *testing.T) {
	t.Parallel()
	const hostA, hostB = "a.example.com", "b.example.com"
	f := newFixture(t)
	f.putHost(t, hostA)
	f.putHost(t, hostB)
	// Host A is far ahead in its own cursor sequence; host B is young.
	f.connect(t, hostA, true, ptr(int64(1000)))
	f.events(t, hostA, Event{Cursor: 1000, Repo: "did:x", Rev: rev(1)})
	f.events(t, hostB, Event{Cursor: 50, Repo: "did:y", Rev: rev(1)})
	f.indexed(t, "did:m", hostA, rev(1), 1000)
	f.events(t, hostA, Event{Cursor: 1001, Repo: "did:m", Rev: rev(2)})
	f.assertRepo(t, "did:m", ind{Host: hostA, LIR: rev(1), FCSR: 1000, LFR: rev(2), HostFCSR: 1000})

	// did:m moves to B: its first_cursor_since_reset becomes B's value, 0,
	// lower than A's 1000: cursors of different hosts are unrelated.
	res := f.events(t, hostB, Event{Cursor: 51, Repo: "did:m", Rev: rev(3)})
	if res.Applied != 1 {
		t.Fatalf("result %+v", res)
	}
	f.assertRepo(t, "did:m", ind{Host: hostB, LIR: rev(1), FRSR: rev(3), FCSR: 0, LFR: rev(2), HostFCSR: 0, NeedsIndex: true, Reason: ReasonRevisionGap})
	// Late events for it from A are replays; they do not move it back.
	res = f.events(t, hostA, Event{Cursor: 1002, Repo: "did:m", Rev: rev(3)})
	if res.Applied != 0 {
		t.Fatalf("late event from the old host applied: %+v", res)
	}
	f.indexed(t, "did:m", hostB, rev(3), 51)
	f.events(t, hostB, Event{Cursor: 52, Repo: "did:m", Rev: rev(4)})
	f.assertRepo(t, "did:m", ind{Host: hostB, LIR: rev(3), FRSR: rev(3), FCSR: 51, LFR: rev(4), HostFCSR: 0})

	// A later reset on B, to 60: far below A's cursors, it must still flag
	// did:m (had the move kept max(1000, 0), it would not).
	f.connect(t, hostB, true, ptr(int64(60)))
	f.assertRepo(t, "did:m", ind{Host: hostB, LIR: rev(3), FRSR: rev(3), FCSR: 51, LFR: rev(4), HostFCSR: 60, NeedsIndex: true, Reason: ReasonCursorReset})
	if got := f.needsIndex(t, hostB, 10); !slices.Equal(got, []string{"did:y", "did:m"}) {
		t.Fatalf("needs index on B: %v", got)
	}
	if got := f.needsIndex(t, hostA, 10); !slices.Equal(got, []string{"did:x"}) {
		t.Fatalf("needs index on A: %v", got)
	}

	// A full fetch from another host moves the repository too: nothing has
	// been seen on the new host's stream, so first_rev_since_reset is unset.
	f.indexed(t, "did:m", hostA, rev(5), 1000)
	f.assertRepo(t, "did:m", ind{Host: hostA, LIR: rev(5), FCSR: 1000, LFR: rev(4), HostFCSR: 1000})
}

func TestReplayedEventsAfterCrash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.putHost(t, pds)
	f.indexed(t, "did:a", pds, rev(1), 0)
	batch1 := []Event{
		{Cursor: 1, Repo: "did:a", Rev: rev(2)},
		{Cursor: 2, Repo: "did:b", Rev: rev(2)},
		{Cursor: 3, Repo: "did:a", Rev: rev(3), TooBig: true},
	}
	batch2 := []Event{
		{Cursor: 4, Repo: "did:c", Rev: rev(4)},
		{Cursor: 5, Repo: "did:a", Rev: rev(5)},
	}
	f.events(t, pds, batch1...)
	f.events(t, pds, batch2...)
	snapshot := func() []Repository {
		rs, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{Host: pds})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	before := snapshot()
	hostBefore := f.host(t, pds)

	// The consumer crashed before saving its cursor: it reconnects from
	// cursor 0 and the host replays everything.
	f.connect(t, pds, false, nil)
	for _, b := range [][]Event{batch1, batch2} {
		res := f.events(t, pds, b...)
		if res.Applied != 0 || res.Ignored != len(b) || res.Reset {
			t.Fatalf("replayed batch: %+v", res)
		}
	}
	after := snapshot()
	if !slices.EqualFunc(before, after, func(a, b Repository) bool {
		return indOf(a) == indOf(b) && a.UpdatedAt.Equal(b.UpdatedAt)
	}) {
		t.Fatalf("replay changed repositories:\n before %+v\n after  %+v", before, after)
	}
	h := f.host(t, pds)
	if *h.Cursor != 5 || h.FirstCursorSinceReset != hostBefore.FirstCursorSinceReset || h.Resets != 0 {
		t.Fatalf("host after replay: %+v", h)
	}
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), FRSR: rev(3), LFR: rev(2), NeedsIndex: true, Reason: ReasonRevisionGap})
}

func TestConnectStrictMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		strict    bool
		cursor    int64 // host cursor before the connection (0: no event yet)
		outdated  bool
		first     int64
		wantReset bool
		wantFCSR  int64
	}{
		{name: "lenient skip", strict: false, cursor: 10, first: 15, wantFCSR: 0},
		{name: "strict next", strict: true, cursor: 10, first: 11, wantFCSR: 0},
		{name: "strict skip", strict: true, cursor: 10, first: 12, wantReset: true, wantFCSR: 12},
		{name: "strict replay from earlier cursor", strict: true, cursor: 10, first: 4, wantFCSR: 0},
		{name: "strict, no cursor yet", strict: true, cursor: 0, first: 99, wantFCSR: 0},
		{name: "outdated notice, lenient", strict: false, cursor: 10, outdated: true, first: 11, wantReset: true, wantFCSR: 11},
	} {
		for _, via := range []string{"connect", "first event"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t)
				ctx := context.Background()
				if _, _, err := f.store.PutHost(ctx, f.tenant, pds, ptr(tc.strict)); err != nil {
					t.Fatal(err)
				}
				if tc.cursor > 0 {
					f.events(t, pds, Event{Cursor: tc.cursor, Repo: "did:a", Rev: rev(1)})
				}
				var reset bool
				if via == "connect" {
					reset = f.connect(t, pds, tc.outdated, ptr(tc.first)).Reset
				} else {
					f.connect(t, pds, tc.outdated, nil)
					reset = f.events(t, pds, Event{Cursor: tc.first, Repo: "did:b", Rev: rev(2)}).Reset
				}
				h := f.host(t, pds)
				if reset != tc.wantReset || h.FirstCursorSinceReset != tc.wantFCSR || h.AwaitingFirstEvent {
					t.Fatalf("reset %v, host %+v; want reset %v, fcsr %d", reset, h, tc.wantReset, tc.wantFCSR)
				}
				// Only the first event after a connection is checked.
				res := f.events(t, pds, Event{Cursor: max(tc.first, tc.cursor) + 50, Repo: "did:c", Rev: rev(3)})
				if res.Reset || res.Host.FirstCursorSinceReset != tc.wantFCSR {
					t.Fatalf("second batch: %+v", res)
				}
			})
		}
	}
}
