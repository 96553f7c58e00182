// Package dbtest gives tests their own real Postgres database, built from the
// embedded migrations.
//
// The first call in a process builds (once per migration set, shared by every
// test process through an advisory lock) a template database named after a
// hash of the migration files; each test database is then a cheap
// CREATE DATABASE ... TEMPLATE copy that is dropped when the test ends. Tests
// are therefore independent, safe to run in parallel and safe to run twice.
//
// The admin connection comes from TEST_DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable; DATABASE_URL
// alone is refused (tests never create or drop databases on the server the
// service uses). When no
// server answers, tests fail loudly: they never skip. (make test starts one.)
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock/db/migrations"
	"github.com/repolock/repolock/internal/database"
)

// DefaultAdminURL is used when TEST_DATABASE_URL is not set (and neither is
// DATABASE_URL): the local development server.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL returns the admin connection string tests use: TEST_DATABASE_URL,
// else DefaultAdminURL. DATABASE_URL is never used: it names the server the
// service and the CLI work on, and tests create and drop databases
// (CheckEnv refuses to run when only DATABASE_URL is set).
func AdminURL() string {
	if v := os.Getenv("TEST_DATABASE_URL"); v != "" {
		return v
	}
	return DefaultAdminURL
}

// CheckEnv returns an error when DATABASE_URL is set but TEST_DATABASE_URL
// is not: the tests would otherwise create and drop databases on the
// default server while the caller may think they run on DATABASE_URL's.
func CheckEnv() error {
	if os.Getenv("TEST_DATABASE_URL") == "" && os.Getenv("DATABASE_URL") != "" {
		return errors.New("dbtest: DATABASE_URL is set but TEST_DATABASE_URL is not. Tests create and drop databases, " +
			"so they only use a server named by TEST_DATABASE_URL (make test sets it to the server scripts/pg-ensure.sh " +
			"finds or starts); they never touch DATABASE_URL's. Set TEST_DATABASE_URL, or unset DATABASE_URL to use " +
			DefaultAdminURL)
	}
	return nil
}

// PoolSize is the size of the pools New and NewWithURL open.
const PoolSize = 16

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// New returns an open pool on a fresh, fully migrated database that is dropped
// when t ends. Options configure the pool (Pool).
func New(t testing.TB, opts ...Option) *database.DB {
	t.Helper()
	db, _ := NewWithURL(t, opts...)
	return db
}

// Option configures the pool New and NewWithURL open.
type Option func(*database.PoolConfig)

// Pool opens the test pool with cfg instead of the default one (PoolSize
// connections, the database package's defaults): for tests that need
// another size, retry policy or batch stall time, e.g.
//
//	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{BatchStallAfter: time.Hour}))
//
// A zero MaxOpenConns stays PoolSize.
func Pool(cfg database.PoolConfig) Option {
	return func(c *database.PoolConfig) {
		if cfg.MaxOpenConns <= 0 {
			cfg.MaxOpenConns = PoolSize
		}
		*c = cfg
	}
}

// NewWithURL is New that also returns the database's connection URL, for tests
// that start the real binary or open their own connections.
func NewWithURL(t testing.TB, opts ...Option) (*database.DB, string) {
	t.Helper()
	dbURL := NewDatabase(t, true)
	ctx := context.Background()
	// Packages and parallel tests each hold a pool: keep them small enough
	// that a whole `go test ./...` stays under Postgres' default 100
	// connections. Goroutines beyond the pool size queue for a connection.
	cfg := database.PoolConfig{MaxOpenConns: PoolSize, MaxIdleConns: PoolSize}
	for _, o := range opts {
		o(&cfg)
	}
	db, err := database.Open(ctx, dbURL, cfg)
	if err != nil {
		t.Fatalf("dbtest: open test database: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dbURL
}

// NewDatabase creates a fresh database and returns its URL. With migrated
// it is a copy of the migrated template; without, it is empty (for tests of
// the migrations themselves). It is dropped when t ends.
func NewDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	if err := CheckEnv(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := sql.Open("postgres", AdminURL())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		t.Fatalf("dbtest: no Postgres reachable at %s: %v\n"+
			"Run the tests with `make test` (it starts or creates a Postgres) or set TEST_DATABASE_URL.",
			redact(AdminURL()), err)
	}
	source := "template0"
	if migrated {
		templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx, admin) })
		if templateErr != nil {
			t.Fatalf("dbtest: build template database: %v", templateErr)
		}
		source = templateName
	}
	name := "repolock_test_" + randomHex(8)
	if err := createDatabase(ctx, admin, name, source); err != nil {
		t.Fatalf("dbtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := sql.Open("postgres", AdminURL())
		if err != nil {
			t.Errorf("dbtest: drop %s: %v", name, err)
			return
		}
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("dbtest: drop %s: %v", name, err)
		}
	})
	return withDatabase(AdminURL(), name)
}

// createDatabase copies source into name. Postgres refuses to copy a
// template while another session is connected to it, and two concurrent
// copies can collide briefly, so it retries that case.
func createDatabase(ctx context.Context, admin *sql.DB, name, source string) error {
	q := "CREATE DATABASE " + pq.QuoteIdentifier(name) + " TEMPLATE " + pq.QuoteIdentifier(source)
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if _, err = admin.ExecContext(ctx, q); err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "is being accessed by other users") {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// ensureTemplate builds the migrated template once per migration set. The
// template is built under a temporary name and renamed when complete, so a
// half-built template is never used.
func ensureTemplate(ctx context.Context, admin *sql.DB) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "repolock_tmpl_" + sum[:16]

	conn, err := admin.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	const lockKey = 0x7265706f6c6f636b // "repolock"
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return "", err
	}
	defer conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1)", lockKey)

	var exists bool
	if err := conn.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(building)+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(building)+" TEMPLATE template0"); err != nil {
		return "", err
	}
	if err := migrate(ctx, withDatabase(AdminURL(), building)); err != nil {
		return "", err
	}
	if _, err := conn.ExecContext(ctx, "ALTER DATABASE "+pq.QuoteIdentifier(building)+" RENAME TO "+pq.QuoteIdentifier(name)); err != nil {
		return "", err
	}
	return name, nil
}

func migrate(ctx context.Context, dbURL string) error {
	db, err := database.Open(ctx, dbURL, database.PoolConfig{MaxOpenConns: 2})
	if err != nil {
		return err
	}
	defer db.Close()
	return database.MigrateUp(ctx, db, nil)
}

// migrationsHash hashes the names and contents of every embedded migration.
func migrationsHash() (string, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// withDatabase returns dsn with its database name replaced. It understands
// URLs and key=value strings.
func withDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	var parts []string
	for _, f := range strings.Fields(dsn) {
		if !strings.HasPrefix(f, "dbname=") {
			parts = append(parts, f)
		}
	}
	return strings.Join(append(parts, "dbname="+name), " ")
}

func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	return dsn
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("dbtest: crypto/rand failed"))
	}
	return hex.EncodeToString(b)
}
