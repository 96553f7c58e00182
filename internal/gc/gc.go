// Package gc is the global garbage collection of ownership locks (design
// 002, "Global garbage collection"): it removes every RepositoryLockOwner
// that no Application and no Repository Credential references, in batches,
// without ever removing one that a concurrent request is about to reference.
// It also runs the repository Cleaner (internal/repostate) when one is wired,
// records every run in gc_runs and schedules runs for the server. (The SQL
// reporting views are served by internal/reports.)
//
// # Candidates
//
// A run does not walk the lock table. Every lock row carries gc_candidate
// (migration 000013), and the invariant is: every lock that nothing
// references has gc_candidate = true. A referenced lock may have it too (a
// false positive: the run visits it and clears it). A run scans only the
// candidates, through the partial index repositorylockowner_gc_candidate_idx,
// so its time grows with the garbage (plus the locks younger than the
// minimum age and the referenced candidates since the last run), not with
// the table. The invariant is kept on every path that can leave a lock
// unreferenced:
//
//   - Insert. A lock is inserted flagged (the column's default is true),
//     except by the statements that insert it together with its reference
//     (locks.NewLocksCTE, used by internal/apps' one-statement creates): the
//     bare acquire, Acquire's own insert and re-keying's insert flag it.
//   - A reference goes away: DELETE (the API, CLI, a cascade from an
//     application, a credential or a tenant, an operator's SQL), an UPDATE
//     of lock_id (moving an application to another URL, re-keying) or
//     TRUNCATE of a reference table. Statement-level triggers on both
//     reference tables flag the lock in the same transaction. They first
//     take FOR NO KEY UPDATE on every lock that lost a reference, whether
//     flagged already or not, then set the flag where it is missing, in a
//     new statement.
//   - Clearing. Only a run clears the flag (locks.ClearCandidates), on a
//     lock it holds a row lock on (FOR NO KEY UPDATE, or FOR UPDATE),
//     and only where a reference exists at that statement's fresh snapshot.
//
// Why no unreferenced lock can end up without the flag: a run clears the
// flag of lock L only while holding a row lock that conflicts with the
// trigger's FOR NO KEY UPDATE, and it takes its row locks with SKIP LOCKED.
// Take a transaction T that removes L's last reference; its trigger holds
// L's row lock from the end of the removing statement until T ends. Then
// one of these happened:
//
//   - T's trigger held L when the run tried to lock it: the run skipped L
//     and left its flag alone; T's trigger flagged L if it was not.
//   - T committed before the run locked L: the clearing statement, which
//     comes after the lock, sees T's removal, finds L unreferenced and
//     leaves the flag (which T set).
//   - The run locked L before T's trigger: the trigger waits for the run.
//     The clearing statement still sees T's reference (T has not
//     committed) and may clear the flag; when the run commits, the trigger
//     gets the row lock and its UPDATE, a new statement under READ
//     COMMITTED, sees the cleared flag and sets it again. (The run cannot
//     have deleted L instead: L was referenced at its delete's snapshot.)
//   - TRUNCATE of a reference table holds ACCESS EXCLUSIVE on it, which the
//     clearing statement needs to read it: either the truncation waits for
//     the run's transaction to end and then flags what is unreferenced, or
//     the clearing statement waits for the truncation to commit and sees
//     the table empty.
//
// Acquirers and foreign-key checks hold FOR KEY SHARE on the lock rows they
// are referencing, which conflicts with neither the trigger's FOR NO KEY
// UPDATE nor the run's clearing lock: creating a reference never waits for
// GC. A request removing a reference of a lock in the batch being cleared
// waits for that batch to commit (one batch's statements, milliseconds).
//
// A database whose flags are suspect (restored from a dump taken before
// migration 000013 was applied elsewhere, loaded with triggers disabled)
// is repaired by a full run (Options.Full, api gc --full), which also walks
// every lock the way runs did before the flag, flags the unreferenced ones
// it finds without it (Run.Flagged; 0 on a sound database) and collects
// them.
//
// # Safety
//
// A lock is collected only when it is older than a minimum age (default 1
// minute) and, at the time it is deleted, no reference row points at it.
// Each batch runs in its own READ COMMITTED transaction:
//
//  1. One statement finds the next BatchSize candidates past a keyset
//     cursor (no locks), with whether each is referenced, and locks the
//     unreferenced ones older than the minimum age with FOR UPDATE SKIP
//     LOCKED and the referenced ones with FOR NO KEY UPDATE SKIP LOCKED.
//     A request that is creating a reference holds a row lock on the lock
//     row (the foreign key check takes FOR KEY SHARE, and internal/locks
//     takes it explicitly when it re-acquires an existing lock), so such
//     rows are skipped for deletion: never waited on, never failed.
//  2. locks.DeleteUnreferenced (DELETE ... WHERE id = ANY(batch) AND
//     locks.UnreferencedSQL) runs with a fresh snapshot, after GC holds the row locks: it sees
//     every reference committed before the locks were taken, and no new
//     reference can be written while GC holds them (the writer waits, then
//     finds the lock gone and acquires a fresh one).
//  3. locks.ClearCandidates clears the flag of the locked locks that are
//     referenced at its own fresh snapshot (see Candidates).
//  4. The foreign keys (NO ACTION) stay the final guard: if the DELETE still
//     violates one, the batch is rolled back and retried lock by lock, and
//     only the locks that are really referenced are kept.
//
// Every collected lock gets a "collected" row in repository_lock_events in
// the same transaction that deletes it (written by internal/locks, the one
// home of lock events).
//
// # One run at a time
//
// A run first takes the "gc" lease in gc_leases (River-style leader
// election: INSERT ... ON CONFLICT DO UPDATE ... WHERE expires_at < now()),
// renews it while it works and deletes it when done. A run that cannot take
// the lease is skipped ("another collection is running"); that is not an
// error. A holder that dies loses the lease when it expires (LeaseTTL).
package gc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/repostate"
)

