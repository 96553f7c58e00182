package syncstate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
)

func TestTID(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 3, 5, 6, 7, 8, 123456000, time.UTC)
	tid := NewTID(at, 513)
	if len(tid) != 13 {
		t.Fatalf("NewTID length %d", len(tid))
	}
	got, ok := TIDTime(tid)
	if !ok || !got.Equal(at) {
		t.Fatalf("TIDTime(%s) = %v, %v; want %v", tid, got, ok, at)
	}
	// TIDs sort byte-wise in time order.
	if a, b := NewTID(at, 1023), NewTID(at.Add(time.Microsecond), 0); !(a < b) {
		t.Fatalf("%s !< %s", a, b)
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"3jzfcijpj2z2a", true}, // the atproto specification's example
		{"2222222222222", true}, // the epoch
		{"jzzzzzzzzzzzz", true}, // top bit set: parsed, dated centuries ahead
		{"kzzzzzzzzzzzz", false},
		{"3jzfcijpj2z2", false},
		{"3jzfcijpj2z2aa", false},
		{"3JZFCIJPJ2Z2A", false},
		{"3jzfcijpj2z21", false}, // '1' is not in the alphabet
		{"3jzfcijpj2z20", false},
		{"", false},
	} {
		if _, ok := TIDTime(tc.in); ok != tc.ok {
			t.Errorf("TIDTime(%q) ok = %v, want %v", tc.in, ok, tc.ok)
		}
	}
	if got, _ := TIDTime("3jzfcijpj2z2a"); got.Year() != 2023 {
		t.Errorf("the specification's example TID is dated %v, want 2023", got)
	}
	if got, _ := TIDTime("jzzzzzzzzzzzz"); got.Year() < 2200 {
		t.Errorf("a TID with the top bit set is dated %v", got)
	}
}

func TestValidateRev(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	s := New(nil, Options{Now: func() time.Time { return now }})
	for _, tc := range []struct {
		name string
		rev  string
		ok   bool
	}{
		{"past TID", NewTID(now.Add(-24*time.Hour), 0), true},
		{"TID 4m59s ahead", NewTID(now.Add(4*time.Minute+59*time.Second), 0), true},
		{"TID exactly 5m ahead", NewTID(now.Add(5*time.Minute), 0), true},
		{"TID 5m01s ahead", NewTID(now.Add(5*time.Minute+time.Second), 0), false},
		{"TID a year ahead", NewTID(now.AddDate(1, 0, 0), 0), false},
		{"opaque rev", "0000000042", true},
		{"git sha", "9fceb02d0ae598e95dc970b74767f19372d61af8", true},
		{"13 chars, not a TID", "0123456789abc", true},
		{"empty", "", false},
		{"control character", "abc\ndef", false},
		{"NUL", "abc\x00", false},
		{"invalid UTF-8", "abc\xff", false},
		{"256 bytes", strings.Repeat("a", 256), true},
		{"257 bytes", strings.Repeat("a", 257), false},
	} {
		err := s.ValidateRev(tc.rev)
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && repolock.ErrorCode(err) != repolock.EInvalid {
			t.Errorf("%s: err %v, want invalid_argument", tc.name, err)
		}
	}
}

