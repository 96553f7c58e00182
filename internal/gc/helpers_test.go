package gc_test

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/tenants"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// services are the domain services of one test database, built once per
// pool as cmd/api builds them once per process: locks and apps own the
// pool's batchers. They key under the built-in rules.
type services struct {
	tenants *tenants.Service
	locks   *locks.Service
	apps    *apps.Service
}

var (
	servicesMu sync.Mutex
	servicesOf = map[*database.DB]*services{}
)

// svc returns db's services, building them on first use.
func svc(db *database.DB) *services {
	servicesMu.Lock()
	defer servicesMu.Unlock()
	s, ok := servicesOf[db]
	if !ok {
		l := locks.New(db, locks.Fixed(normalize.Default()), nil)
		s = &services{tenants: tenants.New(db, nil), locks: l, apps: apps.New(db, l)}
		servicesOf[db] = s
	}
	return s
}

func newCollector(db *database.DB, cfg gc.Config) *gc.Collector {
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	return gc.New(db, svc(db).locks, cfg)
}

func mustExec(t testing.TB, q database.Querier, query string, args ...any) {
	t.Helper()
	if _, err := q.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
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

// cleanerFunc adapts a function to gc.Cleaner.
type cleanerFunc func(ctx context.Context) (repostate.CleanerResult, error)

func (f cleanerFunc) Run(ctx context.Context) (repostate.CleanerResult, error) { return f(ctx) }

// repositoryCleaner is the production Cleaner step as cmd/api wires it: the
// repostate Cleaner on db's kv table, retiring deleted tenants' repositories.
func repositoryCleaner(db *database.DB) gc.Cleaner {
	return repostate.NewCleaner(db, repostate.CleanerConfig{Logger: quietLogger(),
		TenantExists: svc(db).tenants.Exists})
}
