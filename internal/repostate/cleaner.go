package repostate

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/repostate/kv"
)

// CleanerConfig configures a Cleaner. Zero values select the defaults.
type CleanerConfig struct {
	// InitialTimeout: initial records older than this are declared failed
	// (default 2 minutes).
	InitialTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// BatchSize is the number of rows each partition-delete statement
	// removes (default 1000).
	BatchSize int
	// TenantExists, when set, lets the Cleaner retire every repository of a
	// tenant that was deleted (tenants are not tied to KV partitions by
	// foreign keys). cmd/api injects tenants.Exists. Partitions whose id is
	// not shaped like a tenant id (a UUID) are never judged.
	TenantExists func(ctx context.Context, tenantID string) (bool, error)
}

// CleanerResult counts what one Run did.
type CleanerResult struct {
	// Scanned: entries of the deleted-repositories partition examined.
	Scanned int `json:"scanned"`
	// Cleaned: entries whose partitions were all deleted, and the entry
	// with them.
	Cleaned int `json:"cleaned"`
	// Failed: entries (or records) that could not be processed; they are
	// retried on the next run.
	Failed int `json:"failed"`
	// StaleInitial: repositories left in the initial state longer than
	// the initial timeout, declared failed (and then cleaned) by this run.
	StaleInitial int `json:"stale_initial"`
	// RowsDeleted: rows of instance and staging partitions deleted.
	RowsDeleted int64 `json:"rows_deleted"`
}

// internal/gc records this type as is (gc_runs has one column per field:
// add a column when adding a field). Deletes that
// stopped in the deleting state and were completed by a run are logged
// ("completed_deletes") and their instances counted in Scanned/Cleaned.

// Cleaner removes what deleted and failed repository instances leave in the
// KV store. Each Run:
//
//  1. scans every tenant's repository records, declares initial records
//     older than the initial timeout failed, completes deletes that
//     stopped in the deleting state and (with CleanerConfig.TenantExists) retires every
//     repository of a tenant that no longer exists, all through the same
//     conditional delete flow as Service.Delete, so a newer instance is
//     never touched;
//  2. scans the deleted-repositories partition and, for each entry, deletes
//     every staging partition the instance's branches name, then the
//     instance partition, then the entry. A failure skips to the next entry;
//     the entry stays and is retried on the next run.
//
// Runs are idempotent and safe to run concurrently (from several replicas):
// every step is a conditional write or a delete of data nobody can reach.
type Cleaner struct {
	svc   *Service
	store kv.Store
	log   *slog.Logger
	batch int
	// tenantExists is CleanerConfig.TenantExists behind the UUID guard, or
	// nil.
	tenantExists func(ctx context.Context, tenantID string) (bool, error)
}

