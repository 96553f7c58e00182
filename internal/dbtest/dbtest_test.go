package dbtest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
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

// TestCheckEnv: DATABASE_URL alone is refused; TEST_DATABASE_URL wins.
// (Not parallel: it sets environment variables.)
func TestCheckEnv(t *testing.T) {
	test := os.Getenv("TEST_DATABASE_URL")
	for _, tc := range []struct {
		test, db string
		ok       bool
		admin    string
	}{
		{"", "", true, dbtest.DefaultAdminURL},
		{"", "postgres://prod.example/db", false, dbtest.DefaultAdminURL},
		{"postgres://t@127.0.0.1/postgres", "postgres://prod.example/db", true, "postgres://t@127.0.0.1/postgres"},
	} {
		t.Setenv("TEST_DATABASE_URL", tc.test)
		t.Setenv("DATABASE_URL", tc.db)
		err := dbtest.CheckEnv()
		if (err == nil) != tc.ok || dbtest.AdminURL() != tc.admin {
			t.Errorf("TEST_DATABASE_URL=%q DATABASE_URL=%q: %v, admin %q", tc.test, tc.db, err, dbtest.AdminURL())
		}
		if err != nil && !strings.Contains(err.Error(), "DATABASE_URL is set but TEST_DATABASE_URL is not") {
			t.Errorf("message: %v", err)
		}
	}
	t.Setenv("TEST_DATABASE_URL", test)
}
