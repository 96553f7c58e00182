// Package fleet counts the replicas of `api serve` that share one database,
// so that each can enforce its share of a limit meant for the whole fleet
// (the per-tenant rate limit: docs/operations.md, "Rate limit").
//
// Each replica announces itself with a heartbeat: a row of the table
// fleet_replicas (migration 000019) that it upserts every half heartbeat,
// in one autocommit statement that also counts the replicas whose row was
// written within the last 1.5 heartbeats, by the database's clock only (no
// clock skew between replicas). That count, the fleet size, is kept in an
// atomic that requests read: no request waits for the database.
//
// A replica that dies stops writing; every other replica stops counting it
// at its first count after the row is 1.5 heartbeats old, so within two
// heartbeats of its last write. A replica that stops cleanly deletes its
// row (Leave), and the others count it out at their next beat.
//
// When the heartbeat fails (the database is unreachable), the replica keeps
// the last fleet size it counted until its own view is 1.5 heartbeats old
// by its local clock (the time after which the others have stopped
// counting it), then answers 1: each replica falls back to the limits of a
// single process, never to refusing everything.
package fleet

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// DefaultHeartbeat is serve's FLEET_HEARTBEAT.
const DefaultHeartbeat = 2 * time.Second

// Config is a Membership's dependencies and settings.
type Config struct {
	// DB is the database the fleet shares (required).
	DB *database.DB
	// Heartbeat is the heartbeat period (required, positive): the replica
	// writes its row and counts the fleet every Heartbeat/2, and a row is
	// counted while it is younger than 1.5 × Heartbeat.
	Heartbeat time.Duration
	// Now is the local clock that ages this replica's own view of the
	// fleet (required; time.Now in serve).
	Now func() time.Time
	// Logger (required).
	Logger *slog.Logger
	// Registry, when not nil, gets repolock_fleet_replicas and
	// repolock_fleet_heartbeat_failures_total.
	Registry prometheus.Registerer
	// Host and PID are stored in the row for operators (optional).
	Host string
	PID  int
}

// Membership is one replica's membership of the fleet: its heartbeat and
// the fleet size it last counted. cmd/api builds one with New and runs it
// (Run) once the database is migrated.
type Membership struct {
	db        *database.DB
	heartbeat time.Duration
	now       func() time.Time
	logger    *slog.Logger
	id        uuid.UUID
	host      string
	pid       int

	// view is the last successful count; nil before the first.
	view     atomic.Pointer[view]
	failures atomic.Int64

	// leave serializes Leave and Beat so that a beat running at shutdown
	// cannot write the row back after Leave deleted it.
	mu   sync.Mutex
	left bool
}

type view struct {
	replicas int
	at       time.Time // local clock
}

// New returns the membership of this process, with a new random id.
func New(cfg Config) (*Membership, error) {
	switch {
	case cfg.DB == nil || cfg.Now == nil || cfg.Logger == nil:
		return nil, errors.New("fleet.New: a pool, a clock and a logger are required")
	case cfg.Heartbeat <= 0:
		return nil, errors.New("fleet.New: the heartbeat must be positive")
	}
	m := &Membership{db: cfg.DB, heartbeat: cfg.Heartbeat, now: cfg.Now, logger: cfg.Logger,
		id: uuid.New(), host: cfg.Host, pid: max(cfg.PID, 0)}
	if len(m.host) > 255 {
		m.host = m.host[:255]
	}
	if cfg.Registry != nil {
		err := errors.Join(
			cfg.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "repolock_fleet_replicas",
				Help: "Replicas of the fleet this replica counts (fresh heartbeats, itself included); the per-tenant rate limit is divided by it. 1 before the first heartbeat and when its view is stale (database unreachable): per-process limits.",
			}, func() float64 { return float64(m.Replicas()) })),
			cfg.Registry.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "repolock_fleet_heartbeat_failures_total",
				Help: "Heartbeats of this replica that failed (database unreachable or slower than a heartbeat).",
			}, func() float64 { return float64(m.failures.Load()) })),
		)
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ID is this replica's row id.
func (m *Membership) ID() uuid.UUID { return m.id }

