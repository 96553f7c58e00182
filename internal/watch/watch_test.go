package watch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/repolock/repolock"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/leases"
	"github.com/repolock/repolock/internal/pglisten"
	"github.com/repolock/repolock/internal/tenants"
	"github.com/repolock/repolock/internal/watch"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newService(db *database.DB) *watch.Service {
	return watch.New(db, watch.Config{Retention: 90 * 24 * time.Hour, PollInterval: 50 * time.Millisecond, Logger: discard()})
}

// insertEvent writes an "acquired" event of tenant on url through q, as
// internal/locks does, and returns its id.
func insertEvent(t testing.TB, q database.Querier, tenant, url string) int64 {
	t.Helper()
	var id int64
	if err := q.GetContext(context.Background(), &id, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name)
		SELECT 'acquired', $1, u.id, u.name, u.id, u.name FROM cluster_users u WHERE u.id = $2
		RETURNING id`, url, tenant); err != nil {
		t.Fatalf("insert event: %v", err)
	}
	return id
}

// insertDenial writes a "denied" event: requester was refused url, which
// owner holds.
func insertDenial(t testing.TB, q database.Querier, requester, owner, url string) int64 {
	t.Helper()
	var id int64
	if err := q.GetContext(context.Background(), &id, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name)
		SELECT 'denied', $1, r.id, r.name, o.id, o.name FROM cluster_users r, cluster_users o WHERE r.id = $2 AND o.id = $3
		RETURNING id`, url, requester, owner); err != nil {
		t.Fatalf("insert denial: %v", err)
	}
	return id
}

