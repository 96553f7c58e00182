// Package database is the one place that talks to database/sql: it opens the
// pool, runs transactions with serialization retries, applies the embedded
// migrations and maps Postgres errors onto the domain vocabulary.
package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // registers the "postgres" driver
	"github.com/prometheus/client_golang/prometheus"
)

// Querier is what query functions take: a *DB, a *sqlx.DB or a *sqlx.Tx.
// Functions written against it run alone or inside a caller's transaction.
type Querier interface {
	sqlx.ExtContext
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

// DB is the connection pool. Its settings are fixed when it is built
// (PoolConfig); it has no setters. Every method that runs a statement
// discards the pool's idle connections when the statement fails with a
// connection error (DiscardIdle), whoever called it.
type DB struct {
	x *sqlx.DB
	// cfg is the pool configuration with defaults applied.
	cfg PoolConfig
	// stmts caches prepared statements by query text (stmt.go).
	stmts sync.Map
	// flushes counts DiscardIdle calls (tests: export_test.go).
	flushes atomic.Int64
	// discard runs one DiscardIdle at a time (see there).
	discard sync.Mutex
	// batchers holds the pool's Batchers (batchStatser) by name
	// (batch.go), for their stats and metrics.
	batchers sync.Map
}

// PoolConfig is the pool's configuration. Zero values select the defaults.
//
// Size MaxOpenConns against Postgres max_connections across every process
// that connects (see docs/operations.md): replicas x MaxOpenConns, plus
// the listener connection of each replica, plus the CLI and operators,
// must stay below max_connections minus superuser_reserved_connections.
type PoolConfig struct {
	// MaxOpenConns caps the connections of the pool (default 20).
	MaxOpenConns int
	// MaxIdleConns is how many connections the pool keeps open when idle
	// (default: MaxOpenConns). Below MaxOpenConns, bursts of more
	// concurrent requests than idle connections close and reopen Postgres
	// sessions continuously (a fork, authentication and re-preparing every
	// statement each time).
	MaxIdleConns int
	// ConnMaxLifetime closes connections older than this (default 30m).
	ConnMaxLifetime time.Duration
	// ConnMaxIdleTime closes connections idle for longer (default 5m).
	ConnMaxIdleTime time.Duration
	// NoPreparedStatements turns the prepared-statement cache (stmt.go)
	// off: GetPrepared and SelectPrepared then run their query like
	// GetContext. Behind PgBouncer 1.18 in transaction pooling mode it
	// must be off: a statement prepared on one server connection does not
	// exist on the next one the pooler hands out (use the URL of
	// ForTransactionPooling too).
	NoPreparedStatements bool
	// Retry bounds Transact's retries of serialization failures and
	// deadlocks (default: DefaultRetryPolicy).
	Retry RetryPolicy
	// BatchStallAfter is the default BatchConfig.StallAfter of the pool's
	// Batchers (default: DefaultBatchStallAfter). Tests that hold a batch
	// in flight and queue calls behind it set it long.
	BatchStallAfter time.Duration
	// Metrics, when set, is where the pool registers its collectors: the
	// database/sql pool statistics (go_sql_*{db_name="repolock"}) and the
	// counts of its Batchers (repolock_db_batches_total,
	// repolock_db_batch_calls_total). New fails when they are already
	// registered there (a second pool on the same registry). Nil
	// registers nothing (the CLI, most tests).
	Metrics prometheus.Registerer
}

// DefaultMaxOpenConns is the pool size when none is configured.
const DefaultMaxOpenConns = 20

// WithDefaults returns cfg with every zero field set to its default.
func (cfg PoolConfig) WithDefaults() PoolConfig {
	if cfg.MaxOpenConns <= 0 {
		cfg.MaxOpenConns = DefaultMaxOpenConns
	}
	if cfg.MaxIdleConns <= 0 || cfg.MaxIdleConns > cfg.MaxOpenConns {
		cfg.MaxIdleConns = cfg.MaxOpenConns
	}
	if cfg.ConnMaxLifetime == 0 {
		cfg.ConnMaxLifetime = 30 * time.Minute
	}
	if cfg.ConnMaxIdleTime == 0 {
		cfg.ConnMaxIdleTime = 5 * time.Minute
	}
	if cfg.Retry == (RetryPolicy{}) {
		cfg.Retry = DefaultRetryPolicy
	}
	if cfg.BatchStallAfter <= 0 {
		cfg.BatchStallAfter = DefaultBatchStallAfter
	}
	return cfg
}

// New returns a pool on url (a postgres:// URL or a lib/pq key=value
// string) without connecting: the first connection is opened by the first
// query. `api serve` starts with it while the database may be down.
func New(url string, cfg PoolConfig) (*DB, error) {
	if url == "" {
		return nil, fmt.Errorf("database: no database URL given (set DATABASE_URL)")
	}
	dsn, err := ConnString(url)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	sdb, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("database: open: %w", err)
	}
	cfg = cfg.WithDefaults()
	sdb.SetMaxOpenConns(cfg.MaxOpenConns)
	sdb.SetMaxIdleConns(cfg.MaxIdleConns)
	sdb.SetConnMaxLifetime(cfg.ConnMaxLifetime)
	sdb.SetConnMaxIdleTime(cfg.ConnMaxIdleTime)
	db := &DB{x: sdb, cfg: cfg}
	if cfg.Metrics != nil {
		if err := db.registerMetrics(cfg.Metrics); err != nil {
			sdb.Close()
			return nil, err
		}
	}
	return db, nil
}