// Trigger says what started a run.
type Trigger string

// Triggers.
const (
	TriggerCLI      Trigger = "cli"      // api gc, api clean
	TriggerSchedule Trigger = "schedule" // the serve loop
	TriggerAPI      Trigger = "api"      // POST /v1/admin/gc
)

// Kind says what a run does.
type Kind string

// Kinds.
const (
	KindGC    Kind = "gc"    // lock GC, then the repository Cleaner when wired
	KindClean Kind = "clean" // the repository Cleaner alone
)

// Status is the outcome of a run.
type Status string

// Statuses. Skipped runs are reported to the caller but never recorded.
const (
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	// StatusAbandoned marks a recorded run whose process stopped without
	// finishing it (found by the next run to take the lease).
	StatusAbandoned Status = "abandoned"
	StatusSkipped   Status = "skipped"
)

// Reasons a run is skipped.
const (
	ReasonAnotherRunning = "another collection is running"
	ReasonRanRecently    = "a collection succeeded recently"
)

// Defaults and limits.
const (
	DefaultBatchSize = 1000
	MaxBatchSize     = 100000
	DefaultMinAge    = time.Minute
	DefaultLeaseTTL  = time.Minute
	// DryRunSampleLimit caps the candidates a dry run lists.
	DryRunSampleLimit = 100
	// LeaseName is the gc_leases row every run takes.
	LeaseName = "gc"
)

// Options are the parameters of one run. Start from DefaultOptions: the zero
// value is rejected (BatchSize 0) rather than silently running with a
// minimum age of 0.
type Options struct {
	Trigger Trigger
	// DryRun reports what would be collected and deletes nothing. The
	// repository Cleaner does not run in a dry run.
	DryRun bool
	// BatchSize is the number of locks examined and deleted per
	// transaction (1..MaxBatchSize).
	BatchSize int
	// MinAge protects young locks: only locks created more than MinAge ago
	// are collected (>= 0).
	MinAge time.Duration
	// Full also walks every lock, not only the candidates (gc_candidate):
	// the repair mode for a database whose flags are suspect (restored from
	// elsewhere, triggers disabled while loading). It flags every
	// unreferenced lock it finds without the flag (Run.Flagged) and collects
	// the old ones, then walks the candidates like any run. Its time grows
	// with the table. A full dry run counts what it would flag.
	Full bool
	// SkipIfRanWithin, when positive, skips the run when a collection (not a
	// dry run) succeeded that started within this window. The serve loop
	// sets it so that replicas share one collection per interval.
	SkipIfRanWithin time.Duration
}

// DefaultOptions returns the options of a default run started by t.
func DefaultOptions(t Trigger) Options {
	return Options{Trigger: t, BatchSize: DefaultBatchSize, MinAge: DefaultMinAge}
}