func ids(events []watch.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

// committedOrder is every event with an xid, in the watch's order.
func committedOrder(t testing.TB, db *database.DB) []int64 {
	t.Helper()
	var out []int64
	if err := db.SelectContext(context.Background(), &out, `SELECT id FROM repository_lock_events WHERE xid IS NOT NULL ORDER BY xid, id`); err != nil {
		t.Fatal(err)
	}
	return out
}

// drain reads pages from cursor until want events have come (the horizon
// may trail behind transactions of other tests on the server for a while),
// and returns every event read and the last cursor.
func drain(t testing.TB, s *watch.Service, sc watch.Scope, cursor string, pageSize, want int) ([]int64, string) {
	t.Helper()
	var got []int64
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < want {
		p, err := s.Read(context.Background(), sc, cursor, nil, pageSize)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(p.Events)...)
		cursor = p.Cursor
		if len(p.Events) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("drain: %d events of %d after 30s: %v", len(got), want, got)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return got, cursor
}

// TestOutOfOrderCommit: T1 writes the event with the lower id, T2 the one
// with the higher id, T2 commits first. A read between the two commits
// must not move the cursor past T1's event: after T1 commits, the reader
// gets both, T1's first, and nothing twice.
func TestOutOfOrderCommit(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	s := newService(db)
	ctx := context.Background()
	u := dbtest.NewTenant(t, db, "")
	start, err := s.Head(ctx, watch.Admin)
	if err != nil {
		t.Fatal(err)
	}

	t1, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback()
	t2, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t2.Rollback()
	id1 := insertEvent(t, t1, u.ID, "https://example.com/o/one")
	id2 := insertEvent(t, t2, u.ID, "https://example.com/o/two")
	if id1 >= id2 {
		t.Fatalf("ids %d, %d: want the first lower", id1, id2)
	}
	if err := t2.Commit(); err != nil {
		t.Fatal(err)
	}
	// T2 is committed, T1 is not: whatever the reader gets now must not
	// let it skip id1.
	p, err := s.Read(ctx, watch.Admin, start, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 0 {
		t.Fatalf("read while the lower id is uncommitted: %v; want nothing (it would skip %d)", ids(p.Events), id1)
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	got, _ := drain(t, s, watch.Admin, p.Cursor, 10, 2)
	if !slices.Equal(got, []int64{id1, id2}) {
		t.Fatalf("after both commits: %v; want [%d %d]", got, id1, id2)
	}
}

// TestRandomInterleavings: random schedules of concurrent transactions
// (begin, insert events, commit or roll back, in any order) interleaved
// with reads of small pages. The concatenation of every page read equals
// the committed events in order: no gap, no duplicate, nothing rolled back.
func TestRandomInterleavings(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	s := newService(db)
	ctx := context.Background()
	u := dbtest.NewTenant(t, db, "")
	for seed := uint64(1); seed <= 8; seed++ {
		r := rand.New(rand.NewPCG(seed, 26))
		before := len(committedOrder(t, db))
		cursor, err := s.Head(ctx, watch.Admin)
		if err != nil {
			t.Fatal(err)
		}
		var open []database.Tx
		var read []int64
		for step := 0; step < 200; step++ {
			switch op := r.IntN(10); {
			case op < 2 && len(open) < 6: // begin
				tx, err := db.BeginTxx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				open = append(open, tx)
			case op < 5 && len(open) > 0: // insert in a random open transaction
				insertEvent(t, open[r.IntN(len(open))], u.ID, "https://example.com/o/r")
			case op < 7 && len(open) > 0: // end a random one
				i := r.IntN(len(open))
				if r.IntN(5) == 0 {
					err = open[i].Rollback()
				} else {
					err = open[i].Commit()
				}
				if err != nil {
					t.Fatal(err)
				}
				open = slices.Delete(open, i, i+1)
			case op == 7: // an autocommit insert
				insertEvent(t, db, u.ID, "https://example.com/o/auto")
			default: // read a page
				p, err := s.Read(ctx, watch.Admin, cursor, nil, 1+r.IntN(3))
				if err != nil {
					t.Fatal(err)
				}
				read = append(read, ids(p.Events)...)
				cursor = p.Cursor
			}
		}
		for _, tx := range open {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		want := committedOrder(t, db)[before:]
		rest, _ := drain(t, s, watch.Admin, cursor, 4, len(want)-len(read))
		read = append(read, rest...)
		if !slices.Equal(read, want) {
			t.Fatalf("seed %d: pages %v\nwant committed %v", seed, read, want)
		}
	}
}

// TestScope: a tenant sees the events it acted in and the denials on its
// locks; another tenant sees none of them; the admin sees all.
func TestScope(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	s := newService(db)
	ctx := context.Background()
	a, b, c := dbtest.NewTenant(t, db, ""), dbtest.NewTenant(t, db, ""), dbtest.NewTenant(t, db, "")
	heads := map[string]string{}
	for _, sc := range []watch.Scope{watch.Admin, {TenantID: a.ID}, {TenantID: b.ID}, {TenantID: c.ID}} {
		h, err := s.Head(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		heads[sc.TenantID] = h
	}
	ea := insertEvent(t, db, a.ID, "https://example.com/a/r")
	eb := insertEvent(t, db, b.ID, "https://example.com/b/r")
	denied := insertDenial(t, db, b.ID, a.ID, "https://example.com/a/r")
	for _, tc := range []struct {
		name  string
		scope watch.Scope
		want  []int64
	}{
		{"admin", watch.Admin, []int64{ea, eb, denied}},
		{"owner of the denied lock", watch.Scope{TenantID: a.ID}, []int64{ea, denied}},
		{"denied tenant", watch.Scope{TenantID: b.ID}, []int64{eb, denied}},
		{"bystander", watch.Scope{TenantID: c.ID}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cursor := drain(t, s, tc.scope, heads[tc.scope.TenantID], 2, len(tc.want))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			p, err := s.Read(ctx, tc.scope, cursor, nil, 10)
			if err != nil || len(p.Events) != 0 {
				t.Fatalf("after the last: %v %v; want nothing", ids(p.Events), err)
			}
		})
	}
	// Kinds filter.
	var p watch.Page
	var err error
	for deadline := time.Now().Add(30 * time.Second); len(p.Events) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// A read may stop short while the horizon trails another
		// transaction; it never skips.
		p, err = s.Read(ctx, watch.Admin, heads[""], []string{"denied"}, 10)
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(ids(p.Events), []int64{denied}) {
		t.Fatalf("kinds=denied: %v; want [%d]", ids(p.Events), denied)
	}
	if _, err := s.Read(ctx, watch.Admin, heads[""], []string{"exploded"}, 10); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("unknown kind: %v; want invalid_argument", err)
	}
	// A tenant's cursor is refused to another tenant.
	if _, err := s.Read(ctx, watch.Scope{TenantID: b.ID}, heads[a.ID], nil, 10); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("another tenant's cursor: %v; want invalid_argument", err)
	}
}

// TestCursorExpired: a cursor older than the retention is cursor_expired;
// with retention off (negative) it is not.
func TestCursorExpired(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	old := watch.EncodeForTest(watch.Admin, watch.Position{X: 3}, time.Now().Add(-49*time.Hour))
	s := watch.New(db, watch.Config{Retention: 48 * time.Hour, Logger: discard()})
	if _, err := s.Read(ctx, watch.Admin, old, nil, 10); repolock.ErrorCode(err) != repolock.ECursorExpired {
		t.Fatalf("old cursor: %v; want cursor_expired", err)
	}
	fresh := watch.EncodeForTest(watch.Admin, watch.Position{X: 3}, time.Now().Add(-47*time.Hour))
	if _, err := s.Read(ctx, watch.Admin, fresh, nil, 10); err != nil {
		t.Fatalf("cursor within retention: %v", err)
	}
	forever := watch.New(db, watch.Config{Retention: -1, Logger: discard()})
	if _, err := forever.Read(ctx, watch.Admin, old, nil, 10); err != nil {
		t.Fatalf("retention off: %v", err)
	}
	for _, bad := range []string{"x", "eyJrIjoiZXZlbnRzIn0", watch.EncodeForTest(watch.Admin, watch.Position{X: 1}, time.Now())} {
		if _, err := s.Read(ctx, watch.Admin, bad, nil, 10); repolock.ErrorCode(err) != repolock.EInvalid {
			t.Fatalf("cursor %q: %v; want invalid_argument", bad, err)
		}
	}
}

// TestWatcherCap: a tenant may hold MaxWatchersPerTenant watchers; one more
// is too_many_requests until one leaves; other tenants and the admin are
// not affected.
func TestWatcherCap(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	s := watch.New(db, watch.Config{Retention: -1, MaxWatchersPerTenant: 3, Logger: discard()})
	a := watch.Scope{TenantID: "a"}
	var leaves []func()
	for range 3 {
		leave, err := s.Enter(a)
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leave)
	}
	if _, err := s.Enter(a); repolock.ErrorCode(err) != repolock.ETooManyRequests {
		t.Fatalf("4th watcher: %v; want too_many_requests", err)
	}
	if _, err := s.Enter(watch.Scope{TenantID: "b"}); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	for range 10 {
		if _, err := s.Enter(watch.Admin); err != nil {
			t.Fatalf("admin: %v", err)
		}
	}
	leaves[0]()
	leaves[0]() // twice counts once
	if _, err := s.Enter(a); err != nil {
		t.Fatalf("after one left: %v", err)
	}
	if _, err := s.Enter(a); repolock.ErrorCode(err) != repolock.ETooManyRequests {
		t.Fatalf("4th again: %v; want too_many_requests", err)
	}
}

// awaitEvents waits (on Changed, no polling of the database by the test)
// until the service's buffer serves want events after cursor.
func awaitEvents(t testing.TB, s *watch.Service, sc watch.Scope, cursor string, want int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []int64
	for {
		ch := s.Changed()
		p, err := s.Read(ctx, sc, cursor, nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(p.Events)...)
		cursor = p.Cursor
		if len(got) >= want {
			return got
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %d events: got %v", want, got)
		}
	}
}

// polling starts a service with no LISTEN session: it reads when Written
// or Changed pokes it, and every poll.
func polling(t *testing.T, db *database.DB, poll time.Duration) *watch.Service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := watch.New(db, watch.Config{Retention: -1, PollInterval: poll, Logger: discard()})
	s.Start(ctx)
	t.Cleanup(s.Close)
	return s
}