// Open is New followed by a ping (10 s timeout): for commands that need the
// database right away.
func Open(ctx context.Context, url string, cfg PoolConfig) (*DB, error) {
	db, err := New(url, cfg)
	if err != nil {
		return nil, err
	}
	if err := db.Ping(ctx, 10*time.Second); err != nil {
		db.Close()
		return nil, fmt.Errorf("database: ping: %w", err)
	}
	return db, nil
}

// Config returns the pool configuration in effect (defaults applied).
func (db *DB) Config() PoolConfig { return db.cfg }

// DiscardIdle closes every idle connection of the pool. The pool calls it
// itself when a statement fails with a connection error: after a database
// restart or a network cut every idle connection is broken too, and
// handing them out one by one would fail one request each. Connections in
// use are discarded by database/sql when they report driver.ErrBadConn.
//
// One discard runs at a time. database/sql's SetMaxIdleConns closes the
// connections it drops after unlocking the pool, reading them from a slice
// that shares its array with the pool's free list (Go 1.26). While the
// idle limit is 0 nothing is added to that list; but if a concurrent
// DiscardIdle restored the limit meanwhile, a connection returned to the
// pool was written into that array, closed by the first call while it sat
// in the free list, and handed out later with no driver connection: a nil
// dereference inside database/sql (make test-patroni's replica died of it
// during a failover, when every request saw connection errors at once).
// TestConcurrentDiscardIdle reproduces it without the lock.
func (db *DB) DiscardIdle() {
	db.discard.Lock()
	defer db.discard.Unlock()
	db.flushes.Add(1)
	db.x.SetMaxIdleConns(0)
	db.x.SetMaxIdleConns(db.cfg.MaxIdleConns)
}

// seen returns err after discarding the idle connections when it is a
// connection error.
func (db *DB) seen(err error) error {
	if IsConnectionError(err) {
		db.DiscardIdle()
	}
	return err
}

// Ping checks the database with the given timeout.
func (db *DB) Ping(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return db.PingContext(ctx)
}

// PingContext checks the database.
func (db *DB) PingContext(ctx context.Context) error { return db.seen(db.x.PingContext(ctx)) }

// Close closes the pool.
func (db *DB) Close() error { return db.x.Close() }

// Stats returns the pool's database/sql statistics.
func (db *DB) Stats() sql.DBStats { return db.x.Stats() }

// Conn returns a single connection of the pool, for a session-level state
// (an advisory lock, LISTEN, SET) that must hold across statements. Close
// returns it to the pool. Errors on it are the caller's: the pool sees only
// the error of getting it.
func (db *DB) Conn(ctx context.Context) (*sql.Conn, error) {
	c, err := db.x.Conn(ctx)
	return c, db.seen(err)
}

// BeginTxx begins a transaction the caller ends. Prefer Transact/WithTx,
// which retry and see the errors of the whole transaction: here the pool
// sees only the error of BEGIN.
func (db *DB) BeginTxx(ctx context.Context, opts *sql.TxOptions) (Tx, error) {
	tx, err := db.x.BeginTxx(ctx, opts)
	return tx, db.seen(err)
}

// The Querier methods. Errors of a result set that surface while the caller
// reads it (Rows.Err, Row.Scan after a successful start) are the caller's.

// DriverName returns the driver's name ("postgres").
func (db *DB) DriverName() string { return db.x.DriverName() }

// Rebind turns ? placeholders into the driver's ($1...).
func (db *DB) Rebind(query string) string { return db.x.Rebind(query) }

// BindNamed binds a query's :name parameters from arg.
func (db *DB) BindNamed(query string, arg any) (string, []any, error) {
	return db.x.BindNamed(query, arg)
}

// ExecContext runs a statement that returns no rows.
func (db *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r, err := db.x.ExecContext(ctx, query, args...)
	return r, db.seen(err)
}

// QueryContext runs a query that returns rows.
func (db *DB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r, err := db.x.QueryContext(ctx, query, args...)
	return r, db.seen(err)
}

// QueryxContext runs a query that returns rows, as sqlx.Rows.
func (db *DB) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	r, err := db.x.QueryxContext(ctx, query, args...)
	return r, db.seen(err)
}

// QueryRowxContext runs a query that returns at most one row.
func (db *DB) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	r := db.x.QueryRowxContext(ctx, query, args...)
	db.seen(r.Err())
	return r
}

// QueryRowContext runs a query that returns at most one row.
func (db *DB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r := db.x.QueryRowContext(ctx, query, args...)
	db.seen(r.Err())
	return r
}

// GetContext scans the query's one row into dest (sql.ErrNoRows when none).
func (db *DB) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	return db.seen(db.x.GetContext(ctx, dest, query, args...))
}

// SelectContext scans every row of the query into the slice dest.
func (db *DB) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	return db.seen(db.x.SelectContext(ctx, dest, query, args...))
}

var _ Querier = (*DB)(nil)

// Tx is the transaction type Transact passes to its function.
type Tx = *sqlx.Tx

// IsNoRows reports whether err is sql.ErrNoRows.
func IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
