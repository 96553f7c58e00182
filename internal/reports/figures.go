package reports

import (
	"context"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// The per-tenant figures behind report_ownership (migration 000023,
// docs/reporting.md "How report_ownership stays O(tenants)"): triggers append
// one delta row per tenant and statement in the writing transaction, Fold
// moves them into the totals, the view adds totals and unfolded deltas.

// foldSQL moves every committed delta into the totals in one statement;
// concurrent folds take disjoint deltas (the function's comment).
const foldSQL = `SELECT repolock_ownership_fold()`

// Fold adds the deltas committed so far to the per-tenant totals and
// returns how many delta rows it folded. Safe to run from any number of
// processes at once. The GC runs it after each collection and api serve
// every REPORTS_FOLD_INTERVAL; the figures are exact without it (the view
// adds what is not folded), a fold only keeps reading them cheap.
func (s *Service) Fold(ctx context.Context) (_ int64, err error) {
	defer repolock.WrapOp(&err, "reports.Fold")
	var n int64
	err = s.db.GetContext(ctx, &n, foldSQL)
	return n, database.MapError(err)
}

// Figures are one tenant's ownership figures.
type Figures struct {
	Locks             int64 `db:"locks" json:"locks"`
	Applications      int64 `db:"applications" json:"applications"`
	Credentials       int64 `db:"credentials" json:"credentials"`
	UnreferencedLocks int64 `db:"unreferenced_locks" json:"unreferenced_locks"`
}

// Drift is a tenant whose reported figures differ from the base tables.
type Drift struct {
	TenantID   string `db:"tenant_id" json:"tenant_id"`
	TenantName string `db:"tenant_name" json:"tenant_name"`
	// Reported is what report_ownership says; Actual is counted from the
	// base tables, in the same snapshot.
	Reported Figures `db:"reported" json:"reported"`
	Actual   Figures `db:"actual" json:"actual"`
	// BadFlags counts the tenant's locks whose maintained "unreferenced"
	// flag is wrong (the cause of an unreferenced_locks drift that would
	// otherwise come back after a repair of the totals alone).
	BadFlags int64 `db:"bad_flags" json:"bad_flags"`
}

// Verification is the outcome of Verify.
type Verification struct {
	// Tenants is the number of tenants compared.
	Tenants int64 `json:"tenants"`
	// Drift lists the tenants whose figures are wrong, by name; empty when
	// every figure is exact.
	Drift []Drift `json:"drift"`
	// Took is how long the recount took.
	Took time.Duration `json:"-"`
}

// verifySQL recounts every figure from the base tables and compares it with
// report_ownership in ONE statement, hence one snapshot: concurrent writers
// cannot make it report drift that is not there. It reads every lock,
// Application and Credential: it is the check, not the report.
const verifySQL = `
WITH flags AS (
	SELECT o.cluster_user_id, o.unreferenced,
	       NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
	       AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id) AS truly
	FROM RepositoryLockOwner o
), l AS (
	SELECT cluster_user_id, count(*) AS locks, count(*) FILTER (WHERE truly) AS unref,
	       count(*) FILTER (WHERE unreferenced <> truly) AS bad
	FROM flags GROUP BY cluster_user_id
), a AS (
	SELECT cluster_user_id, count(*) AS n FROM applications GROUP BY cluster_user_id
), c AS (
	SELECT cluster_user_id, count(*) AS n FROM repository_credentials GROUP BY cluster_user_id
), cmp AS (
	SELECT r.tenant_id, r.tenant_name,
	       r.locks AS r_locks, r.applications AS r_apps, r.credentials AS r_creds, r.unreferenced_locks AS r_unref,
	       coalesce(l.locks, 0) AS locks, coalesce(a.n, 0) AS apps, coalesce(c.n, 0) AS creds,
	       coalesce(l.unref, 0) AS unref, coalesce(l.bad, 0) AS bad
	FROM report_ownership r
	LEFT JOIN l ON l.cluster_user_id = r.tenant_id
	LEFT JOIN a ON a.cluster_user_id = r.tenant_id
	LEFT JOIN c ON c.cluster_user_id = r.tenant_id
)
SELECT tenant_id, tenant_name,
       r_locks AS "reported.locks", r_apps AS "reported.applications",
       r_creds AS "reported.credentials", r_unref AS "reported.unreferenced_locks",
       locks AS "actual.locks", apps AS "actual.applications",
       creds AS "actual.credentials", unref AS "actual.unreferenced_locks",
       bad AS bad_flags, count(*) OVER () AS tenants
FROM cmp
ORDER BY (r_locks, r_apps, r_creds, r_unref, bad) IS DISTINCT FROM (locks, apps, creds, unref, 0) DESC, tenant_name
`

// Verify recounts the ownership figures from the base tables and returns
// every tenant whose reported figures differ. It reads every lock: run it
// on the primary (a replica's figures are as exact, but Repair cannot run
// there), off-peak on a large database.
func (s *Service) Verify(ctx context.Context) (_ Verification, err error) {
	defer repolock.WrapOp(&err, "reports.Verify")
	start := time.Now()
	rows, err := s.db.QueryxContext(ctx, verifySQL)
	if err != nil {
		return Verification{}, database.MapError(err)
	}
	defer rows.Close()
	v := Verification{Drift: []Drift{}}
	for rows.Next() {
		var r struct {
			Drift
			Tenants int64 `db:"tenants"`
		}
		if err := rows.StructScan(&r); err != nil {
			return Verification{}, database.MapError(err)
		}
		v.Tenants = r.Tenants
		if r.Reported == r.Actual && r.BadFlags == 0 {
			break // drifting tenants come first
		}
		v.Drift = append(v.Drift, r.Drift)
	}
	if err := rows.Err(); err != nil {
		return Verification{}, database.MapError(err)
	}
	v.Took = time.Since(start)
	return v, nil
}

// Repair recomputes the flags and the figures from the base tables
// (repolock_ownership_rebuild: writers of locks, Applications and
// Credentials wait meanwhile) and returns how many lock flags it
// corrected.
func (s *Service) Repair(ctx context.Context) (_ int64, err error) {
	defer repolock.WrapOp(&err, "reports.Repair")
	var n int64
	err = s.db.GetContext(ctx, &n, `SELECT repolock_ownership_rebuild()`)
	return n, database.MapError(err)
}
