package gc_test

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/gc"
)

// The fixtures below write rows the way internal/locks and internal/apps do
// (a lock, an application or credential, its reference row), with explicit
// ages, in plain SQL: the GC must be correct against the tables whoever
// writes them.

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newCollector(db *database.DB, cfg gc.Config) *gc.Collector {
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	return gc.New(db, cfg)
}

func mustExec(t testing.TB, q database.Querier, query string, args ...any) {
	t.Helper()
	if _, err := q.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func createTenant(t testing.TB, q database.Querier, name string) string {
	t.Helper()
	var id string
	if err := q.GetContext(context.Background(), &id,
		`INSERT INTO cluster_users (name) VALUES ($1) RETURNING id`, name); err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	return id
}

// createLock creates a lock on url owned by tenant, created age ago.
func createLock(t testing.TB, q database.Querier, tenant, url string, age time.Duration) string {
	t.Helper()
	var id string
	if err := q.GetContext(context.Background(), &id, `
		INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at)
		VALUES ($1, 1, $2, now() - make_interval(secs => $3)) RETURNING id`,
		url, tenant, age.Seconds()); err != nil {
		t.Fatalf("create lock %s: %v", url, err)
	}
	return id
}

// createApp creates an application of tenant named name on the lock's URL,
// and its reference row.
func createApp(t testing.TB, q database.Querier, tenant, name, lockID string) string {
	t.Helper()
	var id string
	if err := q.GetContext(context.Background(), &id, `
		WITH l AS (SELECT git_repository_url FROM RepositoryLockOwner WHERE id = $3)
		INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
		SELECT $1, $2, l.git_repository_url, l.git_repository_url FROM l RETURNING id`,
		tenant, name, lockID); err != nil {
		t.Fatalf("create application %s: %v", name, err)
	}
	mustExec(t, q, `INSERT INTO RepositoryLockApplication (application_id, lock_id) VALUES ($1, $2)`, id, lockID)
	return id
}

// createCred creates a repository credential of tenant on the lock's URL,
// and its reference row.
func createCred(t testing.TB, q database.Querier, tenant, name, lockID string) string {
	t.Helper()
	var id string
	if err := q.GetContext(context.Background(), &id, `
		WITH l AS (SELECT git_repository_url FROM RepositoryLockOwner WHERE id = $3)
		INSERT INTO repository_credentials (cluster_user_id, name, repo_url, normalized_url)
		SELECT $1, $2, l.git_repository_url, l.git_repository_url FROM l RETURNING id`,
		tenant, name, lockID); err != nil {
		t.Fatalf("create credential %s: %v", name, err)
	}
	mustExec(t, q, `INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id) VALUES ($1, $2)`, id, lockID)
	return id
}

// lockURLs returns the URLs of every lock, sorted.
func lockURLs(t testing.TB, q database.Querier) []string {
	t.Helper()
	urls := []string{}
	if err := q.SelectContext(context.Background(), &urls,
		`SELECT git_repository_url FROM RepositoryLockOwner ORDER BY git_repository_url`); err != nil {
		t.Fatal(err)
	}
	return urls
}

type collectedEvent struct {
	LockID    string  `db:"lock_id"`
	URL       string  `db:"git_repository_url"`
	TenantID  *string `db:"cluster_user_id"`
	OwnerID   string  `db:"owner_user_id"`
	OwnerName string  `db:"owner_user_name"`
}

func collectedEvents(t testing.TB, q database.Querier) []collectedEvent {
	t.Helper()
	evs := []collectedEvent{}
	if err := q.SelectContext(context.Background(), &evs, `
		SELECT lock_id, git_repository_url, cluster_user_id, owner_user_id, owner_user_name
		FROM repository_lock_events WHERE event = 'collected' ORDER BY git_repository_url`); err != nil {
		t.Fatal(err)
	}
	return evs
}

func countRows(t testing.TB, q database.Querier, query string, args ...any) int {
	t.Helper()
	var n int
	if err := q.GetContext(context.Background(), &n, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// opts returns default CLI options with the given batch size and min age.
func opts(batch int, minAge time.Duration) gc.Options {
	o := gc.DefaultOptions(gc.TriggerCLI)
	o.BatchSize = batch
	o.MinAge = minAge
	return o
}
