package tests

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
)

// sessionCounts are the client sessions of dbName (but the caller's): all
// of them, and those of the LISTEN session. pg_stat_activity shows a
// session's last statement: the LISTEN session's is one of its LISTENs,
// or lib/pq's ping, an empty query, after its first ping.
func sessionCounts(t *testing.T, admin *sql.DB) (all, listen int) {
	t.Helper()
	if err := admin.QueryRow(`SELECT count(*), count(*) FILTER (WHERE query ILIKE 'LISTEN%' OR query = '')
		FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&all, &listen); err != nil {
		t.Fatal(err)
	}
	return all, listen
}

// TestOneListenSession: repolock serve holds one LISTEN session (issue
// 26), shared by the token cache, the watch and the waiting lease
// acquisitions, so that its Postgres sessions stay within the pool size
// + 1, with a watcher and a lease waiter active; the waiter is woken by
// the release's notification, the watcher by the watch's.
func TestOneListenSession(t *testing.T) {
	t.Parallel()
	const pool = 4
	s := startServerWith(t, serverOptions{Env: []string{"GC_INTERVAL=0", "RATE_LIMIT=0", "DB_MAX_OPEN_CONNS=4"}})
	admin, err := sql.Open("postgres", s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	admin.SetMaxOpenConns(1)
	ctx := t.Context()
	tok := s.createTenant(t, "listener")
	c := s.client(t, tok)

	// The LISTEN session connects in the background once serve started.
	deadline := time.Now().Add(30 * time.Second)
	for _, listen := sessionCounts(t, admin); listen == 0; _, listen = sessionCounts(t, admin) {
		if time.Now().After(deadline) {
			t.Fatal("no LISTEN session within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A lease held, and an acquisition waiting for it.
	held, err := c.AcquireLease(ctx, client.AcquireLeaseRequest{Key: "one/session", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   client.LeaseState
		err error
	}
	waited := make(chan result, 1)
	go func() {
		l, err := c.AcquireLease(ctx, client.AcquireLeaseRequest{Key: "one/session", TTL: time.Minute, Wait: 25 * time.Second})
		waited <- result{l, err}
	}()
	// A watcher, woken by an event.
	p, err := c.Events(ctx, client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	next, stop := pull(c.Watch(wctx, client.WatchOptions{After: p.Cursor}))
	defer stop()
	if _, err := c.AcquireLock(ctx, "https://github.com/acme/listen"); err != nil {
		t.Fatal(err)
	}
	if ev, err, ok := next(); err != nil || !ok || ev.NormalizedURL != "github.com/acme/listen" {
		t.Fatalf("the watcher's event: %+v %v %v", ev, err, ok)
	}

	all, listen := sessionCounts(t, admin)
	t.Logf("with a watcher and a lease waiter: %d sessions, %d LISTEN (pool %d)", all, listen, pool)
	if listen != 1 {
		t.Errorf("%d LISTEN sessions, want 1", listen)
	}
	if all > pool+1 {
		t.Errorf("%d sessions, want at most the pool size + 1 = %d", all, pool+1)
	}

	// The release wakes the waiter: its wait (25s) ends before the
	// holder's TTL (1m), so only the release can give it the lease.
	if err := c.ReleaseLease(ctx, held.LeaseID); err != nil {
		t.Fatal(err)
	}
	if r := <-waited; r.err != nil {
		t.Fatalf("the waiting acquisition: %v", r.err)
	}
	if _, listen := sessionCounts(t, admin); listen != 1 {
		t.Errorf("after the release: %d LISTEN sessions, want 1", listen)
	}
}
