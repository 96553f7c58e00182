package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/tenants"
)

// NewTenant inserts a tenant (a cluster_users row, without tokens) through q
// and returns it; an empty name gets a random one. It is the one tenant
// fixture of every package's tests; tests that need a token use
// tenants.Create or the admin API.
func NewTenant(t testing.TB, q database.Querier, name string) tenants.Tenant {
	t.Helper()
	if name == "" {
		name = "tenant-" + randomHex(4)
	}
	var u tenants.Tenant
	if err := q.GetContext(context.Background(), &u, `
		INSERT INTO cluster_users (name) VALUES ($1)
		RETURNING id, name, display_name, created_at`, name); err != nil {
		t.Fatalf("dbtest: create tenant %q: %v", name, err)
	}
	return u
}

// The fixtures below write lock rows the way internal/locks and internal/apps
// do (a lock, an application or credential, its reference row), with
// explicit ages, in plain SQL: the GC and the reports must be correct
// against the tables whoever writes them.

// NewLock creates a lock on url owned by tenant, created age ago, and
// returns its id.
func NewLock(t testing.TB, q database.Querier, tenant, url string, age time.Duration) string {
	t.Helper()
	var id string
	if err := q.GetContext(context.Background(), &id, `
		INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at)
		VALUES ($1, $4, $2, now() - make_interval(secs => $3)) RETURNING id`,
		url, tenant, age.Seconds(), normalize.Version); err != nil {
		t.Fatalf("dbtest: create lock %s: %v", url, err)
	}
	return id
}

// NewApplication creates an application of tenant named name on the lock's
// URL, and its reference row, and returns the application's id.
func NewApplication(t testing.TB, q database.Querier, tenant, name, lockID string) string {
	t.Helper()
	var id string
	if err := q.GetContext(context.Background(), &id, `
		WITH l AS (SELECT git_repository_url FROM RepositoryLockOwner WHERE id = $3)
		INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
		SELECT $1, $2, l.git_repository_url, l.git_repository_url FROM l RETURNING id`,
		tenant, name, lockID); err != nil {
		t.Fatalf("dbtest: create application %s: %v", name, err)
	}
	if _, err := q.ExecContext(context.Background(),
		`INSERT INTO RepositoryLockApplication (application_id, lock_id) VALUES ($1, $2)`, id, lockID); err != nil {
		t.Fatalf("dbtest: reference lock %s from application %s: %v", lockID, name, err)
	}
	return id
}

// NewCredential creates a repository credential of tenant on the lock's
// URL, and its reference row, and returns the credential's id.
func NewCredential(t testing.TB, q database.Querier, tenant, name, lockID string) string {
	t.Helper()
	var id string
	if err := q.GetContext(context.Background(), &id, `
		WITH l AS (SELECT git_repository_url FROM RepositoryLockOwner WHERE id = $3)
		INSERT INTO repository_credentials (cluster_user_id, name, repo_url, normalized_url)
		SELECT $1, $2, l.git_repository_url, l.git_repository_url FROM l RETURNING id`,
		tenant, name, lockID); err != nil {
		t.Fatalf("dbtest: create credential %s: %v", name, err)
	}
	if _, err := q.ExecContext(context.Background(),
		`INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id) VALUES ($1, $2)`, id, lockID); err != nil {
		t.Fatalf("dbtest: reference lock %s from credential %s: %v", lockID, name, err)
	}
	return id
}

// UnflaggedLocksSQL counts the locks that nothing references and that are
// not GC candidates: the invariant of migration 000013 (internal/gc,
// "Candidates") is that it is 0 after every committed transaction, so in
// any snapshot.
const UnflaggedLocksSQL = `
SELECT count(*) FROM RepositoryLockOwner o
WHERE NOT o.gc_candidate
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)`