func (o Options) validate() error {
	switch o.Trigger {
	case TriggerCLI, TriggerSchedule, TriggerAPI:
	default:
		return repolock.Errorf(repolock.EInvalid, "trigger must be cli, schedule or api, got %q", o.Trigger)
	}
	if o.BatchSize < 1 || o.BatchSize > MaxBatchSize {
		return repolock.Errorf(repolock.EInvalid, "batch size must be from 1 to %d, got %d", MaxBatchSize, o.BatchSize)
	}
	if o.MinAge < 0 {
		return repolock.Errorf(repolock.EInvalid, "min age must not be negative, got %s", o.MinAge)
	}
	if o.SkipIfRanWithin < 0 {
		return repolock.Errorf(repolock.EInvalid, "skip-if-ran-within must not be negative, got %s", o.SkipIfRanWithin)
	}
	return nil
}

// Cleaner is the optional cleaning step of a run: in production the
// repostate Cleaner of deleted repository instances (design 000), whose
// result a run records as is.
type Cleaner interface {
	Run(ctx context.Context) (repostate.CleanerResult, error)
}

// Candidate is a lock a dry run would collect.
type Candidate struct {
	LockID           string    `json:"lock_id" db:"id"`
	GitRepositoryURL string    `json:"git_repository_url" db:"git_repository_url"`
	OwnerID          string    `json:"owner_id" db:"cluster_user_id"`
	OwnerName        string    `json:"owner_name" db:"owner_name"`
	CreatedAt        time.Time `json:"created_at" db:"created_at"`
}

// Run is one run: what Collect and Clean return, and a row of gc_runs.
type Run struct {
	// ID is empty for a skipped run, which is not recorded.
	ID      string  `json:"id,omitempty"`
	Kind    Kind    `json:"kind"`
	Trigger Trigger `json:"trigger"`
	Holder  string  `json:"holder,omitempty"`
	Status  Status  `json:"status"`
	// Reason says why a run was skipped.
	Reason string `json:"reason,omitempty"`
	DryRun bool   `json:"dry_run"`
	// Full is a repair run that also walked every lock (Options.Full).
	Full          bool    `json:"full"`
	MinAgeSeconds float64 `json:"min_age_seconds"`
	BatchSize     int     `json:"batch_size"`
	// Candidates counts the candidates (locks flagged gc_candidate) the
	// batches visited: unreferenced locks, old enough or not, and
	// referenced ones flagged since they lost a reference or were created
	// without one.
	Candidates int64 `json:"candidates"`
	// Scanned counts the unreferenced locks older than the minimum age that
	// the batches locked and examined; in a dry run, what would be
	// collected.
	Scanned int64 `json:"scanned"`
	// Deleted counts the locks collected (0 in a dry run).
	Deleted int64 `json:"deleted"`
	// Cleared counts the referenced candidates whose flag the run cleared
	// (0 in a dry run).
	Cleared int64 `json:"cleared"`
	// Flagged counts, in a full run, the unreferenced locks found without
	// the flag, which the run flagged (a full dry run: would flag). Not 0
	// means the flags were wrong.
	Flagged int64 `json:"flagged"`
	// Batches counts the batch transactions whose scan found locks
	// (candidates, or in a full run's first pass unreferenced locks).
	Batches int `json:"batches"`
	// WouldCollect lists the first DryRunSampleLimit candidates of a dry run.
	WouldCollect []Candidate `json:"would_collect,omitempty"`
	// Cleaner holds the repository Cleaner's figures when it ran.
	Cleaner         *repostate.CleanerResult `json:"cleaner,omitempty"`
	StartedAt       time.Time                `json:"started_at,omitzero"`
	FinishedAt      *time.Time               `json:"finished_at,omitempty"`
	DurationSeconds float64                  `json:"duration_seconds"`
	Error           string                   `json:"error,omitempty"`
}

// Config configures a Collector. Zero values select the defaults.
type Config struct {
	Logger  *slog.Logger
	Metrics *Metrics
	// Cleaner, when set, runs after the lock GC of every run that is not a
	// dry run, and alone in Clean.
	Cleaner Cleaner
	// LeaseTTL is how long the lease outlives a holder that stopped
	// renewing it (default 1 minute); it is renewed every LeaseTTL/3.
	LeaseTTL time.Duration
	// Holder names this process in gc_leases and gc_runs (default
	// host:pid:random).
	Holder string
	// Signals, when set, are notified of leases and finished runs (tests).
	Signals Signals
	// Retention bounds repository_lock_events and gc_runs; every run that
	// is not a dry run enforces it (defaults: DefaultEventRetention,
	// DefaultRunRetention, DefaultRunsKept).
	Retention Retention
}

