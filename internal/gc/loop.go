package gc

import (
	"context"
	"math/rand/v2"
	"time"
)

// LoopConfig configures RunLoop.
type LoopConfig struct {
	// Interval is the mean time between runs. Required (> 0).
	Interval time.Duration
	// Jitter spreads each wait uniformly over Interval ± Jitter×Interval
	// (default 0.1), so replicas started together drift apart.
	Jitter float64
	// Options are the options of each run; Trigger is set to schedule.
	// DefaultLoopOptions gives the usual ones.
	Options Options
}

// DefaultLoopOptions returns the options of scheduled runs: the defaults,
// and skipping a run when another replica's run succeeded within half an
// interval, so that N replicas make about one collection per interval.
func DefaultLoopOptions(interval time.Duration) Options {
	o := DefaultOptions(TriggerSchedule)
	o.SkipIfRanWithin = interval / 2
	return o
}

// RunLoop runs a collection every Interval (with jitter) until ctx is done.
// The first run comes after a random delay in [0, Interval), so replicas
// that start together do not all try at once. A run in progress when ctx
// ends is interrupted (its committed batches stay) and recorded as failed.
// Failures are logged (and counted in the metrics); the loop goes on.
func (c *Collector) RunLoop(ctx context.Context, cfg LoopConfig) {
	if cfg.Interval <= 0 {
		return
	}
	if cfg.Jitter <= 0 || cfg.Jitter >= 1 {
		cfg.Jitter = 0.1
	}
	opts := cfg.Options
	opts.Trigger = TriggerSchedule
	if opts.BatchSize == 0 {
		opts = DefaultLoopOptions(cfg.Interval)
	}
	c.logger.Info("gc: scheduled collections", "interval", cfg.Interval.String(), "min_age", opts.MinAge.String(),
		"batch_size", opts.BatchSize, "holder", c.holder)
	wait := time.Duration(rand.Int64N(int64(cfg.Interval)))
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		// Collect logs its outcome and records it in the metrics.
		_, _ = c.Collect(ctx, opts)
		wait = jittered(cfg.Interval, cfg.Jitter)
	}
}

// jittered returns d scaled by a uniform factor in [1-j, 1+j].
func jittered(d time.Duration, j float64) time.Duration {
	f := 1 - j + 2*j*rand.Float64()
	return time.Duration(float64(d) * f)
}