// listening starts a service whose notifications come from a LISTEN
// session on url (internal/pglisten), as cmd/api wires it: the watch its
// only subscriber, or (shared) with the token cache's and the leases'
// channels on the same session.
func listening(t *testing.T, db *database.DB, url string, shared bool, poll time.Duration) *watch.Service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := watch.New(db, watch.Config{Retention: -1, PollInterval: poll, Logger: discard()})
	l := pglisten.New(pglisten.Config{URL: url, Logger: discard()})
	l.Subscribe(watch.NotifyChannel, pglisten.Subscriber{Notify: s.Notify, State: s.SetListening})
	if shared {
		c := tenants.NewCache(tenants.CacheConfig{Logger: discard()})
		l.Subscribe(tenants.NotifyChannel, pglisten.Subscriber{Notify: c.Invalidate, State: c.SetListening})
		n := leases.NewNotifier(discard())
		l.Subscribe(leases.NotifyChan, pglisten.Subscriber{Notify: n.Notify, State: n.SetListening})
	}
	s.Start(ctx)
	t.Cleanup(s.Close)
	l.Start()
	t.Cleanup(l.Close)
	return s
}

// TestNotifyWakes: with the LISTEN session up (the watch's channel alone,
// or shared with the token cache's and the leases'), an event written by another replica wakes the
// watchers waiting on Changed once that replica calls Written (its NOTIFY,
// sent after the write committed), and they read it from the buffer.
func TestNotifyWakes(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			t.Parallel()
			db, url := dbtest.NewWithURL(t)
			s := listening(t, db, url, shared, time.Hour)
			waitFor(t, "listener connected", s.Listening)
			// The writing replica: no LISTEN connection, and it never polls
			// within the test.
			w := watch.New(db, watch.Config{Retention: -1, PollInterval: time.Hour, Logger: discard()})
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			w.Start(ctx)
			t.Cleanup(w.Close)
			u := dbtest.NewTenant(t, db, "")
			head := awaitHead(t, s, watch.Scope{TenantID: u.ID})
			id := insertEvent(t, db, u.ID, "https://example.com/n/r")
			w.Written()
			// The poll interval is an hour: only the notification can deliver it.
			if got := awaitEvents(t, s, watch.Scope{TenantID: u.ID}, head, 1); !slices.Equal(got, []int64{id}) {
				t.Fatalf("got %v, want [%d]", got, id)
			}
		})
	}
}