// Window is how old a heartbeat row may be and still be counted: 1.5
// heartbeats. It is also how long this replica trusts its own last count.
func (m *Membership) Window() time.Duration { return m.heartbeat * 3 / 2 }

// Replicas is the fleet size: the replicas whose heartbeat is fresh, this
// one included, as last counted. It is 1 (this process alone) before the
// first successful heartbeat and once the last one is older than Window by
// the local clock. It never touches the database.
func (m *Membership) Replicas() int {
	v := m.view.Load()
	if v == nil || m.now().Sub(v.at) > m.Window() {
		return 1
	}
	return v.replicas
}

// fresh reports whether the last count is recent enough to be trusted.
func (m *Membership) fresh() bool {
	v := m.view.Load()
	return v != nil && m.now().Sub(v.at) <= m.Window()
}

// beatSQL writes this replica's row and counts the others whose row is
// fresh, in one autocommit statement (it works unchanged behind a
// transaction-pooling PgBouncer). The data-modifying CTEs run whether or
// not the query reads them, on the statement's snapshot: the count does
// not see this replica's own write, hence the 1 +. Rows stale for long
// (a replica that died) are deleted by the others; never this replica's
// own (a statement must not touch a row twice).
const beatSQL = `
WITH beat AS (
    INSERT INTO fleet_replicas (id, host, pid) VALUES ($1, $2, $3)
    ON CONFLICT (id) DO UPDATE SET seen_at = now(), host = EXCLUDED.host, pid = EXCLUDED.pid
    RETURNING id
), gone AS (
    DELETE FROM fleet_replicas
    WHERE id <> $1 AND seen_at < now() - make_interval(secs => $5::float8)
    RETURNING id
)
SELECT 1 + count(*) FROM fleet_replicas
WHERE id <> $1 AND seen_at > now() - make_interval(secs => $4::float8)`

// Beat is one heartbeat: it writes this replica's row and counts the
// fleet, within one heartbeat at most. After Leave it does nothing.
func (m *Membership) Beat(ctx context.Context) (err error) {
	defer repolock.WrapOp(&err, "fleet.Beat")
	ctx, cancel := context.WithTimeout(ctx, m.heartbeat)
	defer cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return nil
	}
	var n int
	forget := max(10*m.heartbeat, time.Minute)
	if err := m.db.GetContext(ctx, &n, beatSQL, m.id, m.host, m.pid, m.Window().Seconds(), forget.Seconds()); err != nil {
		m.failures.Add(1)
		return database.MapError(err)
	}
	m.view.Store(&view{replicas: n, at: m.now()})
	return nil
}

// Leave deletes this replica's row (a clean shutdown): the others count
// it out at their next beat. No beat writes it again afterwards.
func (m *Membership) Leave(ctx context.Context) (err error) {
	defer repolock.WrapOp(&err, "fleet.Leave")
	m.mu.Lock()
	defer m.mu.Unlock()
	m.left = true
	m.view.Store(nil)
	_, err = m.db.ExecContext(ctx, `DELETE FROM fleet_replicas WHERE id = $1`, m.id)
	return database.MapError(err)
}

// Run beats every half heartbeat until ctx ends, logging the fleet size
// when it changes and the heartbeat's failures and recovery (once each,
// not at every beat). It does not Leave: the caller does, on a clean
// shutdown.
func (m *Membership) Run(ctx context.Context) {
	var (
		last    = 0
		failing = false
		stale   = false
		t       = time.NewTimer(0)
	)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := m.Beat(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			failing = true
			m.logger.Warn("fleet: heartbeat failed; the rate limit keeps the last fleet size, then falls back to per-process limits",
				"replicas", m.Replicas(), "fallback_after", m.Window().String(), "error", err.Error())
		case err == nil && failing:
			failing, stale = false, false
			m.logger.Info("fleet: heartbeat recovered", "replicas", m.Replicas())
		}
		if failing && !stale && !m.fresh() {
			stale = true
			m.logger.Warn("fleet: membership stale; enforcing per-process rate limits until the heartbeat recovers")
		}
		if n := m.Replicas(); n != last {
			if err == nil {
				m.logger.Info("fleet size", "replicas", n, "heartbeat", m.heartbeat.String())
			}
			last = n
		}
		t.Reset(m.heartbeat / 2)
	}
}
