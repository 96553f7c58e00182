package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/repostate"
)

// gcRunFlags are the parameters of a collection: repolock gc's --batch-size and
// --min-age, and serve's --gc-batch-size and --gc-min-age.
type gcRunFlags struct {
	batchSize int
	minAge    time.Duration
	ret       gc.Retention
}

func (g *gcRunFlags) register(fs *flagSet, prefix string) {
	fs.IntVar(&g.batchSize, prefix+"batch-size", fs.envInt("GC_BATCH_SIZE", gc.DefaultBatchSize),
		fmt.Sprintf("locks examined and deleted per transaction, 1..%d [GC_BATCH_SIZE]", gc.MaxBatchSize))
	fs.DurationVar(&g.minAge, prefix+"min-age", fs.envDuration("GC_MIN_AGE", gc.DefaultMinAge),
		"collect only locks older than this, so a lock acquired a moment ago keeps its reference [GC_MIN_AGE]")
	// Retention is enforced by every run that is not a dry run: the same
	// flag names in repolock gc and repolock serve.
	fs.DurationVar(&g.ret.Events, "event-retention", fs.envDuration("EVENT_RETENTION", gc.DefaultEventRetention),
		"delete lock events (repository_lock_events) this long after their last occurrence; at least 24h; negative is off (kept forever); 0 means the default [EVENT_RETENTION]")
	fs.DurationVar(&g.ret.Runs, "gc-run-retention", fs.envDuration("GC_RUN_RETENTION", gc.DefaultRunRetention),
		"delete finished GC runs older than this that are not among the newest --gc-runs-kept; at least 24h; negative is off (kept forever); 0 means the default [GC_RUN_RETENTION]")
	fs.IntVar(&g.ret.RunsKept, "gc-runs-kept", fs.envInt("GC_RUNS_KEPT", gc.DefaultRunsKept),
		"the newest GC runs kept whatever their age [GC_RUNS_KEPT]")
}

// retention returns the validated retention (a usage error otherwise).
func (g *gcRunFlags) retention() (gc.Retention, error) {
	if err := g.ret.Validate(); err != nil {
		return gc.Retention{}, &exitError{code: 2, err: err}
	}
	if g.ret.RunsKept < 1 {
		return gc.Retention{}, &exitError{code: 2, err: fmt.Errorf("--gc-runs-kept must be at least 1, got %d", g.ret.RunsKept)}
	}
	return g.ret, nil
}

func (g *gcRunFlags) options(t gc.Trigger) gc.Options {
	o := gc.DefaultOptions(t)
	o.BatchSize = g.batchSize
	o.MinAge = g.minAge
	return o
}

// metricsTextfile writes the CLI's private metrics registry for the
// node_exporter textfile collector.
type metricsTextfile struct{ path string }

func (m *metricsTextfile) register(fs *flagSet) {
	fs.StringVar(&m.path, "metrics-textfile", fs.envOr("GC_METRICS_TEXTFILE", ""),
		"after the run, write its metrics to this file in Prometheus text format (for node_exporter's textfile collector) [GC_METRICS_TEXTFILE]")
}

func (m *metricsTextfile) write(reg *prometheus.Registry, logger *slog.Logger) {
	if m.path == "" {
		return
	}
	if err := prometheus.WriteToTextfile(m.path, reg); err != nil {
		logger.Warn("gc: write the metrics textfile", "path", m.path, "error", err.Error())
	}
}

func runGC(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "gc", "",
		"Runs one global lock GC: deletes every ownership lock that no Application and no Credential\n"+
			"references and that is older than --min-age, in batches, then runs the repository Cleaner.\n"+
			"A run visits only the GC candidates (locks flagged when they lost a reference or were\n"+
			"created without one), so its time grows with the garbage, not with the table; --full\n"+
			"also walks every lock, to repair the flags of a database restored from elsewhere.\n"+
			"Prints the run as JSON on stdout. Exits 0 when the run succeeded or was skipped because\n"+
			"another collection is running (\"skipped: another collection is running\" on stderr),\n"+
			"1 when it failed, 2 on bad flags. For cron jobs and Kubernetes CronJobs.")
	var (
		common  commonFlags
		run     gcRunFlags
		metrics metricsTextfile
		dryRun  = fs.Bool("dry-run", false, "report what would be collected; delete nothing, skip the repository Cleaner")
		full    = fs.Bool("full", false, "repair: also walk every lock, flag the unreferenced ones found without the GC candidate flag (\"flagged\") and collect them; takes time proportional to the table (with --dry-run: count what it would flag)")
		timeout = fs.Duration("timeout", fs.envDuration("GC_TIMEOUT", 10*time.Minute),
			"give up after this long; batches committed before stay collected [GC_TIMEOUT]")
	)
	run.register(fs, "")
	metrics.register(fs)
	common.register(fs, usesPool)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(fs, pos); err != nil {
		return err
	}
	if *timeout <= 0 {
		return &exitError{code: 2, err: errors.New("--timeout must be positive")}
	}
	opts := run.options(gc.TriggerCLI)
	opts.DryRun = *dryRun
	opts.Full = *full
	ret, err := run.retention()
	if err != nil {
		return err
	}
	logger, db, err := common.connect(ctx, e)
	if err != nil {
		return err
	}
	defer db.Close()

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	reg := prometheus.NewRegistry()
	wait := common.db.patience()
	var svc *services
	if err := wait.wait(ctx, "the database, to load the keying rules", func(ctx context.Context) error {
		var err error
		svc, err = loadServices(ctx, db)
		return err
	}); err != nil {
		return err
	}
	c, err := newCollector(db, svc, logger, reg, ret)
	if err != nil {
		return err
	}
	// A collection cut by an outage (a failover, a restart) is run again
	// once the database answers, within --connect-timeout of the failure:
	// a run is idempotent, and one left holding the lease is skipped.
	var r gc.Run
	err = wait.wait(ctx, "the database, to run the collection again", func(ctx context.Context) error {
		var err error
		r, err = c.Collect(ctx, opts)
		return err
	})
	metrics.write(reg, logger)
	return reportRun(e, r, err)
}