// TestWrittenCoalescesNotifications: a burst of Written calls sends one
// NOTIFY per Config.Coalesce, not one per call (each NOTIFY is a commit of
// its own on the server), and at least one: the other replicas do hear of
// the burst.
func TestWrittenCoalescesNotifications(t *testing.T) {
	t.Parallel()
	db, url := dbtest.NewWithURL(t)
	l := pq.NewListener(url, 50*time.Millisecond, time.Second, nil)
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Listen(watch.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	w := watch.New(db, watch.Config{Retention: -1, PollInterval: time.Hour, Coalesce: time.Second, Logger: discard()})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.Start(ctx)
	t.Cleanup(w.Close)
	// 100 calls, 5 ms apart (each one after the previous NOTIFY had time
	// to go out): within one coalescing interval.
	const calls = 100
	for range calls {
		w.Written()
		time.Sleep(5 * time.Millisecond)
	}
	got := 0
	timeout := time.After(3 * time.Second)
	for done := false; !done; {
		select {
		case n := <-l.NotificationChannel():
			if n != nil {
				got++
			}
		case <-timeout:
			done = true
		}
	}
	// The first call's NOTIFY, one more at the end of each interval the
	// burst spans (one or two; a few on a machine slow enough to stretch
	// the sleeps), and nothing after it. Without the coalescing it is one
	// per call.
	if got < 1 || got > calls/10 {
		t.Fatalf("%d notifications for %d calls of Written, want from 1 to %d", got, calls, calls/10)
	}
}

// TestWrittenWakesItsOwnProcess: Written wakes the process's own loop at
// once, with no LISTEN connection and no poll within the test.
func TestWrittenWakesItsOwnProcess(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	s := polling(t, db, time.Hour)
	u := dbtest.NewTenant(t, db, "")
	head := awaitHead(t, s, watch.Scope{TenantID: u.ID})
	id := insertEvent(t, db, u.ID, "https://example.com/w/r")
	s.Written()
	if got := awaitEvents(t, s, watch.Scope{TenantID: u.ID}, head, 1); !slices.Equal(got, []int64{id}) {
		t.Fatalf("got %v, want [%d]", got, id)
	}
}

// TestWrittenWithoutWatchersSkipsTheRead: with nobody waiting on Changed,
// Written does not make the loop read (a replica without watchers pays no
// read per write); the buffer is marked stale, so a reader still gets the
// new event (from the database), and the next Changed makes the loop read.
func TestWrittenWithoutWatchersSkipsTheRead(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	s := polling(t, db, time.Hour)
	waitFor(t, "first read", func() bool { r, _ := s.LoopState(); return r >= 1 })
	u := dbtest.NewTenant(t, db, "")
	sc := watch.Scope{TenantID: u.ID}
	head := awaitHead(t, s, sc)
	r0, _ := s.LoopState()
	id := insertEvent(t, db, u.ID, "https://example.com/s/r")
	s.Written()
	waitFor(t, "the wake-up skipped", func() bool { _, stale := s.LoopState(); return stale })
	if r, _ := s.LoopState(); r != r0 {
		t.Fatalf("the loop read %d times with nobody waiting", r-r0)
	}
	// drain reads again while the horizon trails another test's
	// transaction; every read goes to the database (the buffer is stale).
	if got, _ := drain(t, s, sc, head, 10, 1); !slices.Equal(got, []int64{id}) {
		t.Fatalf("read with a stale buffer: %v, want [%d]", got, id)
	}
	_ = s.Changed()
	waitFor(t, "a read after Changed", func() bool { r, stale := s.LoopState(); return r > r0 && !stale })
}

// TestBackstopReadsEventsWrittenOutside: an event written outside the
// service (plain SQL: no Written, no NOTIFY) still reaches the watchers of
// a listening service, by the backstop read every PollInterval.
func TestBackstopReadsEventsWrittenOutside(t *testing.T) {
	t.Parallel()
	db, url := dbtest.NewWithURL(t)
	s := listening(t, db, url, false, 50*time.Millisecond)
	waitFor(t, "listener connected", s.Listening)
	u := dbtest.NewTenant(t, db, "")
	head := awaitHead(t, s, watch.Scope{TenantID: u.ID})
	id := insertEvent(t, db, u.ID, "https://example.com/b/r")
	if got := awaitEvents(t, s, watch.Scope{TenantID: u.ID}, head, 1); !slices.Equal(got, []int64{id}) {
		t.Fatalf("got %v, want [%d]", got, id)
	}
}

// TestListenerLostFallsBackToPolling: the LISTEN session (the watch's
// channel alone, or shared with others) goes through the TCP proxy; the proxy resets it and
// refuses new connections. Events committed while it is down still reach
// the watchers (by polling), and after the proxy is restored the listener
// reconnects.
func TestListenerLostFallsBackToPolling(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			t.Parallel()
			db, direct := dbtest.NewWithURL(t)
			p, proxied := dbtest.NewProxy(t, direct)
			s := listening(t, db, proxied, shared, 50*time.Millisecond)
			waitFor(t, "listener connected", s.Listening)
			u := dbtest.NewTenant(t, db, "")
			head := awaitHead(t, s, watch.Admin)

			p.Refuse()
			p.Reset()
			waitFor(t, "listener lost", func() bool { return !s.Listening() })
			var want []int64
			for i := range 3 {
				want = append(want, insertEvent(t, db, u.ID, fmt.Sprintf("https://example.com/p/%d", i)))
			}
			if got := awaitEvents(t, s, watch.Admin, head, 3); !slices.Equal(got, want) {
				t.Fatalf("while the listener is down: %v, want %v", got, want)
			}
			if s.Listening() {
				t.Fatal("the listener reconnected through a refusing proxy")
			}
			p.Restore()
			waitFor(t, "listener reconnected", s.Listening)
		})
	}
}

