package reports_test

import (
	"context"
	"sync"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/reports"
)

func mustExec(t testing.TB, q database.Querier, query string, args ...any) {
	t.Helper()
	if _, err := q.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func countRows(t testing.TB, q database.Querier, query string, args ...any) int {
	t.Helper()
	var n int
	if err := q.GetContext(context.Background(), &n, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// services are the domain services of one test database, built once per
// pool as cmd/api builds them once per process (the locks service owns the
// pool's acquire batcher).
type services struct {
	locks   *locks.Service
	reports *reports.Service
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
		s = &services{locks: locks.New(db, locks.Fixed(normalize.Default()), nil), reports: reports.New(db)}
		servicesOf[db] = s
	}
	return s
}

// inOneTx returns a pool of one connection on dbURL that is held in a
// transaction (BEGIN on the pool's only connection), rolled back and closed
// when t ends. The reports service runs on a pool, never in a caller's
// transaction; on this pool every query, the service's included, runs in
// that one transaction: one now() and its SET LOCAL settings.
func inOneTx(t testing.TB, dbURL string) *database.DB {
	t.Helper()
	ctx := context.Background()
	db, err := database.Open(ctx, dbURL, database.PoolConfig{MaxOpenConns: 1, MaxIdleConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.ExecContext(ctx, `ROLLBACK`)
		db.Close()
	})
	mustExec(t, db, `BEGIN`)
	return db
}
