package fleet_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/fleet"
)

// clock is a local clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func member(t *testing.T, db *database.DB, heartbeat time.Duration, now func() time.Time, reg prometheus.Registerer) *fleet.Membership {
	t.Helper()
	m, err := fleet.New(fleet.Config{DB: db, Heartbeat: heartbeat, Now: now, Logger: discard, Registry: reg, Host: "test", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func beat(t *testing.T, m *fleet.Membership, want int) {
	t.Helper()
	if err := m.Beat(t.Context()); err != nil {
		t.Fatalf("beat: %v", err)
	}
	if got := m.Replicas(); got != want {
		t.Fatalf("after a beat: %d replicas, want %d", got, want)
	}
}

// age sets the database-clock age of m's heartbeat row.
func age(t *testing.T, db *database.DB, m *fleet.Membership, d time.Duration) {
	t.Helper()
	res, err := db.ExecContext(t.Context(), `UPDATE fleet_replicas SET seen_at = now() - make_interval(secs => $2::float8) WHERE id = $1`, m.ID(), d.Seconds())
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("aged %d rows, want 1", n)
	}
}

// The fleet is the replicas whose row is younger than 1.5 heartbeats by
// the database's clock: a row just inside the window counts, one just
// outside does not, and a replica that leaves is counted out at the
// next beat and never written back.
func TestMembershipCounts(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	const hb = time.Minute // rows are aged by hand, never by waiting
	c := newClock()
	m1, m2, m3 := member(t, db, hb, c.Now, nil), member(t, db, hb, c.Now, nil), member(t, db, hb, c.Now, nil)
	if got := m1.Replicas(); got != 1 {
		t.Fatalf("before any beat: %d replicas, want 1 (this process alone)", got)
	}
	beat(t, m1, 1)
	beat(t, m2, 2)
	beat(t, m3, 3)
	beat(t, m1, 3)
	if w := m1.Window(); w != 90*time.Second {
		t.Fatalf("window %v, want 1.5 heartbeats", w)
	}

	// m3 stops beating (it died): counted while its row is younger than
	// the window, not after.
	age(t, db, m3, m1.Window()-5*time.Second)
	beat(t, m1, 3)
	age(t, db, m3, m1.Window()+time.Second)
	beat(t, m1, 2)
	beat(t, m2, 2)
	// It comes back: counted again at once.
	beat(t, m3, 3)
	beat(t, m1, 3)

	// m2 leaves: its row is gone and stays gone.
	if err := m2.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := m2.Replicas(); got != 1 {
		t.Fatalf("after Leave: %d replicas, want 1", got)
	}
	if err := m2.Beat(t.Context()); err != nil {
		t.Fatal(err)
	}
	beat(t, m1, 2)
	var rows int
	if err := db.GetContext(t.Context(), &rows, `SELECT count(*) FROM fleet_replicas WHERE id = $1`, m2.ID()); err != nil || rows != 0 {
		t.Fatalf("m2's rows after Leave and a beat: %d (%v), want 0", rows, err)
	}

	// A row dead for long is deleted by the others' beats.
	age(t, db, m3, time.Hour)
	beat(t, m1, 1)
	if err := db.GetContext(t.Context(), &rows, `SELECT count(*) FROM fleet_replicas`); err != nil || rows != 1 {
		t.Fatalf("rows after a dead replica's row was forgotten: %d (%v), want 1", rows, err)
	}
}

// A replica trusts its last count for 1.5 heartbeats by its own clock; a
// heartbeat that fails (the database unreachable) keeps it that long, then
// the replica answers 1: per-process limits, never 0. The heartbeat
// recovers with the database.
func TestMembershipOutage(t *testing.T) {
	t.Parallel()
	db, direct := dbtest.NewWithURL(t)
	p, url := dbtest.NewProxy(t, direct)
	proxied, err := database.Open(t.Context(), url, database.PoolConfig{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()

	const hb = time.Minute
	c := newClock()
	reg := prometheus.NewRegistry()
	other := member(t, db, hb, c.Now, nil)
	m := member(t, proxied, hb, c.Now, reg)
	beat(t, other, 1)
	beat(t, m, 2)

	c.Advance(m.Window())
	if got := m.Replicas(); got != 2 {
		t.Fatalf("a count exactly one window old: %d replicas, want 2", got)
	}

	p.Refuse()
	err = m.Beat(t.Context())
	if !repolock.IsCode(err, repolock.EUnavailable) {
		t.Fatalf("beat with the database unreachable: %v, want unavailable", err)
	}
	if got := m.Replicas(); got != 2 {
		t.Fatalf("failed beat within the window: %d replicas, want the last count, 2", got)
	}
	c.Advance(time.Nanosecond)
	if got := m.Replicas(); got != 1 {
		t.Fatalf("stale view: %d replicas, want 1 (per-process limits)", got)
	}
	if got := gauge(t, reg, "repolock_fleet_replicas"); got != 1 {
		t.Fatalf("repolock_fleet_replicas = %v, want 1", got)
	}
	if got := gauge(t, reg, "repolock_fleet_heartbeat_failures_total"); got != 1 {
		t.Fatalf("repolock_fleet_heartbeat_failures_total = %v, want 1", got)
	}

	p.Restore()
	beat(t, m, 2)
	if got := gauge(t, reg, "repolock_fleet_replicas"); got != 2 {
		t.Fatalf("repolock_fleet_replicas = %v, want 2", got)
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// The loop, with a short heartbeat and the real clock: three replicas
// find each other; one that dies (its loop stops without leaving) is
// counted out by the others, one that leaves too.
func TestRunCountsOutADeadReplica(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	const hb = 200 * time.Millisecond
	type runner struct {
		m    *fleet.Membership
		stop context.CancelFunc
		done chan struct{}
	}
	var rs []*runner
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		r := &runner{m: member(t, db, hb, time.Now, nil), stop: cancel, done: make(chan struct{})}
		go func() { defer close(r.done); r.m.Run(ctx) }()
		rs = append(rs, r)
	}
	defer func() {
		for _, r := range rs {
			r.stop()
			<-r.done
		}
	}()
	waitFor := func(what string, want int, ms ...*fleet.Membership) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok := true
			for _, m := range ms {
				ok = ok && m.Replicas() == want
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				var got []int
				for _, m := range ms {
					got = append(got, m.Replicas())
				}
				t.Fatalf("%s: replicas %v, want all %d", what, got, want)
			}
			time.Sleep(hb / 10)
		}
	}
	waitFor("three replicas start", 3, rs[0].m, rs[1].m, rs[2].m)

	// The third dies: no Leave.
	rs[2].stop()
	<-rs[2].done
	waitFor("a replica died", 2, rs[0].m, rs[1].m)

	// The second stops cleanly.
	rs[1].stop()
	<-rs[1].done
	if err := rs[1].m.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor("a replica left", 1, rs[0].m)
	var rows []string
	if err := db.SelectContext(t.Context(), &rows, `SELECT id::text FROM fleet_replicas ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	want := []string{rs[0].m.ID().String(), rs[2].m.ID().String()}
	slices.Sort(want)
	if !slices.Equal(rows, want) {
		t.Fatalf("rows %v, want %v: the live replica's and the dead one's (forgotten only after a minute)", rows, want)
	}
}