// NewCleaner returns a Cleaner on db's kv table.
func NewCleaner(db *database.DB, cfg CleanerConfig) *Cleaner {
	return NewStoreCleaner(kv.NewPostgres(db), cfg)
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// reasonTenantDeleted is recorded for instances retired with their tenant.
const reasonTenantDeleted = "tenant_deleted"

// NewStoreCleaner returns a Cleaner on any kv.Store.
func NewStoreCleaner(store kv.Store, cfg CleanerConfig) *Cleaner {
	svc := New(store, Config{InitialTimeout: cfg.InitialTimeout, Now: cfg.Now, Logger: cfg.Logger, DeleteBatch: cfg.BatchSize})
	c := &Cleaner{svc: svc, store: store, log: svc.log, batch: svc.cfg.DeleteBatch}
	if exists := cfg.TenantExists; exists != nil {
		c.tenantExists = func(ctx context.Context, tenantID string) (bool, error) {
			if !uuidRE.MatchString(tenantID) {
				return true, nil // not a tenant id: not ours to judge
			}
			return exists(ctx, tenantID)
		}
	}
	return c
}

// scanPage is the page size of the Cleaner's scans.
const scanPage = 100

// Run runs one pass. It returns an error only when it cannot scan (the
// store is unreachable, ctx is done); failures of single entries are
// counted in Failed and logged.
func (c *Cleaner) Run(ctx context.Context) (_ CleanerResult, err error) {
	defer repolock.WrapOp(&err, "repostate.Cleaner.Run")
	var res CleanerResult
	start := time.Now()
	completed, err := c.sweepRecords(ctx, &res)
	if err != nil {
		return res, err
	}
	if err := c.sweepDeleted(ctx, &res); err != nil {
		return res, err
	}
	c.log.InfoContext(ctx, "repostate: cleaner run finished",
		"scanned", res.Scanned, "cleaned", res.Cleaned, "failed", res.Failed,
		"stale_initial", res.StaleInitial, "completed_deletes", completed,
		"rows_deleted", res.RowsDeleted, "duration_ms", time.Since(start).Milliseconds())
	return res, nil
}

// sweepRecords retires stale initial records, completes stopped deletes
// and retires the repositories of deleted tenants; it returns how many
// deletes it completed (the last two kinds).
func (c *Cleaner) sweepRecords(ctx context.Context, res *CleanerResult) (completed int, err error) {
	for t, err := range c.store.Scan(ctx, []byte(tenantsPartition), nil, scanPage) {
		if err != nil {
			return completed, storeErr(err)
		}
		tenantID := string(t.Key)
		orphaned := false
		if c.tenantExists != nil {
			ok, err := c.tenantExists(ctx, tenantID)
			if err != nil {
				return completed, err
			}
			orphaned = !ok
		}
		failedBefore := res.Failed
		for e, err := range c.store.Scan(ctx, reposPartition(tenantID), []byte(repoPrefix), scanPage) {
			if err != nil {
				return completed, storeErr(err)
			}
			if !bytes.HasPrefix(e.Key, []byte(repoPrefix)) {
				break
			}
			var rec Repository
			if err := decode(e.Value, &rec, "repository record"); err != nil {
				res.Failed++
				c.log.ErrorContext(ctx, "repostate: cleaner: undecodable repository record", "tenant_id", tenantID, "key", string(e.Key), "error", err.Error())
				continue
			}
			var counter *int
			reason := reasonDeleted
			switch {
			case orphaned:
				counter, reason = &completed, reasonTenantDeleted
			case c.svc.stale(rec):
				counter, reason = &res.StaleInitial, reasonFailed
			case rec.State == StateDeleting:
				counter = &completed
			default:
				continue
			}
			err := c.svc.deleteInstance(ctx, tenantID, rec, e.Predicate, reason)
			switch {
			case err == nil:
				*counter++
			case repolock.IsCode(err, repolock.ENotFound):
				// Someone else finished it, or it was replaced.
			case ctx.Err() != nil:
				return completed, ctx.Err()
			default:
				res.Failed++
				c.log.WarnContext(ctx, "repostate: cleaner: could not retire a repository record",
					"tenant_id", tenantID, "repository", rec.Name, "instance_uid", rec.InstanceUID, "state", rec.State, "error", err.Error())
			}
		}
		if orphaned && res.Failed == failedBefore {
			// Every repository of the deleted tenant is retired: forget it.
			if err := c.store.Delete(ctx, []byte(tenantsPartition), t.Key); err != nil {
				res.Failed++
				c.log.WarnContext(ctx, "repostate: cleaner: could not forget a deleted tenant", "tenant_id", tenantID, "error", err.Error())
			} else {
				c.log.InfoContext(ctx, "repostate: cleaner: retired the repositories of a deleted tenant", "tenant_id", tenantID)
			}
		}
	}
	return completed, nil
}

func (c *Cleaner) sweepDeleted(ctx context.Context, res *CleanerResult) error {
	for e, err := range c.store.Scan(ctx, []byte(deletedPartition), nil, scanPage) {
		if err != nil {
			return storeErr(err)
		}
		res.Scanned++
		var entry deletedEntry
		if err := decode(e.Value, &entry, "deleted-repositories entry"); err != nil {
			res.Failed++
			c.log.ErrorContext(ctx, "repostate: cleaner: undecodable entry", "key", string(e.Key), "error", err.Error())
			continue
		}
		n, err := c.clean(ctx, e.Key, entry)
		res.RowsDeleted += n
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.Failed++
			c.log.WarnContext(ctx, "repostate: cleaner: entry not cleaned; will retry next run",
				"key", string(e.Key), "tenant_id", entry.TenantID, "repository", entry.Name, "instance_uid", entry.InstanceUID, "error", err.Error())
			continue
		}
		res.Cleaned++
		c.log.DebugContext(ctx, "repostate: cleaner: cleaned", "key", string(e.Key), "rows", n, "reason", entry.Reason)
	}
	return nil
}

// clean deletes the partitions an entry names, then the entry.
func (c *Cleaner) clean(ctx context.Context, key []byte, entry deletedEntry) (int64, error) {
	var partitions [][]byte
	switch entry.Kind {
	case kindStaging:
		for _, p := range entry.Partitions {
			partitions = append(partitions, []byte(p))
		}
	case kindInstance, "":
		pk := instancePartition(entry.TenantID, entry.Name, entry.InstanceUID)
		// Staging partitions first: they are found through the
		// branches, which die with the instance partition.
		for b, err := range c.store.Scan(ctx, pk, []byte(branchPrefix), scanPage) {
			if err != nil {
				return 0, err
			}
			if !bytes.HasPrefix(b.Key, []byte(branchPrefix)) {
				break
			}
			var br Branch
			if err := decode(b.Value, &br, "branch"); err != nil {
				return 0, err
			}
			for _, t := range append([]string{br.StagingToken}, br.SealedTokens...) {
				if t != "" {
					partitions = append(partitions, []byte(t))
				}
			}
		}
		partitions = append(partitions, pk)
	default:
		return 0, errors.New("unknown entry kind " + entry.Kind)
	}
	var total int64
	for _, pk := range partitions {
		n, err := c.store.DeletePartition(ctx, pk, c.batch)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, c.store.Delete(ctx, []byte(deletedPartition), key)
}