// newCollector builds the process's one gc.Collector: metrics on reg, and
// the repostate Cleaner as its cleaning step, retiring the repositories of
// deleted tenants (tenants.Exists).
func newCollector(db *database.DB, svc *services, logger *slog.Logger, reg prometheus.Registerer, ret gc.Retention) (*gc.Collector, error) {
	m, err := gc.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	cleaner := repostate.NewCleaner(db, repostate.CleanerConfig{
		Logger: logger,
		TenantExists: func(ctx context.Context, id string) (bool, error) {
			return svc.tenants.Exists(ctx, id)
		},
	})
	return gc.New(db, svc.locks, gc.Config{Logger: logger, Metrics: m, Cleaner: cleaner, Retention: ret}), nil
}

// reportRun prints the run and turns its outcome into the exit status: 0
// for succeeded and skipped, 2 for invalid options, 1 otherwise.
func reportRun(e *env, r gc.Run, err error) error {
	if r.Status != "" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if encErr := enc.Encode(r); encErr != nil {
			return encErr
		}
	}
	if err != nil {
		if repolock.IsCode(err, repolock.EInvalid) {
			return &exitError{code: 2, err: errors.New(repolock.ErrorMessage(err))}
		}
		return &exitError{code: 1, err: err}
	}
	if r.Status == gc.StatusSkipped {
		fmt.Fprintf(e.stderr, "skipped: %s\n", r.Reason)
	}
	return nil
}

// gcLoopFlags configure serve's scheduled collections.
type gcLoopFlags struct {
	interval time.Duration
	run      gcRunFlags
}

func (g *gcLoopFlags) register(fs *flagSet) {
	fs.DurationVar(&g.interval, "gc-interval", fs.envDuration("GC_INTERVAL", 10*time.Minute),
		"run the global lock GC about this often (±10% jitter; replicas share the work through a lease); 0 is off (no scheduled collections) [GC_INTERVAL]")
	g.run.register(fs, "gc-")
}

// gcLoopConfig is serve's scheduled collections: Interval 0 is off.
type gcLoopConfig struct {
	Interval time.Duration
	Options  gc.Options
}

// config checks the flags of the scheduled collections.
func (g *gcLoopFlags) config() (gcLoopConfig, error) {
	if g.interval < 0 {
		return gcLoopConfig{}, fmt.Errorf("--gc-interval must not be negative")
	}
	if g.interval == 0 {
		return gcLoopConfig{}, nil
	}
	opts := gc.DefaultLoopOptions(g.interval)
	opts.BatchSize, opts.MinAge = g.run.batchSize, g.run.minAge
	if opts.BatchSize < 1 || opts.BatchSize > gc.MaxBatchSize || opts.MinAge < 0 {
		return gcLoopConfig{}, fmt.Errorf("--gc-batch-size must be 1..%d and --gc-min-age not negative", gc.MaxBatchSize)
	}
	return gcLoopConfig{Interval: g.interval, Options: opts}, nil
}

// startGCLoop starts the scheduled collections of serve on c, the process's
// one Collector (POST /v1/admin/gc uses it too), and returns the function
// that stops them (waiting for a run in progress to be recorded).
func startGCLoop(ctx context.Context, c *gc.Collector, cfg gcLoopConfig, logger *slog.Logger) (stop func()) {
	if cfg.Interval == 0 {
		logger.Info("gc: scheduled collections are disabled (GC_INTERVAL=0)")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.RunLoop(ctx, gc.LoopConfig{Interval: cfg.Interval, Options: cfg.Options})
	}()
	return func() { cancel(); wg.Wait() }
}
