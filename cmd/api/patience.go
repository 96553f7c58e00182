package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// DefaultConnectTimeout is how long a command waits for an unreachable
// database by default (--connect-timeout, CONNECT_TIMEOUT): long enough
// for a restart or a failover, short enough for the next cron run.
const DefaultConnectTimeout = 30 * time.Second

// connectRetry is the backoff between attempts to reach the database:
// 250 ms doubling to 5 s, with jitter.
var connectRetry = database.RetryPolicy{MaxAttempts: 1 << 30, BaseDelay: 250 * time.Millisecond, MaxDelay: 5 * time.Second}

// patience is how a command waits for the database: every connection
// failure (refused, reset, 57P03 "starting up", 57P01 admin shutdown, ...)
// is retried with backoff until the deadline, and each wait is logged with
// what the command waits for. Any other error (bad password, unknown
// database) fails at once. timeout 0 is one attempt.
type patience struct {
	timeout time.Duration
	logger  *slog.Logger
}

// wait runs try until it succeeds, fails with an error that is not a
// connection error, or the timeout has passed since its first failure
// (then the last error): a long collection cut near its end still waits
// the whole timeout for the database.
func (p patience) wait(ctx context.Context, what string, try func(ctx context.Context) error) error {
	var start, deadline time.Time
	for attempt := 1; ; attempt++ {
		err := try(ctx)
		if err == nil {
			if attempt > 1 && p.logger != nil {
				p.logger.Info("the database is back", "waiting_for", what, "attempts", attempt, "waited_ms", time.Since(start).Milliseconds())
			}
			return nil
		}
		if !retryableOutage(err) || ctx.Err() != nil {
			return err
		}
		if attempt == 1 {
			start = time.Now()
			deadline = start.Add(p.timeout)
		}
		delay := connectRetry.Delay(attempt)
		left := time.Until(deadline)
		if left <= 0 {
			if p.timeout > 0 && p.logger != nil {
				p.logger.Error("gave up waiting for the database", "waiting_for", what, "attempts", attempt,
					"connect_timeout", p.timeout.String(), "error", err.Error())
			}
			return err
		}
		delay = min(delay, left)
		if p.logger != nil {
			p.logger.Warn("waiting for the database", "waiting_for", what, "attempt", attempt,
				"retry_in_ms", delay.Milliseconds(), "gives_up_in_ms", left.Milliseconds(), "error", err.Error())
		}
		if err := database.SleepContext(ctx, delay); err != nil {
			return err
		}
	}
}

// retryableOutage reports an error that a wait for the database may cure:
// a connection failure, or the domain error it was mapped to (unavailable).
func retryableOutage(err error) bool {
	if database.IsConnectionError(err) {
		return true
	}
	var de *repolock.Error
	return errors.As(err, &de) && de.Code == repolock.EUnavailable
}

// ping is the check every command makes before it starts: a ping bounded
// by 10 s per attempt, retried as patience says.
func (p patience) ping(ctx context.Context, db *database.DB, what string) error {
	err := p.wait(ctx, what, func(ctx context.Context) error { return db.Ping(ctx, 10*time.Second) })
	if err != nil {
		return fmt.Errorf("database: ping: %w", err)
	}
	return nil
}
