package tests

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
)

// watchUntil collects the events of seq until have says it has enough (the
// sequence ends with an error when its context does; the latency figure
// lives in make bench-watch).
func watchUntil(t *testing.T, seq func(func(client.Event, error) bool), have func([]client.Event) bool) []client.Event {
	t.Helper()
	var got []client.Event
	if have(got) {
		return got
	}
	for ev, err := range seq {
		if err != nil {
			t.Fatalf("watch: %v after %d events", err, len(got))
		}
		got = append(got, ev)
		if have(got) {
			break
		}
	}
	return got
}

func urls(events []client.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Kind + " " + e.NormalizedURL
	}
	return out
}

// TestWatchTwoReplicas: watchers on replica B see every event of their
// tenant committed through replica A (the NOTIFY reaches B's LISTEN
// connection) and none of another tenant's; a tenant with no events sees
// none; the admin sees all.
func TestWatchTwoReplicas(t *testing.T) {
	t.Parallel()
	a := startServerWith(t, serverOptions{Env: []string{"GC_INTERVAL=0", "RATE_LIMIT=0"}})
	b := startServerWith(t, serverOptions{DatabaseURL: a.DatabaseURL, Env: []string{"GC_INTERVAL=0", "RATE_LIMIT=0"}})
	ctx := t.Context()
	aliceTok, bobTok, carolTok := a.createTenant(t, "alice"), a.createTenant(t, "bob"), a.createTenant(t, "carol")
	aliceA, bobA := a.client(t, aliceTok), a.client(t, bobTok)
	heads := map[string]string{}
	for name, tok := range map[string]string{"alice": aliceTok, "bob": bobTok, "carol": carolTok, "admin": b.AdminToken} {
		p, err := b.client(t, tok).Events(ctx, client.WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		heads[name] = p.Cursor
	}
	aliceW := b.client(t, aliceTok).Watch(ctx, client.WatchOptions{After: heads["alice"]})

	// One event first, timed from its acquire's answer to its arrival on B.
	start := time.Now()
	if _, err := aliceA.AcquireLock(ctx, "https://github.com/acme/first"); err != nil {
		t.Fatal(err)
	}
	var next func() (client.Event, error, bool)
	next, stop := pull(aliceW)
	defer stop()
	ev, err, ok := next()
	if err != nil || !ok || ev.NormalizedURL != "github.com/acme/first" {
		t.Fatalf("first event on B: %+v %v %v", ev, err, ok)
	}
	t.Logf("acquire on A → event on B: %s", time.Since(start))

	var wantAlice, wantBob []string
	for i := range 10 {
		u := fmt.Sprintf("github.com/acme/r%d", i)
		if _, err := aliceA.AcquireLock(ctx, "https://"+u); err != nil {
			t.Fatal(err)
		}
		wantAlice = append(wantAlice, "acquired "+u)
		bu := fmt.Sprintf("github.com/bob/r%d", i)
		if _, err := bobA.AcquireLock(ctx, "https://"+bu); err != nil {
			t.Fatal(err)
		}
		wantBob = append(wantBob, "acquired "+bu)
	}
	if _, err := bobA.AcquireLock(ctx, "git@github.com:acme/r0.git"); !client.IsClaimed(err) {
		t.Fatalf("bob's claim of alice's repository: %v", err)
	}
	wantAlice = append(wantAlice, "denied github.com/acme/r0")
	wantBob = append(wantBob, "denied github.com/acme/r0")

	var gotAlice []client.Event
	for len(gotAlice) < len(wantAlice) {
		ev, err, ok := next()
		if err != nil || !ok {
			t.Fatalf("alice's watch: %v %v after %v", err, ok, urls(gotAlice))
		}
		gotAlice = append(gotAlice, ev)
	}
	if !slices.Equal(urls(gotAlice), wantAlice) {
		t.Fatalf("alice's watch on B: %v\nwant %v", urls(gotAlice), wantAlice)
	}
	gotBob := watchUntil(t, b.client(t, bobTok).Watch(ctx, client.WatchOptions{After: heads["bob"]}),
		func(e []client.Event) bool { return len(e) >= len(wantBob) })
	if !slices.Equal(urls(gotBob), wantBob) {
		t.Fatalf("bob's watch on B: %v\nwant %v", urls(gotBob), wantBob)
	}
	// Everything above is settled: carol's page from her head has nothing
	// (and the admin's has all 22).
	if p, err := b.client(t, carolTok).Events(ctx, client.WatchOptions{After: heads["carol"]}); err != nil || len(p.Events) != 0 {
		t.Fatalf("carol: %v %v; want no events", urls(p.Events), err)
	}
	all := watchUntil(t, b.admin(t).Watch(ctx, client.WatchOptions{After: heads["admin"]}),
		func(e []client.Event) bool { return len(e) >= 22 })
	if len(all) != 22 || all[0].NormalizedURL != "github.com/acme/first" || all[21].Kind != "denied" {
		t.Fatalf("admin: %v", urls(all))
	}
}

// pull turns a sequence into a next function.
func pull(seq func(func(client.Event, error) bool)) (func() (client.Event, error, bool), func()) {
	type item struct {
		ev  client.Event
		err error
	}
	ch := make(chan item)
	done := make(chan struct{})
	go func() {
		defer close(ch)
		for ev, err := range seq {
			select {
			case ch <- item{ev, err}:
			case <-done:
				return
			}
		}
	}()
	next := func() (client.Event, error, bool) {
		select {
		case it, ok := <-ch:
			return it.ev, it.err, ok
		case <-time.After(time.Minute):
			return client.Event{}, fmt.Errorf("no event within a minute"), false
		}
	}
	return next, func() { close(done) }
}

// kill ends s with SIGKILL (a crash, not a shutdown: a replica deletes
// nothing on its way out, its fleet heartbeat row included).
func (s *server) kill(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.err = nil // expected: the cleanup's stop must not report it
}

// TestWatchResumeAfterKill: a watcher on replica A gets part of a tenant's
// events, A is killed, and the watcher resumes on replica B from its last
// cursor: it gets every event exactly once, in the order of the stream.
func TestWatchResumeAfterKill(t *testing.T) {
	t.Parallel()
	a := startServerWith(t, serverOptions{Env: []string{"GC_INTERVAL=0", "RATE_LIMIT=0"}})
	b := startServerWith(t, serverOptions{DatabaseURL: a.DatabaseURL, Env: []string{"GC_INTERVAL=0", "RATE_LIMIT=0"}})
	ctx := t.Context()
	tok := a.createTenant(t, "alice")
	onB := b.client(t, tok)
	head, err := onB.Events(ctx, client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	acquire := func(i int) {
		u := fmt.Sprintf("github.com/acme/k%02d", i)
		if _, err := onB.AcquireLock(ctx, "https://"+u); err != nil {
			t.Fatal(err)
		}
		want = append(want, "acquired "+u)
	}
	for i := range 10 {
		acquire(i)
	}
	actx, cancelA := context.WithCancel(ctx)
	first := watchUntil(t, a.client(t, tok).Watch(actx, client.WatchOptions{After: head.Cursor, PageSize: 3}),
		func(e []client.Event) bool { return len(e) >= 5 })
	cancelA()
	a.kill(t)
	for i := 10; i < 20; i++ {
		acquire(i) // committed while the watcher has no replica
	}
	rest := watchUntil(t, onB.Watch(ctx, client.WatchOptions{After: first[len(first)-1].Cursor}),
		func(e []client.Event) bool { return len(first)+len(e) >= len(want) })
	got := append(urls(first), urls(rest)...)
	if !slices.Equal(got, want) {
		t.Fatalf("resumed watch: %v\nwant %v", got, want)
	}
}

// expiredCursor forges the admin's cursor of a read made age ago (the
// format of internal/pagetoken and internal/watch: opaque to clients, known
// to this test).
func expiredCursor(age time.Duration) string {
	sum := sha256.Sum256([]byte("events\x00admin"))
	c, _ := json.Marshal(map[string]any{"x": 1000, "i": 0, "t": time.Now().Add(-age).Unix()})
	env, _ := json.Marshal(map[string]any{"k": "events", "b": base64.RawURLEncoding.EncodeToString(sum[:12]), "c": json.RawMessage(c)})
	return base64.RawURLEncoding.EncodeToString(env)
}

// TestWatchCursorExpired: a cursor older than the event retention is 410
// cursor_expired, on the long poll and on the stream; one within it is not.
func TestWatchCursorExpired(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, serverOptions{Env: []string{"GC_INTERVAL=0", "EVENT_RETENTION=48h"}})
	ctx := t.Context()
	admin := s.admin(t)
	old := expiredCursor(49 * time.Hour)
	if _, err := admin.Events(ctx, client.WatchOptions{After: old}); !client.IsCursorExpired(err) {
		t.Fatalf("long poll: %v; want cursor_expired", err)
	}
	for _, err := range admin.Watch(ctx, client.WatchOptions{After: old}) {
		wantAPIError(t, "stream", err, http.StatusGone, client.CodeCursorExpired, "")
	}
	if _, err := admin.Events(ctx, client.WatchOptions{After: expiredCursor(47 * time.Hour)}); err != nil {
		t.Fatalf("a cursor within the retention: %v", err)
	}
}

// TestWatchSlowConsumer: an admin stream whose client never reads is
// disconnected once a write blocks for the write timeout; a tenant's
// watcher on the same replica keeps getting its events meanwhile.
func TestWatchSlowConsumer(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, serverOptions{Env: []string{"GC_INTERVAL=0", "RATE_LIMIT=0", "EVENTS_WRITE_TIMEOUT=1s"}})
	ctx := t.Context()
	tok := s.createTenant(t, "alice")
	alice := s.client(t, tok)
	head, err := alice.Events(ctx, client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next, stop := pull(alice.Watch(ctx, client.WatchOptions{After: head.Cursor}))
	defer stop()

	// The slow consumer: a raw connection with a small receive buffer that
	// reads the headers and then nothing.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/events?page_size=500 HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n", s.AdminToken)
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("slow stream: %q %v", status, err)
	}

	// Far more events than the socket buffers hold, written directly.
	db, err := sql.Open("postgres", s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_name, owner_user_name)
		SELECT 'collected', 'github.com/bulk/' || g || '/' || repeat('x', 200), NULL, 'nobody'
		FROM generate_series(1, 40000) g`); err != nil {
		t.Fatal(err)
	}
	s.waitForLog(t, "the slow stream disconnected", func(rec map[string]any) bool {
		m, _ := rec["msg"].(string)
		return strings.HasPrefix(m, "events stream: the client is gone or too slow")
	})
	// The other watcher is unaffected.
	if _, err := alice.AcquireLock(ctx, "https://github.com/acme/after"); err != nil {
		t.Fatal(err)
	}
	if ev, err, ok := next(); err != nil || !ok || ev.NormalizedURL != "github.com/acme/after" {
		t.Fatalf("alice's watcher: %+v %v %v", ev, err, ok)
	}
}

// TestWatchApplicationsAndCredentials: through the binary, a tenant's
// stream carries the creation and deletion of its Applications and
// Credentials, one event each, naming them (the create that made the
// lock and the delete that freed it as the lock's acquired and released
// events), and the kinds filter selects them; another tenant sees none.
func TestWatchApplicationsAndCredentials(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, serverOptions{Env: []string{"GC_INTERVAL=0"}})
	ctx := t.Context()
	aliceTok, bobTok := s.createTenant(t, "alice"), s.createTenant(t, "bob")
	alice, bob := s.client(t, aliceTok), s.client(t, bobTok)
	heads := map[*client.Client]string{}
	for _, c := range []*client.Client{alice, bob} {
		p, err := c.Events(ctx, client.WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		heads[c] = p.Cursor
	}
	a1, err := alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "a1", RepoURL: "https://github.com/acme/site"})
	if err != nil {
		t.Fatal(err)
	}
	c1, err := alice.CreateRepositoryCredential(ctx, client.CreateRepositoryCredentialRequest{Name: "c1", RepoURL: "git@github.com:acme/site.git", SecretRef: "k8s://ns/key"})
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.DeleteRepositoryCredential(ctx, c1.ID); err != nil {
		t.Fatal(err)
	}
	if err := alice.DeleteApplication(ctx, a1.ID); err != nil {
		t.Fatal(err)
	}
	read := func(c *client.Client, kinds []string, want int) []string {
		t.Helper()
		var got []string
		cursor := heads[c]
		wait := 5 * time.Second
		if want == 0 {
			wait = 0 // read once (after alice's reads: her events are final)
		}
		for {
			p, err := c.Events(ctx, client.WatchOptions{After: cursor, Kinds: kinds, Wait: wait})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range p.Events {
				got = append(got, strings.TrimSpace(e.Kind+" "+e.Application+e.ApplicationID+" "+e.Credential+e.CredentialID))
			}
			cursor = p.Cursor
			if len(got) >= want {
				return got
			}
		}
	}
	all := []string{
		"acquired a1" + a1.ID,
		"credential_created  c1" + c1.ID,
		"credential_deleted  c1" + c1.ID,
		"released a1" + a1.ID,
	}
	for _, tc := range []struct {
		c     *client.Client
		kinds []string
		want  []string
	}{
		{alice, nil, all},
		{alice, []string{"application_created", "credential_deleted"}, []string{all[0], all[2]}},
		{alice, []string{"released"}, []string{all[3]}},
		{bob, nil, nil},
	} {
		if got := read(tc.c, tc.kinds, len(tc.want)); !slices.Equal(got, tc.want) {
			t.Errorf("kinds %v: events\n%s\nwant\n%s", tc.kinds, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}