func TestFutureTIDIsRejectedEverywhere(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.putHost(t, pds)
	future := NewTID(testNow.Add(6*time.Minute), 0)
	_, err := f.store.ApplyEvents(ctx, f.tenant, pds, []Event{{Cursor: 1, Repo: "did:a", Rev: rev(1)}, {Cursor: 2, Repo: "did:a", Rev: future}})
	assertCode(t, err, repolock.EInvalid)
	if !strings.Contains(repolock.ErrorMessage(err), "events[1]") {
		t.Errorf("message does not name the event: %q", repolock.ErrorMessage(err))
	}
	_, err = f.store.RecordIndexed(ctx, f.tenant, "did:a", IndexResult{Host: pds, Rev: future})
	assertCode(t, err, repolock.EInvalid)
	_, err = f.store.RecordListing(ctx, f.tenant, pds, 0, []ListedRepo{{Repo: "did:a", Rev: future}})
	assertCode(t, err, repolock.EInvalid)
	// Nothing was written: the first, valid event of the batch included.
	_, err = f.store.GetRepository(ctx, f.tenant, "did:a")
	assertCode(t, err, repolock.ENotFound)
	if h := f.host(t, pds); h.Cursor != nil {
		t.Fatalf("host cursor set by a rejected batch: %d", *h.Cursor)
	}
	// With the clock moved on, the same rev is fine.
	later := New(f.db, Options{Now: func() time.Time { return testNow.Add(time.Minute) }})
	if _, err := later.RecordIndexed(ctx, f.tenant, "did:a", IndexResult{Host: pds, Rev: future}); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.putHost(t, pds)
	f.events(t, pds, Event{Cursor: 10, Repo: "did:a", Rev: rev(1)})
	many := make([]Event, MaxBatch+1)
	for i := range many {
		many[i] = Event{Cursor: int64(i), Repo: "did:a", Rev: rev(i)}
	}
	for _, tc := range []struct {
		name string
		err  error
		code repolock.Code
	}{
		{"host name with upper case", func() error { _, _, err := f.store.PutHost(ctx, f.tenant, "PDS.example", nil); return err }(), repolock.EInvalid},
		{"host name with a path", func() error { _, _, err := f.store.PutHost(ctx, f.tenant, "pds.example/x", nil); return err }(), repolock.EInvalid},
		{"unknown host", func() error {
			_, err := f.store.ApplyEvents(ctx, f.tenant, "nope.example", []Event{{Cursor: 1, Repo: "r", Rev: "1"}})
			return err
		}(), repolock.ENotFound},
		{"no events", func() error { _, err := f.store.ApplyEvents(ctx, f.tenant, pds, nil); return err }(), repolock.EInvalid},
		{"too many events", func() error { _, err := f.store.ApplyEvents(ctx, f.tenant, pds, many); return err }(), repolock.EInvalid},
		{"cursor not increasing", func() error {
			_, err := f.store.ApplyEvents(ctx, f.tenant, pds, []Event{{Cursor: 12, Repo: "r", Rev: "1"}, {Cursor: 12, Repo: "s", Rev: "1"}})
			return err
		}(), repolock.EInvalid},
		{"negative cursor", func() error {
			_, err := f.store.ApplyEvents(ctx, f.tenant, pds, []Event{{Cursor: -1, Repo: "r", Rev: "1"}})
			return err
		}(), repolock.EInvalid},
		{"empty repo", func() error {
			_, err := f.store.ApplyEvents(ctx, f.tenant, pds, []Event{{Cursor: 11, Repo: "", Rev: "1"}})
			return err
		}(), repolock.EInvalid},
		{"empty rev", func() error {
			_, err := f.store.ApplyEvents(ctx, f.tenant, pds, []Event{{Cursor: 11, Repo: "r", Rev: ""}})
			return err
		}(), repolock.EInvalid},
		{"negative first cursor", func() error {
			_, err := f.store.Connect(ctx, f.tenant, pds, Connection{FirstCursor: ptr(int64(-5))})
			return err
		}(), repolock.EInvalid},
		{"connect unknown host", func() error { _, err := f.store.Connect(ctx, f.tenant, "nope.example", Connection{}); return err }(), repolock.ENotFound},
		{"index cursor_before ahead of the host", func() error {
			_, err := f.store.RecordIndexed(ctx, f.tenant, "did:a", IndexResult{Host: pds, Rev: rev(2), CursorBefore: 11})
			return err
		}(), repolock.EInvalid},
		{"index unknown host", func() error {
			_, err := f.store.RecordIndexed(ctx, f.tenant, "did:a", IndexResult{Host: "nope.example", Rev: rev(2)})
			return err
		}(), repolock.ENotFound},
		{"listing cursor_before ahead of the host", func() error {
			_, err := f.store.RecordListing(ctx, f.tenant, pds, 11, []ListedRepo{{Repo: "did:b", Rev: rev(1)}})
			return err
		}(), repolock.EInvalid},
		{"listing with a repository twice", func() error {
			_, err := f.store.RecordListing(ctx, f.tenant, pds, 0, []ListedRepo{{Repo: "did:b", Rev: rev(1)}, {Repo: "did:b", Rev: rev(2)}})
			return err
		}(), repolock.EInvalid},
		{"unknown repository", func() error { _, err := f.store.GetRepository(ctx, f.tenant, "did:nope"); return err }(), repolock.ENotFound},
		{"needs index without host", func() error {
			_, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{NeedsIndex: true})
			return err
		}(), repolock.EInvalid},
		{"bad page token", func() error {
			_, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{Host: pds, NeedsIndex: true, PageToken: "!!"})
			return err
		}(), repolock.EInvalid},
		{"phase-0 page token in a needs-index listing", func() error {
			opts := ListOptions{Host: pds, NeedsIndex: true}
			opts.PageToken = pageToken{Repo: "x"}.encode(reposScope(f.tenant, opts))
			_, _, err := f.store.ListRepositories(ctx, f.tenant, opts)
			return err
		}(), repolock.EInvalid},
		{"page token of another listing", func() error {
			tok := pageToken{Repo: "x"}.encode(reposScope(f.tenant, ListOptions{}))
			_, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{Host: pds, PageToken: tok})
			return err
		}(), repolock.EInvalid},
		{"page token of another tenant", func() error {
			tok := pageToken{Repo: "x"}.encode(reposScope("00000000-0000-0000-0000-000000000000", ListOptions{}))
			_, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{PageToken: tok})
			return err
		}(), repolock.EInvalid},
		{"corrupt page token", func() error {
			_, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{PageToken: "W1tbW1tb"})
			return err
		}(), repolock.EInvalid},
		{"corrupt hosts page token", func() error {
			_, _, err := f.store.ListHosts(ctx, f.tenant, 10, "W1tbW1tb")
			return err
		}(), repolock.EInvalid},
		{"page size", func() error {
			_, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{PageSize: 501})
			return err
		}(), repolock.EInvalid},
	} {
		if got := repolock.ErrorCode(tc.err); got != tc.code {
			t.Errorf("%s: code %q (err %v), want %q", tc.name, got, tc.err, tc.code)
		}
	}
	// None of it wrote anything.
	f.assertRepo(t, "did:a", ind{Host: pds, FRSR: rev(1), NeedsIndex: true, Reason: ReasonNeverIndexed})
	if h := f.host(t, pds); *h.Cursor != 10 {
		t.Fatalf("host cursor %d", *h.Cursor)
	}
}

