package dbtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// TestDatabasesAreFreshMigratedAndIsolated: parallel tests each get their own
// database at the latest migration, and writes in one are invisible in the
// others.
func TestDatabasesAreFreshMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	latest, err := database.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx := context.Background()
			var version int
			var dirty bool
			if err := db.QueryRowContext(ctx, `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty); err != nil {
				t.Fatal(err)
			}
			if uint(version) != latest || dirty {
				t.Fatalf("version %d dirty %v, want %d", version, dirty, latest)
			}
			var n int
			if err := db.GetContext(ctx, &n, `SELECT count(*) FROM cluster_users`); err != nil || n != 0 {
				t.Fatalf("fresh database has %d users (%v)", n, err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO cluster_users (name) VALUES ($1)`, fmt.Sprintf("u%d", i)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestEmptyDatabaseHasNoSchema(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t, false)
	db, err := database.Open(context.Background(), url, database.PoolConfig{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.GetContext(context.Background(), &n, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`); err != nil || n != 0 {
		t.Fatalf("empty database has %d tables (%v)", n, err)
	}
}
