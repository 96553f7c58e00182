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
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // registers the "postgres" driver
)

// Querier is what query functions take: a *DB, a *sqlx.DB or a *sqlx.Tx.
// Functions written against it run alone or inside a caller's transaction.
type Querier interface {
	sqlx.ExtContext
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

// DB is the connection pool.
type DB struct {
	*sqlx.DB
	// retry controls Transact's retries of serialization failures and
	// deadlocks.
	retry RetryPolicy
	// stmts caches prepared statements by query text (stmt.go).
	stmts sync.Map
	// unprepared turns the cache off (behind a transaction-pooling
	// PgBouncer, pooler.go).
	unprepared bool
}

// PoolConfig sets the pool's limits. Zero values select the defaults.
type PoolConfig struct {
	MaxOpenConns    int           // default 20
	MaxIdleConns    int           // default 10
	ConnMaxLifetime time.Duration // default 30m
	ConnMaxIdleTime time.Duration // default 5m
}

// Open opens a pool on url (a postgres:// URL or a lib/pq key=value string)
// and pings it.
func Open(ctx context.Context, url string, cfg PoolConfig) (*DB, error) {
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
	if cfg.MaxOpenConns == 0 {
		cfg.MaxOpenConns = 20
	}
	if cfg.MaxIdleConns == 0 {
		cfg.MaxIdleConns = 10
	}
	if cfg.ConnMaxLifetime == 0 {
		cfg.ConnMaxLifetime = 30 * time.Minute
	}
	if cfg.ConnMaxIdleTime == 0 {
		cfg.ConnMaxIdleTime = 5 * time.Minute
	}
	sdb.SetMaxOpenConns(cfg.MaxOpenConns)
	sdb.SetMaxIdleConns(cfg.MaxIdleConns)
	sdb.SetConnMaxLifetime(cfg.ConnMaxLifetime)
	sdb.SetConnMaxIdleTime(cfg.ConnMaxIdleTime)

	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sdb.PingContext(pingCtx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("database: ping: %w", err)
	}
	return &DB{DB: sdb, retry: DefaultRetryPolicy}, nil
}

// SetRetryPolicy replaces the policy Transact uses.
func (db *DB) SetRetryPolicy(p RetryPolicy) { db.retry = p }

// Ping checks the database with the given timeout.
func (db *DB) Ping(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return db.PingContext(ctx)
}

// Tx is the transaction type Transact passes to its function.
type Tx = *sqlx.Tx

// IsNoRows reports whether err is sql.ErrNoRows.
func IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