// Collector runs collections. It is safe for concurrent use; concurrent runs
// (in this process or any other) are serialized by the lease: all but one
// are skipped.
type Collector struct {
	db        *database.DB
	locks     *locks.Service
	logger    *slog.Logger
	metrics   *Metrics
	cleaner   Cleaner
	leaseTTL  time.Duration
	holder    string
	signals   Signals
	retention Retention
}

// New returns a Collector on db that deletes locks through locks. Both are
// required: a missing one is a wiring error and panics at start-up.
func New(db *database.DB, locks *locks.Service, cfg Config) *Collector {
	if db == nil || locks == nil {
		panic("gc.New: a pool and the locks service are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Holder == "" {
		cfg.Holder = defaultHolder()
	}
	return &Collector{
		db:        db,
		locks:     locks,
		logger:    cfg.Logger,
		metrics:   cfg.Metrics,
		cleaner:   cfg.Cleaner,
		leaseTTL:  cfg.LeaseTTL,
		holder:    cfg.Holder,
		signals:   cfg.Signals,
		retention: cfg.Retention.withDefaults(),
	}
}

// Holder returns the name this Collector holds the lease under.
func (c *Collector) Holder() string { return c.holder }

// HasCleaner reports whether a repository Cleaner is wired.
func (c *Collector) HasCleaner() bool { return c.cleaner != nil }

func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 150 {
		host = host[:150]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Collect runs one collection: the lock GC, then the repository Cleaner when
// one is wired and this is not a dry run. When another run holds the lease
// (or, with SkipIfRanWithin, one succeeded recently) it returns a Run with
// status skipped and a nil error. On failure it returns the recorded Run
// (status failed) and the error; locks collected by the batches that
// committed before the failure stay collected.
func (c *Collector) Collect(ctx context.Context, opts Options) (_ Run, err error) {
	defer repolock.WrapOp(&err, "gc.Collector.Collect")
	if err := opts.validate(); err != nil {
		return Run{}, err
	}
	return c.run(ctx, KindGC, opts)
}

// Clean runs the repository Cleaner alone, under the same lease and recorded
// the same way (kind clean).
func (c *Collector) Clean(ctx context.Context, trigger Trigger) (_ Run, err error) {
	defer repolock.WrapOp(&err, "gc.Collector.Clean")
	if c.cleaner == nil {
		return Run{}, repolock.Errorf(repolock.EPrecondition, "no repository cleaner is configured")
	}
	opts := DefaultOptions(trigger)
	if err := opts.validate(); err != nil {
		return Run{}, err
	}
	return c.run(ctx, KindClean, opts)
}

// errLeaseLost cancels a run whose lease was taken over.
var errLeaseLost = errors.New("lost the gc lease to another process")

func (c *Collector) run(ctx context.Context, kind Kind, opts Options) (Run, error) {
	r, err := c.runOnce(ctx, kind, opts)
	if r.Status != "" {
		signal(c.signals.RunFinished, r)
	}
	return r, err
}

func (c *Collector) runOnce(ctx context.Context, kind Kind, opts Options) (Run, error) {
	r := Run{
		Kind:          kind,
		Trigger:       opts.Trigger,
		Holder:        c.holder,
		DryRun:        opts.DryRun,
		Full:          opts.Full,
		MinAgeSeconds: opts.MinAge.Seconds(),
		BatchSize:     opts.BatchSize,
	}
	log := c.logger.With("kind", kind, "trigger", opts.Trigger, "dry_run", opts.DryRun, "full", opts.Full)

	lease, ok, err := acquireLease(ctx, c.db, LeaseName, c.holder, c.leaseTTL)
	if err != nil {
		return c.failEarly(r, fmt.Errorf("gc: take the lease: %w", err))
	}
	if !ok {
		return c.skip(log, r, ReasonAnotherRunning), nil
	}
	defer lease.release(c.logger)
	signal(c.signals.LeaseAcquired, c.holder)

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopRenewing := lease.keepRenewed(runCtx, c.logger, func() { cancel(errLeaseLost) },
		func() { signal(c.signals.LeaseRenewed, time.Now()) })
	defer stopRenewing()

	if opts.SkipIfRanWithin > 0 {
		recent, err := succeededWithin(runCtx, c.db, kind, opts.SkipIfRanWithin)
		if err != nil {
			return c.failEarly(r, fmt.Errorf("gc: check recent runs: %w", runErr(runCtx, err)))
		}
		if recent {
			return c.skip(log, r, ReasonRanRecently), nil
		}
	}
	if n, err := abandonRuns(runCtx, c.db); err != nil {
		return c.failEarly(r, fmt.Errorf("gc: mark abandoned runs: %w", runErr(runCtx, err)))
	} else if n > 0 {
		log.Warn("gc: marked runs of stopped processes as abandoned", "runs", n)
	}
	if err := insertRun(runCtx, c.db, &r); err != nil {
		return c.failEarly(r, fmt.Errorf("gc: record the run: %w", runErr(runCtx, err)))
	}
	log = log.With("run_id", r.ID)
	log.Info("gc: run started", "min_age", opts.MinAge.String(), "batch_size", opts.BatchSize)

	err = c.steps(runCtx, kind, opts, &r, log)
	err = runErr(runCtx, err)
	r.Status = StatusSucceeded
	if err != nil {
		r.Status = StatusFailed
		r.Error = truncate(err.Error(), 2000)
	}
	// Record the outcome even when ctx is done (timeout, shutdown).
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer fcancel()
	if ferr := finishRun(fctx, c.db, &r); ferr != nil {
		log.Error("gc: record the outcome of the run", "error", ferr.Error())
		err = errors.Join(err, fmt.Errorf("gc: record the outcome: %w", ferr))
	}
	c.metrics.observeRun(r, r.DurationSeconds)

	attrs := []any{"status", r.Status, "candidates", r.Candidates, "scanned", r.Scanned, "deleted", r.Deleted,
		"cleared", r.Cleared, "flagged", r.Flagged, "batches", r.Batches, "duration_seconds", r.DurationSeconds}
	if r.Cleaner != nil {
		attrs = append(attrs, "cleaner_cleaned", r.Cleaner.Cleaned, "cleaner_failed", r.Cleaner.Failed)
	}
	if err != nil {
		log.Error("gc: run failed", append(attrs, "error", err.Error())...)
		return r, mapRunError(err)
	}
	log.Info("gc: run finished", attrs...)
	return r, nil
}

// failEarly reports a run that failed before it was recorded.
func (c *Collector) failEarly(r Run, err error) (Run, error) {
	r.Status = StatusFailed
	r.Error = truncate(err.Error(), 2000)
	c.logger.Error("gc: run failed before it started", "kind", r.Kind, "trigger", r.Trigger, "error", r.Error)
	c.metrics.observeRun(r, 0)
	return r, mapRunError(err)
}

func (c *Collector) skip(log *slog.Logger, r Run, reason string) Run {
	r.Status = StatusSkipped
	r.Reason = reason
	r.Holder = ""
	log.Info("gc: run skipped", "reason", reason)
	c.metrics.observeRun(r, 0)
	return r
}

// steps runs what a run of the given kind does.
func (c *Collector) steps(ctx context.Context, kind Kind, opts Options, r *Run, log *slog.Logger) error {
	if kind == KindGC {
		var err error
		if opts.DryRun {
			err = c.dryRun(ctx, opts, r)
		} else {
			err = c.collect(ctx, opts, r, log)
		}
		if err != nil {
			return err
		}
		if !opts.DryRun {
			if err := c.enforceRetention(ctx, opts.BatchSize, log); err != nil {
				return fmt.Errorf("retention: %w", err)
			}
			// The ownership report's deltas, into its totals (migration
			// 000023; api serve also folds every REPORTS_FOLD_INTERVAL).
			var folded int64
			if err := c.db.GetContext(ctx, &folded, foldOwnershipSQL); err != nil {
				return fmt.Errorf("ownership figures: %w", err)
			}
			log.Debug("gc: folded the ownership figures", "deltas", folded)
		}
	}
	if c.cleaner == nil || opts.DryRun {
		return nil
	}
	res, err := c.cleaner.Run(ctx)
	r.Cleaner = &res
	if err != nil {
		return fmt.Errorf("repository cleaner: %w", err)
	}
	c.metrics.observeCleaner(res)
	return nil
}

// foldOwnershipSQL moves the ownership report's deltas into its per-tenant
// totals (concurrently safe; internal/reports.Service.Fold runs the same).
const foldOwnershipSQL = `SELECT repolock_ownership_fold()`

// runErr replaces the error of a run that was cancelled because its lease
// was lost with that reason.
func runErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, errLeaseLost) {
		return cause
	}
	return err
}

// mapRunError turns a run's error into the domain vocabulary.
func mapRunError(err error) error {
	if errors.Is(err, errLeaseLost) {
		return repolock.Wrap(repolock.EConflict, err, "the collection stopped: another process took over the gc lease")
	}
	return database.MapError(err)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
