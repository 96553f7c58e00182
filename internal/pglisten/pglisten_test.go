package pglisten_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/pglisten"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// recorder is a subscriber that records what it is told.
type recorder struct {
	mu       sync.Mutex
	payloads []string
	states   []bool
	changed  chan struct{} // closed and replaced at each callback
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) sub() pglisten.Subscriber {
	return pglisten.Subscriber{
		Notify: func(p string) { r.record(func() { r.payloads = append(r.payloads, p) }) },
		State:  func(up bool) { r.record(func() { r.states = append(r.states, up) }) },
	}
}

func (r *recorder) record(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
	close(r.changed)
	r.changed = make(chan struct{})
}

// await waits until cond holds on the recorder (checked at each callback).
func (r *recorder) await(t *testing.T, what string, cond func(payloads []string, states []bool) bool) {
	t.Helper()
	for {
		r.mu.Lock()
		ok := cond(r.payloads, r.states)
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-t.Context().Done():
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("waiting for %s: payloads %q, states %v", what, r.payloads, r.states)
		}
	}
}

func (r *recorder) get() ([]string, []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.payloads), slices.Clone(r.states)
}

func last(states []bool) (bool, bool) {
	if len(states) == 0 {
		return false, false
	}
	return states[len(states)-1], true
}

func isUp(_ []string, s []bool) bool   { v, ok := last(s); return ok && v }
func isDown(_ []string, s []bool) bool { v, ok := last(s); return ok && !v }

func notify(t *testing.T, db *database.DB, channel, payload string) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		t.Fatal(err)
	}
}