func awaitHead(t testing.TB, s *watch.Service, sc watch.Scope) string {
	t.Helper()
	h, err := s.Head(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOtherDatabaseDoesNotHoldBack: a transaction with an xid that stays
// open in another database of the server does not hold back this
// database's events (a transaction of this database does:
// TestOutOfOrderCommit).
func TestOtherDatabaseDoesNotHoldBack(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	other := dbtest.New(t)
	s := newService(db)
	ctx := context.Background()
	u := dbtest.NewTenant(t, db, "")
	start, err := s.Head(ctx, watch.Admin)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := other.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_current_xact_id()`); err != nil { // takes an xid and holds it
		t.Fatal(err)
	}
	id := insertEvent(t, db, u.ID, "https://example.com/o/other")
	// Only this test's open transaction (and those of tests running beside
	// it) can hold the event back; drain waits out the others.
	got, _ := drain(t, s, watch.Admin, start, 10, 1)
	if !slices.Equal(got, []int64{id}) {
		t.Fatalf("got %v, want [%d] while another database's transaction is open", got, id)
	}
}

// TestBuffer: with a started service whose buffer holds 4 events, readers
// whose cursors are in the buffer and readers whose cursors are older
// (read from the database) get the same events; a tenant and the admin
// reading the same buffered events get cursors of their own, each valid
// only for its reader.
func TestBuffer(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	s := watch.New(db, watch.Config{Retention: -1, PollInterval: 20 * time.Millisecond, BufferSize: 4, Logger: discard()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	defer s.Close()
	u := dbtest.NewTenant(t, db, "")
	tenant := watch.Scope{TenantID: u.ID}
	waitFor(t, "the buffer's first read", func() bool { _, err := s.Head(ctx, watch.Admin); return err == nil })
	h0t, h0a := awaitHead(t, s, tenant), awaitHead(t, s, watch.Admin)
	var want []int64
	for i := range 10 {
		want = append(want, insertEvent(t, db, u.ID, fmt.Sprintf("https://example.com/b/%d", i)))
	}
	// Wait until the service has read them all (its head moved past them).
	got := awaitEvents(t, s, watch.Admin, h0a, 10)
	if !slices.Equal(got, want) {
		t.Fatalf("admin: %v, want %v", got, want)
	}
	// From before the buffer (the database) and from inside it (memory):
	// the same events, in pages of 3.
	for _, sc := range []watch.Scope{tenant, watch.Admin} {
		start := map[bool]string{true: h0t, false: h0a}[sc == tenant]
		got, _ := drain(t, s, sc, start, 3, 10)
		if !slices.Equal(got, want) {
			t.Fatalf("scope %+v from the head: %v, want %v", sc, got, want)
		}
	}
	// The 7th event's cursor, for each reader, read from before the buffer
	// (the database; a read may return fewer events while the horizon
	// trails other transactions: cursorOf waits).
	tail, err := s.Read(ctx, tenant, cursorOf(t, s, tenant, h0t, 6), nil, 10) // inside the buffer
	if err != nil || !slices.Equal(ids(tail.Events), want[7:]) {
		t.Fatalf("from the 7th event: %v %v, want %v", ids(tail.Events), err, want[7:])
	}
	adm, err := s.Read(ctx, watch.Admin, cursorOf(t, s, watch.Admin, h0a, 6), nil, 10)
	if err != nil || !slices.Equal(ids(adm.Events), want[7:]) {
		t.Fatalf("admin from the 7th event: %v %v", ids(adm.Events), err)
	}
	if adm.Events[0].Cursor == tail.Events[0].Cursor {
		t.Fatal("the admin and the tenant got the same cursor for one event")
	}
	if _, err := s.Read(ctx, tenant, adm.Events[0].Cursor, nil, 10); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("the admin's cursor for the tenant: %v, want invalid_argument", err)
	}
}

// cursorOf returns the cursor of the n-th event (0-based) after start.
func cursorOf(t testing.TB, s *watch.Service, sc watch.Scope, start string, n int) string {
	t.Helper()
	var got []watch.Event
	deadline := time.Now().Add(30 * time.Second)
	for cursor := start; len(got) <= n; {
		p, err := s.Read(context.Background(), sc, cursor, nil, n+1-len(got))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Events...)
		cursor = p.Cursor
		if len(p.Events) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d events of %d after 30s", len(got), n+1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return got[n].Cursor
}

// TestHeldReadsWithoutWatchersStop: with a transaction in flight, a read is
// held (events past the horizon wait), and the loop used to retry it every
// 10-250 ms, and to read every PollInterval, with no watcher on the
// replica: under bench-http's steady acquires that was 8% of the binary's
// CPU. Nobody waiting, no read: not the retry, not the backstop. Head and
// Read still answer from the database, and the first Changed after the
// pause reads again, starting over at the horizon.
func TestHeldReadsWithoutWatchersStop(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	const poll = 20 * time.Millisecond
	s := polling(t, db, poll)
	ctx := context.Background()
	waitFor(t, "first read", func() bool { r, _ := s.LoopState(); return r >= 1 })
	u := dbtest.NewTenant(t, db, "")
	sc := watch.Scope{TenantID: u.ID}
	head := awaitHead(t, s, sc)

	// A transaction in flight holds the horizon: an event committed after
	// it began is held back from every read until it ends.
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT txid_current()`); err != nil {
		t.Fatal(err)
	}
	id := insertEvent(t, db, u.ID, "https://example.com/held/r")
	s.Written()
	waitFor(t, "the loop to mark its buffer stale", func() bool { _, stale := s.LoopState(); return stale })
	r0, _ := s.LoopState()
	// Twenty poll intervals: the old loop read at least ten times here.
	time.Sleep(20 * poll)
	if r, _ := s.LoopState(); r != r0 {
		t.Fatalf("the loop read %d times with nobody waiting", r-r0)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// Head, with a stale buffer, comes from the database: past the event.
	now := awaitHead(t, s, sc)
	p, err := s.Read(ctx, sc, now, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 0 {
		t.Fatalf("read from a fresh Head: %v, want nothing", ids(p.Events))
	}
	// The old cursor still reads the event (from the database).
	if got := awaitEvents(t, s, sc, head, 1); !slices.Equal(got, []int64{id}) {
		t.Fatalf("read from the old cursor: %v, want [%d]", got, id)
	}
	// A watcher's Changed wakes the loop: it reads again, and a new event
	// reaches the watcher through it.
	// (Not "and no longer stale": once that read advanced the stream and
	// nobody waits again, the next poll interval marks it stale anew.)
	ch := s.Changed()
	waitFor(t, "a read after Changed", func() bool { r, _ := s.LoopState(); return r > r0 })
	id2 := insertEvent(t, db, u.ID, "https://example.com/held/r2")
	s.Written()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("Changed was not closed after a new event")
	}
	if got := awaitEvents(t, s, sc, now, 1); !slices.Equal(got, []int64{id2}) {
		t.Fatalf("read after the pause: %v, want [%d]", got, id2)
	}
}
