// Package rekey re-keys stored locks when the normalization rules change
// (a new normalize.Version, or a change of the configured aliases), and
// stores those aliases (normalizer_aliases).
//
// Both kinds of change go through one set-based engine (move.go):
//
//   - A rules version change (Run, `api rekey`): a first pass reads the
//     stale locks (checkBatchSQL) in batches, in parallel ranges of ids,
//     with their references, and writes nothing: a lock whose references
//     all keep their key stays as it is. The others are planned across the
//     whole run (per new key, which tenants' locks move to it) and moved
//     by a second pass, one transaction per batch: reference rows and
//     locks FOR UPDATE (the order internal/apps takes them in), references
//     read again, then a rejected URL or a new key another tenant holds or
//     moves to leaves the lock where it is (rekey_conflicts), a lock whose
//     references all move to one free key gets it in place, and the rest
//     move reference by reference to their tenant's lock on each new key.
//     A complete run records its version as checked
//     (normalizer_state.checked_version): the stale locks are then only
//     those of open conflicts, for the next run and for the claims'
//     shadow keys (LoadKeying).
//   - An alias change (AddAlias, RemoveAlias): the same engine, in the
//     change's own transaction, on the locks of the alias's endpoint,
//     refused as a whole when any of them conflicts.
//
// Every change is made under the lock protocol of internal/locks, in
// transactions that database.Transact retries on deadlocks and
// serialization failures, so a run is safe while the API serves traffic and
// alongside GC. A run that stops half-way leaves every lock either re-keyed
// or untouched; the next run continues with the locks that are still stale.
// A second run finds nothing to move (conflicts stay open and are reported
// again, without new writes). Claims stay safe meanwhile: see the rules
// guard in internal/locks (Keying). Only one run (not dry) at a time: a session
// advisory lock.
package rekey

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// DefaultBatchSize and MaxBatchSize bound Options.BatchSize.
const (
	DefaultBatchSize = 5000
	MaxBatchSize     = 10000
)

// Options of a run.
type Options struct {
	// DryRun computes the report and writes nothing.
	DryRun bool
	// BatchSize is the number of stale locks moved per transaction
	// (default DefaultBatchSize).
	BatchSize int
	Logger    *slog.Logger
	// Progress, when set, is called after each batch with the report so
	// far (the CLI prints it); from several goroutines when Workers > 1,
	// one call at a time.
	Progress func(Report)
	// Workers is the number of transactions that check stale locks at
	// once, each on its own range of lock ids (default DefaultWorkers).
	Workers int
}

// DefaultWorkers is Options.Workers' default.
const DefaultWorkers = 2

// Report is the outcome of a run (the JSON of `api rekey` and POST
// /v1/admin/rekey).
type Report struct {
	DryRun            bool   `json:"dry_run"`
	NormalizerVersion int    `json:"normalizer_version"`
	NormalizerRules   string `json:"normalizer_rules"`
	// StaleLocks is the number of stale locks the run found.
	StaleLocks int `json:"stale_locks"`
	// Rekeyed: locks whose references all moved or kept their key (in a dry
	// run: would).
	Rekeyed int `json:"rekeyed_locks"`
	// MovedReferences: references that moved to another key.
	MovedReferences int `json:"moved_references"`
	// CreatedLocks, ReleasedLocks: locks created for moves, old locks
	// released because emptied.
	CreatedLocks  int `json:"created_locks"`
	ReleasedLocks int `json:"released_locks"`
	// Unreferenced: stale locks without references, left to the GC.
	Unreferenced int `json:"unreferenced_locks"`
	// Conflicts and Rejected: what stays stale, and why.
	Conflicts []Problem `json:"conflicts"`
	Rejected  []Problem `json:"rejected"`
	Batches   int       `json:"batches"`
}