// listenSessions counts the sessions of db's database that LISTEN.
func listenSessions(t *testing.T, db *database.DB) int {
	t.Helper()
	var n int
	if err := db.GetContext(context.Background(), &n, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%'`); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFanOut: one session LISTENs on every subscribed channel; each
// notification reaches its channel's subscribers and no other; every
// subscriber is told the session is up once LISTEN took effect.
func TestFanOut(t *testing.T) {
	t.Parallel()
	db, url := dbtest.NewWithURL(t)
	l := pglisten.New(pglisten.Config{URL: url, Logger: discard()})
	a1, a2, b := newRecorder(), newRecorder(), newRecorder()
	l.Subscribe("chan_a", a1.sub())
	l.Subscribe("chan_a", a2.sub())
	l.Subscribe("chan_b", b.sub())
	if got := l.Channels(); !slices.Equal(got, []string{"chan_a", "chan_b"}) {
		t.Fatalf("channels %v", got)
	}
	l.Start()
	t.Cleanup(l.Close)
	<-l.Connected()
	if !l.Up() {
		t.Fatal("connected and not up")
	}
	for _, r := range []*recorder{a1, a2, b} {
		if _, states := r.get(); !slices.Equal(states, []bool{true}) {
			t.Fatalf("states at the first connection: %v, want [true]", states)
		}
	}
	if n := listenSessions(t, db); n != 1 {
		t.Fatalf("%d LISTEN sessions, want 1 for both channels", n)
	}
	// Delivered in commit order: once b has its payload, a's earlier one
	// was delivered too, and b got nothing of a's.
	notify(t, db, "chan_a", "x")
	notify(t, db, "chan_other", "nobody")
	notify(t, db, "chan_b", "y")
	b.await(t, "b's notification", func(p []string, _ []bool) bool { return len(p) > 0 })
	for name, want := range map[*recorder][]string{a1: {"x"}, a2: {"x"}, b: {"y"}} {
		if got, _ := name.get(); !slices.Equal(got, want) {
			t.Fatalf("payloads %q, want %q", got, want)
		}
	}
}

// TestStateOnLossAndReconnect: the session goes through the TCP proxy.
// When the proxy resets it and refuses new connections, every subscriber
// is told it is down; a notification sent meanwhile is lost; when the
// proxy is restored the session reconnects, re-LISTENs on every channel,
// and every subscriber is told it is up (resynchronize), after which
// notifications flow again, still over one session.
func TestStateOnLossAndReconnect(t *testing.T) {
	t.Parallel()
	db, direct := dbtest.NewWithURL(t)
	p, proxied := dbtest.NewProxy(t, direct)
	l := pglisten.New(pglisten.Config{URL: proxied, Logger: discard()})
	a, b := newRecorder(), newRecorder()
	l.Subscribe("chan_a", a.sub())
	l.Subscribe("chan_b", b.sub())
	l.Start()
	t.Cleanup(l.Close)
	<-l.Connected()

	p.Refuse()
	for _, r := range []*recorder{a, b} {
		r.await(t, "down", isDown)
	}
	if l.Up() {
		t.Fatal("down and Up")
	}
	notify(t, db, "chan_a", "lost")

	p.Restore()
	for _, r := range []*recorder{a, b} {
		r.await(t, "up again", isUp)
	}
	_, states := a.get()
	if states[0] != true || !slices.Contains(states, false) {
		t.Fatalf("states %v, want up, down, then up", states)
	}
	notify(t, db, "chan_a", "after")
	notify(t, db, "chan_b", "after")
	b.await(t, "b's notification after the reconnection", func(p []string, _ []bool) bool { return len(p) > 0 })
	if got, _ := a.get(); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("a's payloads %q, want [after]", got)
	}
	if n := listenSessions(t, db); n != 1 {
		t.Fatalf("%d LISTEN sessions after the reconnection, want 1", n)
	}
}

// TestStalledPingCountsAsDown: a session that stops answering without an
// error (the proxy holds Postgres's bytes back) is down once a ping goes
// unanswered for PingTimeout, and up again (resynchronize) when it
// answers.
func TestStalledPingCountsAsDown(t *testing.T) {
	t.Parallel()
	_, direct := dbtest.NewWithURL(t)
	p, proxied := dbtest.NewProxy(t, direct)
	l := pglisten.New(pglisten.Config{URL: proxied, Logger: discard(), PingInterval: 20 * time.Millisecond, PingTimeout: 100 * time.Millisecond})
	a := newRecorder()
	l.Subscribe("chan_a", a.sub())
	l.Start()
	t.Cleanup(l.Close)
	<-l.Connected()
	p.Hold()
	a.await(t, "down while the pings go unanswered", isDown)
	p.Release()
	a.await(t, "up once the ping answered", isUp)
}

// TestCloseWaits: Close stops the session and waits for the listener's
// goroutines: no callback runs once it returned, even with notifications
// arriving meanwhile; it returns too while the session cannot connect.
func TestCloseWaits(t *testing.T) {
	t.Parallel()
	db, url := dbtest.NewWithURL(t)
	l := pglisten.New(pglisten.Config{URL: url, Logger: discard()})
	var closed, late atomic.Bool
	var calls atomic.Int64
	l.Subscribe("chan_a", pglisten.Subscriber{
		Notify: func(string) {
			calls.Add(1)
			if closed.Load() {
				late.Store(true)
			}
		},
		State: func(bool) {
			if closed.Load() {
				late.Store(true)
			}
		},
	})
	l.Start()
	<-l.Connected()
	ctx, cancel := context.WithCancel(context.Background())
	sent := make(chan struct{})
	var sends atomic.Int64
	go func() {
		defer close(sent)
		for ctx.Err() == nil {
			if _, err := db.ExecContext(ctx, `SELECT pg_notify('chan_a', 'x')`); err == nil {
				sends.Add(1)
			}
		}
	}()
	for calls.Load() < 10 {
		time.Sleep(time.Millisecond)
	}
	l.Close()
	closed.Store(true)
	// More notifications after Close returned.
	for after := sends.Load() + 20; sends.Load() < after; {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-sent
	if late.Load() {
		t.Fatal("a callback ran after Close returned")
	}
	l.Close() // twice is fine

	// A session that never connects: Close returns.
	p, proxied := dbtest.NewProxy(t, url)
	p.Refuse()
	never := pglisten.New(pglisten.Config{URL: proxied, Logger: discard()})
	never.Subscribe("chan_a", newRecorder().sub())
	never.Start()
	never.Close()
	var none *pglisten.Listener
	none.Close()
}

// TestSubscribeAfterStartPanics: subscriptions are fixed at Start.
func TestSubscribeAfterStartPanics(t *testing.T) {
	t.Parallel()
	l := pglisten.New(pglisten.Config{URL: "postgres://127.0.0.1:1/none?sslmode=disable", Logger: discard()})
	l.Subscribe("chan_a", newRecorder().sub())
	l.Start()
	defer l.Close()
	defer func() {
		if recover() == nil {
			t.Fatal("Subscribe after Start did not panic")
		}
	}()
	l.Subscribe("chan_b", newRecorder().sub())
}