func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	other := &fixture{db: f.db, store: f.store, tenant: dbtest.NewTenant(t, f.db, "").ID}
	f.putHost(t, pds)
	f.indexed(t, "did:a", pds, rev(1), 0)

	_, err := other.store.GetRepository(ctx, other.tenant, "did:a")
	assertCode(t, err, repolock.ENotFound)
	_, err = other.store.GetHost(ctx, other.tenant, pds)
	assertCode(t, err, repolock.ENotFound)
	_, err = other.store.RecordIndexed(ctx, other.tenant, "did:a", IndexResult{Host: pds, Rev: rev(2)})
	assertCode(t, err, repolock.ENotFound)

	// The same host name and repository id in another tenant are other rows.
	_, created, err := other.store.PutHost(ctx, other.tenant, pds, ptr(true))
	if err != nil || !created {
		t.Fatalf("PutHost in the other tenant: created %v, %v", created, err)
	}
	other.connect(t, pds, true, ptr(int64(9)))
	other.indexed(t, "did:a", pds, rev(7), 9)
	other.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(7), FCSR: 9, HostFCSR: 9})
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1)})
	if h := f.host(t, pds); h.StrictCursor || h.FirstCursorSinceReset != 0 {
		t.Fatalf("first tenant's host changed: %+v", h)
	}
	rs, _, err := other.store.ListRepositories(ctx, other.tenant, ListOptions{})
	if err != nil || len(rs) != 1 || rs[0].LastIndexedRev != rev(7) {
		t.Fatalf("other tenant lists %+v, %v", rs, err)
	}
}

