package database

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// Prepared returns the pool's prepared statement for query, preparing it the
// first time it is asked for.
//
// For hot statements. lib/pq sends a statement with arguments in two round
// trips (Parse and Describe, then Bind and Execute) and the server parses
// and plans it every time; a prepared statement runs in one round trip with
// a cached plan. database/sql prepares the statement lazily on each
// connection that runs it and keeps it there, so the cache holds one
// *sqlx.Stmt per query text for the life of the pool. Only use it with
// constant query texts.
func (db *DB) Prepared(ctx context.Context, query string) (*sqlx.Stmt, error) {
	if s, ok := db.stmts.Load(query); ok {
		return s.(*sqlx.Stmt), nil
	}
	s, err := db.x.PreparexContext(ctx, query)
	if err != nil {
		return nil, db.seen(err)
	}
	if prev, loaded := db.stmts.LoadOrStore(query, s); loaded {
		_ = s.Close()
		return prev.(*sqlx.Stmt), nil
	}
	return s, nil
}

// GetPrepared is GetContext through the pool's prepared statement for query,
// or a plain GetContext when the pool runs without prepared statements
// (PoolConfig.NoPreparedStatements, for a transaction-pooling PgBouncer).
func (db *DB) GetPrepared(ctx context.Context, dest any, query string, args ...any) error {
	if db.cfg.NoPreparedStatements {
		return db.GetContext(ctx, dest, query, args...)
	}
	s, err := db.Prepared(ctx, query)
	if err != nil {
		return err
	}
	return db.seen(s.GetContext(ctx, dest, args...))
}

// SelectPrepared is SelectContext through the pool's prepared statement for
// query (GetPrepared's rules).
func (db *DB) SelectPrepared(ctx context.Context, dest any, query string, args ...any) error {
	if db.cfg.NoPreparedStatements {
		return db.SelectContext(ctx, dest, query, args...)
	}
	s, err := db.Prepared(ctx, query)
	if err != nil {
		return err
	}
	return db.seen(s.SelectContext(ctx, dest, args...))
}