// Problem is one reference that keeps its lock stale (a row of
// rekey_conflicts).
type Problem struct {
	Kind       string        `json:"kind"` // "conflict" or "rejected"
	LockID     string        `json:"lock_id"`
	OldKey     normalize.Key `json:"old_key"`
	TenantID   string        `json:"user_id"`
	TenantName string        `json:"user"`
	RefKind    string        `json:"ref_kind"` // "application" or "credential"
	RefID      string        `json:"ref_id"`
	RepoURL    string        `json:"repo_url"`
	NewKey     normalize.Key `json:"new_key,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	// conflict: the other tenant's lock and a URL that leads to it.
	OtherLockID   string        `json:"other_lock_id,omitempty"`
	OtherKey      normalize.Key `json:"other_key,omitempty"`
	OtherTenantID string        `json:"other_user_id,omitempty"`
	OtherTenant   string        `json:"other_user,omitempty"`
	OtherRepoURL  string        `json:"other_repo_url,omitempty"`
}

// ref is one Application or Credential referencing a stale lock.
type ref struct {
	Kind    string `db:"kind"`
	ID      string `db:"id"`
	RepoURL string `db:"repo_url"`
	LockID  string `db:"lock_id"`
}

// refsSQL returns the references of the locks $1, both kinds. It looks
// them up lock by lock (a lateral subquery: two index probes and a primary
// key probe each), whatever the size of the tables: as a plain join of
// thousands of lock ids, the planner hashed the whole applications table
// at 10M locks, and a run spent most of its time there.
const refsSQL = `
SELECT x.kind, x.id, x.repo_url, l.id AS lock_id
FROM unnest($1::uuid[]) AS l(id)
CROSS JOIN LATERAL (
	SELECT 'application' AS kind, a.id, a.repo_url
	FROM RepositoryLockApplication r JOIN applications a ON a.id = r.application_id
	WHERE r.lock_id = l.id
	UNION ALL
	SELECT 'credential', c.id, c.repo_url
	FROM RepositoryLockRepositoryCredential r JOIN repository_credentials c ON c.id = r.repository_credential_id
	WHERE r.lock_id = l.id
	OFFSET 0
) x
ORDER BY 1, 2`

// claim is a stale lock's reference re-keying to a new key (plan).
type claim struct {
	lock locks.Stale
	ref  ref
}

// advisoryKey is the session advisory lock a run (not dry) holds, so that
// runs do not overlap.
const advisoryKey = 7_261_004_617

// Service re-keys locks and manages the configured aliases. cmd/api builds
// one with New.
type Service struct {
	db      *database.DB
	locks   *locks.Service
	metrics *Metrics
	// next, set only by the package's tests (export_test.go), builds the
	// rules Run keys under, after the reload that follows its
	// registration, from the loaded ones (normalize.NextForTest): a run
	// under rules N+1. nil in production.
	next func(*normalize.Normalizer) *normalize.Normalizer
}

// New returns the service on db, moving locks through locks and counting
// them on metrics. All three are required: a missing one is a wiring error
// and panics at start-up.
func New(db *database.DB, locks *locks.Service, metrics *Metrics) *Service {
	if db == nil || locks == nil || metrics == nil {
		panic("rekey.New: a pool, the locks service and the metrics are required")
	}
	return &Service{db: db, locks: locks, metrics: metrics}
}

// Run re-keys every stale lock under the rules of k (LoadKeying: the
// stored aliases, this binary's rules version). A run that writes
// (not a dry run) first registers k's rules version (RegisterVersion): from
// then on no replica of an older version claims, so the locks it moves
// cannot be claimed again under their old keys.
func (s *Service) Run(ctx context.Context, k *locks.Keying, opts Options) (_ Report, err error) {
	db := s.db
	n := k.Current
	defer repolock.WrapOp(&err, "rekey.Run")
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.BatchSize < 1 || opts.BatchSize > MaxBatchSize {
		return Report{}, repolock.Errorf(repolock.EInvalid, "batch size must be from 1 to %d", MaxBatchSize)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Workers < 1 || opts.Workers > 16 {
		return Report{}, repolock.Errorf(repolock.EInvalid, "workers must be from 1 to 16")
	}
	if !opts.DryRun {
		conn, err := db.Conn(ctx)
		if err != nil {
			return Report{}, database.MapError(err)
		}
		defer conn.Close()
		var got bool
		if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, advisoryKey).Scan(&got); err != nil {
			return Report{}, database.MapError(err)
		}
		if !got {
			return Report{}, repolock.Errorf(repolock.EConflict, "another re-keying run is in progress")
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, advisoryKey) //nolint:errcheck // the session ends with the connection anyway
	}
	if !opts.DryRun {
		if err := RegisterVersion(ctx, db, n.Version()); err != nil {
			return Report{}, err
		}
		// The registration bumped the generation when it raised the
		// version: key under the rules as they are now.
		if k, err = loadKeying(ctx, db, s.next); err != nil {
			return Report{}, err
		}
		n = k.Current
	}
	var checked int
	if err := db.GetContext(ctx, &checked, `SELECT checked_version FROM normalizer_state`); err != nil {
		return Report{}, database.MapError(err)
	}
	r := &runner{db: db, locks: s.locks, keying: k, n: n, opts: opts, metrics: s.metrics, mover: newMover(s.locks, k, opts.DryRun, false),
		checkSQL: checkBatchSQL}
	if checked >= n.Version() {
		r.checkSQL = checkOpenSQL
	}
	r.report = Report{DryRun: opts.DryRun, NormalizerVersion: n.Version(), NormalizerRules: "",
		Conflicts: []Problem{}, Rejected: []Problem{}}
	if err := r.checkPass(ctx); err != nil {
		return r.report, err
	}
	r.mover.plan(r.deferred)
	if err := r.movePass(ctx); err != nil {
		return r.report, err
	}
	if !opts.DryRun {
		if err := r.resolve(ctx); err != nil {
			return r.report, err
		}
		if err := r.markChecked(ctx); err != nil {
			return r.report, err
		}
	}
	opts.Logger.Info("re-keying finished", "dry_run", opts.DryRun, "stale_locks", r.report.StaleLocks,
		"rekeyed_locks", r.report.Rekeyed, "moved_references", r.report.MovedReferences,
		"conflicts", len(r.report.Conflicts), "rejected", len(r.report.Rejected))
	return r.report, nil
}

type runner struct {
	metrics *Metrics
	db      *database.DB
	locks   *locks.Service
	keying  *locks.Keying
	n       *normalize.Normalizer
	opts    Options
	mover   *mover
	// checkSQL selects the stale locks of a range: checkBatchSQL, or
	// checkOpenSQL once a complete run checked them all.
	checkSQL string

	mu       sync.Mutex
	report   Report
	deferred []source  // locks whose references may move (checkPass)
	found    []Problem // problems recorded by this run (for resolve)
}

// checkBatchSQL reads the next stale locks of one id range: $1 the rules
// version, ids after $2 and before $3 (NULL: no bound), at most $4, in id
// order. It takes no row locks and the pass writes nothing: a lock whose
// references all keep their key is left as it is (see checked_version in
// migration 000017), so the first run after a version change reads every
// lock but rewrites only the ones that move. Reading without locks is
// safe: the only references written to a lock meanwhile are those of
// claims keyed under the run's rules (older replicas are refused by the
// guard from the registration on), and a claim joins only a lock on its
// own key (internal/locks), which is the reference's key under these rules.
const checkBatchSQL = `
SELECT o.id, o.git_repository_url, o.normalizer_version, o.normalizer_rules, o.cluster_user_id, u.name AS user_name
FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE o.normalizer_version < $1 AND o.id > $2::uuid AND ($3::uuid IS NULL OR o.id < $3::uuid)
ORDER BY o.id
LIMIT $4`

// checkOpenSQL is checkBatchSQL once a complete run has checked every lock
// under these rules (normalizer_state.checked_version): the stale locks are
// then those of the open conflicts and rejections only.
const checkOpenSQL = `
SELECT o.id, o.git_repository_url, o.normalizer_version, o.normalizer_rules, o.cluster_user_id, u.name AS user_name
FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE o.normalizer_version < $1 AND o.id > $2::uuid AND ($3::uuid IS NULL OR o.id < $3::uuid)
  AND o.id IN (SELECT c.lock_id FROM rekey_conflicts c WHERE c.resolved_at IS NULL)
ORDER BY o.id
LIMIT $4`

// checkPass is the first pass, over every stale lock: the locks whose
// references all keep their key under the new rules (nearly all of them
// after a version change) are marked current, one statement per batch;
// the others are noted for movePass, with their references (read here,
// without row locks) for the plan. Workers (Options.Workers) take
// disjoint ranges of the lock ids, each a batch per transaction.
func (r *runner) checkPass(ctx context.Context) error {
	workers := r.opts.Workers
	bounds := idRanges(workers)
	errc := make(chan error, workers)
	for w := range workers {
		go func() { errc <- r.checkRange(ctx, bounds[w], bounds[w+1]) }()
	}
	var first error
	for range workers {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// idRanges splits the uuid space into n ranges by their first byte:
// bounds[i] to bounds[i+1], the last one open ("").
func idRanges(n int) []string {
	out := make([]string, n+1)
	out[0] = "00000000-0000-0000-0000-000000000000"
	for i := 1; i < n; i++ {
		out[i] = fmt.Sprintf("%02x000000-0000-0000-0000-000000000000", i*256/n)
	}
	return out
}

func (r *runner) checkRange(ctx context.Context, lo, hi string) error {
	var upper any // NULL: no upper bound
	if hi != "" {
		upper = hi
	}
	after := lo
	if lo != "00000000-0000-0000-0000-000000000000" {
		// The range starts at lo itself: the uuid just before it.
		after = prevUUID(lo)
	}
	version := r.n.Version()
	for {
		var (
			srcs      []source
			unchanged int
		)
		err := r.db.WithTx(ctx, func(tx database.Tx) error {
			if err := r.locks.GuardRules(ctx, tx, r.keying.Generation); err != nil {
				return err
			}
			var ls []locks.Stale
			if err := tx.SelectContext(ctx, &ls, r.checkSQL, version, after, upper, r.opts.BatchSize); err != nil {
				return database.MapError(err)
			}
			var err error
			if srcs, err = withRefs(ctx, tx, ls); err != nil {
				return err
			}
			unchanged = 0
			for _, src := range srcs {
				if len(src.refs) > 0 && !r.mover.mayMove(src) {
					unchanged++
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(srcs) == 0 {
			return nil
		}
		after = srcs[len(srcs)-1].ID
		r.mu.Lock()
		r.report.Batches++
		r.report.StaleLocks += len(srcs)
		r.report.Rekeyed += unchanged
		for _, src := range srcs {
			switch {
			case len(src.refs) == 0:
				r.report.Unreferenced++
			case r.mover.mayMove(src):
				r.deferred = append(r.deferred, src)
			}
		}
		if r.opts.Progress != nil {
			r.opts.Progress(r.report) // one call at a time: under mu
		}
		r.mu.Unlock()
	}
}

// prevUUID is the uuid just before u (u is not the smallest).
func prevUUID(u string) string {
	b := []byte(u)
	for i := len(b) - 1; i >= 0; i-- {
		switch b[i] {
		case '-':
			continue
		case '0':
			b[i] = 'f'
			continue
		case 'a':
			b[i] = '9'
		default:
			b[i]--
		}
		break
	}
	return string(b)
}

// maxBatchAttempts bounds the re-planning of one batch (a new key taken by
// another tenant between the plan and the move).
const maxBatchAttempts = 4

// movePass moves the locks checkPass noted, one transaction per batch: it
// holds off rules changes and checks that the rules it keys under are
// still the stored ones (GuardRules), locks the batch's reference rows and
// locks, and applies the mover's decisions with a few statements.
func (r *runner) movePass(ctx context.Context) error {
	slices.SortFunc(r.deferred, func(a, b source) int { return strings.Compare(a.ID, b.ID) })
	for lo := 0; lo < len(r.deferred); lo += r.opts.BatchSize {
		batch := r.deferred[lo:min(lo+r.opts.BatchSize, len(r.deferred))]
		ids := make([]string, len(batch))
		for i, src := range batch {
			ids[i] = src.ID
		}
		var (
			c   counts
			err error
		)
		for range maxBatchAttempts {
			err = r.db.WithTx(ctx, func(tx database.Tx) error {
				if err := r.locks.GuardRules(ctx, tx, r.keying.Generation); err != nil {
					return err
				}
				srcs, err := r.mover.load(ctx, tx, lockSourcesSQL, pq.Array(ids), r.n.Version())
				if err != nil {
					return err
				}
				c, err = r.mover.apply(ctx, tx, srcs)
				if err == nil && r.opts.DryRun {
					return errDryRun
				}
				return err
			})
			if errors.Is(err, errDryRun) {
				err = nil
			}
			if !errors.Is(err, errReplan) && !isUniqueViolation(err) {
				break
			}
		}
		if err != nil {
			return err
		}
		r.report.Batches++
		r.report.Unreferenced += c.unreferenced
		r.report.Rekeyed += c.rekeyed
		r.report.MovedReferences += c.moved
		r.report.CreatedLocks += c.created
		r.report.ReleasedLocks += c.released
		for _, p := range c.problems {
			if p.Kind == "conflict" {
				r.report.Conflicts = append(r.report.Conflicts, p)
			} else {
				r.report.Rejected = append(r.report.Rejected, p)
			}
		}
		r.found = append(r.found, c.problems...)
		if !r.opts.DryRun && len(c.problems) > 0 {
			if err := r.record(ctx, c.problems); err != nil {
				return err
			}
		}
		if r.opts.Progress != nil {
			r.opts.Progress(r.report)
		}
		if !r.opts.DryRun {
			r.metrics.rekeyed.WithLabelValues("version").Add(float64(c.rekeyed))
		}
	}
	return nil
}

// errDryRun rolls a dry run's batch back.
var errDryRun = errors.New("rekey: dry run")

func isUniqueViolation(err error) bool {
	return database.PQCode(err) == database.CodeUniqueViolation
}

// lockRowsSQL takes the row locks internal/apps takes before changing a
// row's reference, in id order.
const lockRowsSQL = `
SELECT id FROM applications WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE`

const lockCredRowsSQL = `
SELECT id FROM repository_credentials WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE`

func lockRows(ctx context.Context, tx database.Tx, refs []ref, locked map[string]bool) error {
	var apps, creds []string
	for _, f := range refs {
		if locked[f.ID] {
			continue
		}
		locked[f.ID] = true
		if f.Kind == "application" {
			apps = append(apps, f.ID)
		} else {
			creds = append(creds, f.ID)
		}
	}
	var ids []string
	if len(apps) > 0 {
		if err := tx.SelectContext(ctx, &ids, lockRowsSQL, pq.Array(apps)); err != nil {
			return database.MapError(err)
		}
	}
	if len(creds) > 0 {
		if err := tx.SelectContext(ctx, &ids, lockCredRowsSQL, pq.Array(creds)); err != nil {
			return database.MapError(err)
		}
	}
	return nil
}

// moveRef points reference f at the lock lockID on key.
func moveRef(ctx context.Context, tx database.Tx, f ref, lockID string, key normalize.Key) error {
	q := `WITH row AS (UPDATE applications SET normalized_url = $3 WHERE id = $1)
		UPDATE RepositoryLockApplication SET lock_id = $2 WHERE application_id = $1`
	if f.Kind == "credential" {
		q = `WITH row AS (UPDATE repository_credentials SET normalized_url = $3 WHERE id = $1)
			UPDATE RepositoryLockRepositoryCredential SET lock_id = $2 WHERE repository_credential_id = $1`
	}
	_, err := tx.ExecContext(ctx, q, f.ID, lockID, key)
	return database.MapError(err)
}

func problem(kind string, l locks.Stale, f ref, newKey normalize.Key, reason string) Problem {
	return Problem{Kind: kind, LockID: l.ID, OldKey: l.Key, TenantID: l.TenantID, TenantName: l.TenantName,
		RefKind: f.Kind, RefID: f.ID, RepoURL: f.RepoURL, NewKey: newKey, Reason: reason}
}

// record stores problems as open rows of rekey_conflicts; a problem already
// open for the same reference and kind is left as it is.
func (r *runner) record(ctx context.Context, ps []Problem) error {
	for _, p := range ps {
		_, err := r.db.ExecContext(ctx, `
			INSERT INTO rekey_conflicts (kind, lock_id, old_key, cluster_user_id, cluster_user_name, ref_kind, ref_id,
				repo_url, new_key, reason, other_lock_id, other_key, other_user_id, other_user_name, other_repo_url)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULLIF($11, '')::uuid, NULLIF($12, ''), NULLIF($13, '')::uuid,
				NULLIF($14, ''), NULLIF($15, ''))
			ON CONFLICT (ref_id, kind) WHERE resolved_at IS NULL DO NOTHING`,
			p.Kind, p.LockID, p.OldKey, p.TenantID, p.TenantName, p.RefKind, p.RefID, p.RepoURL, p.NewKey, p.Reason,
			p.OtherLockID, p.OtherKey, p.OtherTenantID, p.OtherTenant, p.OtherRepoURL)
		if err != nil {
			return database.MapError(err)
		}
	}
	return nil
}

// markChecked records that this complete run checked every stale lock under
// its rules version (normalizer_state.checked_version): from then on the
// stale locks are the open conflicts' (checkOpenSQL), and claims check the
// older versions' keys of those only (LoadKeying). It holds off rules
// changes while it does, and records nothing when the rules changed since
// the run loaded them (the next run checks again).
func (r *runner) markChecked(ctx context.Context) error {
	return r.db.WithTx(ctx, func(tx database.Tx) error {
		if err := r.locks.GuardRules(ctx, tx, r.keying.Generation); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE normalizer_state SET checked_version = $1 WHERE checked_version < $1`, r.n.Version())
		return database.MapError(err)
	})
}

// resolve closes the open rows this complete run no longer found.
func (r *runner) resolve(ctx context.Context) error {
	refIDs, kinds := make([]string, len(r.found)), make([]string, len(r.found))
	for i, p := range r.found {
		refIDs[i], kinds[i] = p.RefID, p.Kind
	}
	_, err := r.db.ExecContext(ctx, `
		UPDATE rekey_conflicts c SET resolved_at = now()
		WHERE c.resolved_at IS NULL
		  AND NOT EXISTS (SELECT 1 FROM unnest($1::uuid[], $2::text[]) AS f(ref_id, kind)
		                  WHERE f.ref_id = c.ref_id AND f.kind = c.kind)`, pq.Array(refIDs), pq.Array(kinds))
	return database.MapError(err)
}