func TestPutHost(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	h, created, err := f.store.PutHost(ctx, f.tenant, pds, nil)
	if err != nil || !created || h.StrictCursor || h.Cursor != nil || h.FirstCursorSinceReset != 0 {
		t.Fatalf("create: %+v %v %v", h, created, err)
	}
	h, created, err = f.store.PutHost(ctx, f.tenant, pds, ptr(true))
	if err != nil || created || !h.StrictCursor {
		t.Fatalf("set strict: %+v %v %v", h, created, err)
	}
	h, created, err = f.store.PutHost(ctx, f.tenant, pds, nil)
	if err != nil || created || !h.StrictCursor {
		t.Fatalf("put without a setting keeps it: %+v %v %v", h, created, err)
	}
	for i := range 5 {
		f.putHost(t, fmt.Sprintf("h%d.example", i))
	}
	var names []string
	token := ""
	for {
		page, next, err := f.store.ListHosts(ctx, f.tenant, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range page {
			names = append(names, h.Name)
		}
		if next == "" {
			break
		}
		token = next
	}
	want := []string{"h0.example", "h1.example", "h2.example", "h3.example", "h4.example", pds}
	if !slices.Equal(names, want) {
		t.Fatalf("hosts %v, want %v", names, want)
	}
}

// TestNeedsIndexPagination pages through both phases of the needs-index
// query with every page size from 1 to 7: every flagged repository exactly
// once, rev-flagged ones first (by repo), then cursor-flagged ones (by
// first_cursor_since_reset, then repo).
func TestNeedsIndexPagination(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.putHost(t, pds)
	f.putHost(t, "other.example")
	// Fine repositories, cursor-flagged ones at several cursors, and
	// rev-flagged ones.
	for i := range 6 {
		f.indexed(t, fmt.Sprintf("did:fine:%d", i), pds, rev(1), 0)
	}
	f.connect(t, pds, true, ptr(int64(10)))
	f.events(t, pds, Event{Cursor: 10, Repo: "did:x", Rev: rev(1)})
	for i := range 4 {
		f.indexed(t, fmt.Sprintf("did:fine:%d", i), pds, rev(1), 10)
	}
	f.indexed(t, "did:c:late", pds, rev(1), 10)
	f.connect(t, pds, true, ptr(int64(20)))
	f.events(t, pds, Event{Cursor: 20, Repo: "did:y", Rev: rev(1)})
	for i := range 4 {
		f.indexed(t, fmt.Sprintf("did:fine:%d", i), pds, rev(1), 20)
	}
	f.events(t, pds, Event{Cursor: 21, Repo: "did:fine:3", Rev: rev(2), TooBig: true})
	f.indexed(t, "did:elsewhere", "other.example", rev(1), 0)
	f.events(t, "other.example", Event{Cursor: 1, Repo: "did:elsewhere", Rev: rev(2), TooBig: true})

	want := []string{
		"did:fine:3", "did:x", "did:y", // rev conditions, by repo
		"did:fine:4", "did:fine:5", // cursor 0
		"did:c:late", // cursor 10
	}
	for size := 1; size <= 7; size++ {
		if got := f.needsIndex(t, pds, size); !slices.Equal(got, want) {
			t.Errorf("page size %d: %v, want %v", size, got, want)
		}
	}
	page, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{Host: pds, NeedsIndex: true, PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	reasons := make([]Reason, len(page))
	for i, r := range page {
		reasons[i] = r.Reason
	}
	if wantR := []Reason{ReasonRevisionGap, ReasonNeverIndexed, ReasonNeverIndexed, ReasonCursorReset, ReasonCursorReset, ReasonCursorReset}; !slices.Equal(reasons, wantR) {
		t.Fatalf("reasons %v, want %v", reasons, wantR)
	}
	// Without needs_index: all of the host's repositories, by repo.
	all, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{Host: pds, PageSize: 100})
	if err != nil || len(all) != 9 || all[0].Repo != "did:c:late" || all[8].Repo != "did:y" {
		t.Fatalf("all: %d repositories, %v", len(all), err)
	}
}

// TestRevColumnsCompareByteWise: revs are COLLATE "C" whatever the
// database's default collation.
func TestRevColumnsCompareByteWise(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var cols []string
	err := f.db.SelectContext(context.Background(), &cols, `
		SELECT a.attrelid::regclass || '.' || a.attname
		FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid IN ('sync_repositories'::regclass, 'sync_hosts'::regclass)
			AND a.attnum > 0 AND c.collname = 'C'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sync_hosts.name", "sync_repositories.first_rev_since_reset", "sync_repositories.last_firehose_rev",
		"sync_repositories.last_indexed_rev", "sync_repositories.repo"}
	if !slices.Equal(cols, want) {
		t.Fatalf("COLLATE \"C\" columns %v, want %v", cols, want)
	}
	// Byte order: 'Z' (0x5a) < 'a' (0x61) < 'é' (0xc3 0xa9); a locale would
	// put "a" first or fold case.
	f.putHost(t, pds)
	f.indexed(t, "did:a", pds, "a", 0)
	f.indexed(t, "did:a", pds, "Z", 0)
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: "a"})
	f.events(t, pds, Event{Cursor: 1, Repo: "did:a", Rev: "é"}, Event{Cursor: 2, Repo: "did:a", Rev: "Zz"})
	f.assertRepo(t, "did:a", ind{Host: pds, LIR: "a", LFR: "é"})
}
