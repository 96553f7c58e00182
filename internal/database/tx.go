package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryPolicy bounds Transact's retries of transactions that failed with a
// serialization failure (40001) or a deadlock (40P01).
type RetryPolicy struct {
	MaxAttempts int           // total attempts, including the first
	BaseDelay   time.Duration // delay before the second attempt
	MaxDelay    time.Duration // cap of the exponential backoff
}

// DefaultRetryPolicy retries up to 10 attempts with 5ms..500ms full-jitter
// backoff.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 10, BaseDelay: 5 * time.Millisecond, MaxDelay: 500 * time.Millisecond}

// TxOptions are the options of one transaction.
type TxOptions struct {
	Isolation sql.IsolationLevel // default: the server's (READ COMMITTED)
	ReadOnly  bool
}

// Transact runs fn inside a transaction. It commits when fn returns nil and
// rolls back otherwise. When the transaction fails with a serialization
// failure or a deadlock (at any statement or at commit) the whole of fn is run
// again, with capped, jittered exponential backoff, until the policy's attempts
// are used up or ctx is done. fn must therefore be safe to run more than once
// and must not have effects outside the transaction.
//
// A connection error before COMMIT (a broken pooled connection, a reset)
// leaves nothing applied: the server rolls back a transaction whose
// connection is gone. Transact then discards the pool's idle connections
// (they are most likely broken too) and runs fn once more on a fresh one.
// A connection lost while COMMIT is in flight is not retried: its error
// wraps ErrCommitOutcomeUnknown (503 "the outcome is unknown").
//
// The error returned is mapped with MapError.
func (db *DB) Transact(ctx context.Context, opts TxOptions, fn func(tx Tx) error) error {
	p := db.cfg.Retry
	if p.MaxAttempts < 1 {
		p.MaxAttempts = 1
	}
	var err error
	connRetried := false
	for attempt := 1; ; attempt++ {
		err = db.transactOnce(ctx, opts, fn)
		// (A serialization failure whose rollback then failed, e.g.
		// because ctx was cancelled, stays a serialization failure.)
		if err != nil && !IsRetryable(err) && IsConnectionError(err) {
			db.DiscardIdle()
			if !connRetried && !errors.Is(err, ErrCommitOutcomeUnknown) && ctx.Err() == nil {
				connRetried = true
				continue
			}
			break
		}
		if err == nil || !IsRetryable(err) || attempt >= p.MaxAttempts {
			break
		}
		if werr := SleepContext(ctx, p.Delay(attempt)); werr != nil {
			return MapError(fmt.Errorf("%w (after %d attempts, last error: %v)", werr, attempt, err))
		}
	}
	return MapError(err)
}

// WithTx is Transact with the default options.
func (db *DB) WithTx(ctx context.Context, fn func(tx Tx) error) error {
	return db.Transact(ctx, TxOptions{}, fn)
}

func (db *DB) transactOnce(ctx context.Context, opts TxOptions, fn func(tx Tx) error) (err error) {
	tx, err := db.x.BeginTxx(ctx, &sql.TxOptions{Isolation: opts.Isolation, ReadOnly: opts.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
		if err != nil {
			if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
				err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
			}
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
			// ctx ended before COMMIT was sent: database/sql rolled the
			// transaction back when it saw ctx end (Tx.awaitDone), so
			// nothing was applied. It is ctx's error (a timeout: 504; a
			// client gone: 499), not an internal one.
			return fmt.Errorf("commit: rolled back: %w", ctx.Err())
		}
		if IsConnectionError(err) {
			return fmt.Errorf("commit: %w: %w", ErrCommitOutcomeUnknown, err)
		}
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Delay returns the full-jitter backoff before retrying after the given
// (1-based) failed attempt: uniform in (0, min(BaseDelay*2^(attempt-1), MaxDelay)].
func (p RetryPolicy) Delay(attempt int) time.Duration {
	d := p.BaseDelay << min(attempt-1, 20)
	if d <= 0 || d > p.MaxDelay {
		d = p.MaxDelay
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// SleepContext waits for d, or until ctx is done (returning its error).
func SleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
