package reports_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/lib/pq"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// The migration must work for a migrating user that may not create roles
// (managed Postgres, least-privilege deploy users): it then only grants on
// its own views, if the role exists, and the down migration works too.
// (The branch where the role does not exist at all cannot be exercised
// here without dropping a cluster-wide role other databases use; the
// migration raises a NOTICE there, see docs/reporting.md.)
func TestMigrationWithoutCreateRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, err := sql.Open("postgres", dbtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() }) // after the cleanups below

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "repolock_test_migrator_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, `CREATE ROLE `+pq.QuoteIdentifier(role)+` LOGIN NOCREATEROLE NOSUPERUSER`); err != nil {
		t.Fatal(err)
	}
	dbURL := dbtest.NewDatabase(t, false)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := u.Path[1:]
	// Cleanups run last-in first-out: drop the database (before dbtest's own
	// drop, which then finds nothing) and then the role that owns it.
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), `DROP DATABASE IF EXISTS `+pq.QuoteIdentifier(dbName)+` WITH (FORCE)`)
		if _, err := admin.ExecContext(context.Background(), `DROP ROLE IF EXISTS `+pq.QuoteIdentifier(role)); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	if _, err := admin.ExecContext(ctx, `ALTER DATABASE `+pq.QuoteIdentifier(dbName)+` OWNER TO `+pq.QuoteIdentifier(role)); err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	db, err := database.Open(ctx, u.String(), database.PoolConfig{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	if err := database.MigrateUp(ctx, db, nil); err != nil {
		t.Fatalf("migrate up as a user without CREATEROLE: %v", err)
	}
	var owner string
	if err := db.GetContext(ctx, &owner, `SELECT viewowner FROM pg_views WHERE viewname = 'report_locks'`); err != nil {
		t.Fatal(err)
	}
	if owner != role {
		t.Fatalf("report_locks owned by %s, want %s", owner, role)
	}
	var roleExists bool
	if err := db.GetContext(ctx, &roleExists, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting')`); err != nil {
		t.Fatal(err)
	}
	grants := countRows(t, db, `SELECT count(*) FROM information_schema.role_table_grants
		WHERE grantee = 'repolock_reporting' AND privilege_type = 'SELECT' AND table_name LIKE 'report\_%'`)
	if roleExists && grants != 9 {
		t.Fatalf("the role exists but got %d view grants, want 9", grants)
	}

	mg, err := database.NewMigrator(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mg.Close()
	if err := mg.Down(0); err != nil {
		t.Fatalf("migrate down as a user without CREATEROLE: %v", err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM pg_views WHERE viewname LIKE 'report\_%'`); n != 0 {
		t.Fatalf("%d report views left after down", n)
	}
	// The role is cluster-wide and is never dropped by a migration.
	var still bool
	if err := db.GetContext(ctx, &still, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting')`); err != nil {
		t.Fatal(err)
	}
	if still != roleExists {
		t.Fatalf("repolock_reporting existed %v before down, %v after", roleExists, still)
	}
	if err := mg.Up(); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
}

// Up, down and up again as the superuser: the role survives the down, and
// the grants come back with the views.
func TestMigrationDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	mg, err := database.NewMigrator(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mg.Close()
	// Back to just before the gc migration (000005), which made the views.
	if err := mg.To(4); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT count(*) FROM pg_views WHERE viewname LIKE 'report\_%'`,
		`SELECT count(*) FROM pg_tables WHERE tablename IN ('gc_runs', 'gc_leases')`,
	} {
		if n := countRows(t, db, q); n != 0 {
			t.Fatalf("after down: %s = %d, want 0", q, n)
		}
	}
	if n := countRows(t, db, `SELECT count(*) FROM pg_roles WHERE rolname = 'repolock_reporting'`); n != 1 {
		t.Fatal("down dropped the cluster-wide role")
	}
	if err := mg.Up(); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM information_schema.role_table_grants
		WHERE grantee = 'repolock_reporting' AND table_catalog = current_database()`); n != 9 {
		t.Fatalf("grants after up again = %d, want 9", n)
	}
}
