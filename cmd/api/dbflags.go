package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/repolock/repolock/internal/database"
)

// dbFlags are the database settings beyond DATABASE_URL, for running behind
// a connection pooler and with read replicas (docs/operations.md):
//
//   - DB_PREPARED_STATEMENTS=false: no prepared-statement cache and one
//     round trip per statement, for PgBouncer in transaction pooling mode;
//   - MIGRATE_DATABASE_URL: a direct connection for migrations, whose
//     advisory lock is session-level and so cannot go through such a pooler;
//   - REPORTS_DATABASE_URL: a read replica for the reporting views.
type dbFlags struct {
	// connectTimeout: how long to wait for an unreachable database
	// (patience.go).
	connectTimeout time.Duration
	// logger says what the command waits for; set by commonFlags.
	logger     *slog.Logger
	prepared   bool
	migrateURL string
	reportsURL string
	uses       dbUses // the settings that apply (register)
	env        *env
}

// dbUses says which database settings apply to a command, so that its
// --help lists those and no other.
type dbUses uint8

const (
	// usesPool: the command works through DATABASE_URL, which may be a
	// transaction-pooling PgBouncer: --db-prepared-statements.
	usesPool dbUses = 1 << iota
	// usesMigrateURL: the command migrates or holds a session (LISTEN):
	// --migrate-database-url.
	usesMigrateURL
	// usesReportsURL: the command reads the reporting views:
	// --reports-database-url.
	usesReportsURL
)

func (d *dbFlags) register(fs *flagSet, uses dbUses) {
	d.env = fs.env
	d.uses = uses
	// Without the flag the environment still applies (a shared env file
	// behind PgBouncer): the pool is set up for the pooler either way.
	d.prepared = fs.envBool("DB_PREPARED_STATEMENTS", true)
	if uses&usesPool != 0 {
		fs.BoolVar(&d.prepared, "db-prepared-statements", d.prepared,
			"cache prepared statements; false behind PgBouncer in transaction pooling mode [DB_PREPARED_STATEMENTS]")
	}
	// URLs may hold passwords: read from the environment after parsing,
	// never shown as defaults by --help.
	if uses&usesMigrateURL != 0 {
		fs.StringVar(&d.migrateURL, "migrate-database-url", "",
			"direct (not pooled) Postgres URL for migrations and LISTEN; default: the database URL [MIGRATE_DATABASE_URL]")
	}
	if uses&usesReportsURL != 0 {
		fs.StringVar(&d.reportsURL, "reports-database-url", "",
			"Postgres URL (a read replica) for reports; default: the database URL [REPORTS_DATABASE_URL]")
	}
}

// pool returns a pool on url with the pooler settings applied, without
// connecting (repolock serve starts while the database may be down).
func (d *dbFlags) pool(url string, cfg database.PoolConfig) (*database.DB, error) {
	return newPool(url, d.prepared, cfg)
}

// newPool returns a pool on url without connecting; prepared false sets it
// up for PgBouncer in transaction pooling mode.
func newPool(url string, prepared bool, cfg database.PoolConfig) (*database.DB, error) {
	if !prepared {
		url = database.ForTransactionPooling(url)
	}
	cfg.NoPreparedStatements = !prepared
	return database.New(url, cfg)
}

// reportsPool is the size of the pool on REPORTS_DATABASE_URL.
var reportsPool = database.PoolConfig{MaxOpenConns: 4, MaxIdleConns: 2}

// open is pool followed by a ping, for commands that need the database
// right away.
func (d *dbFlags) open(ctx context.Context, url string, cfg database.PoolConfig) (*database.DB, error) {
	db, err := d.pool(url, cfg)
	if err != nil {
		return nil, err
	}
	if err := d.patience().ping(ctx, db, "the database"); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// patience is how this command waits for the database.
func (d *dbFlags) patience() patience {
	return patience{timeout: d.connectTimeout, logger: d.logger}
}

// openDirect opens a direct pool on url (MIGRATE_DATABASE_URL: prepared
// statements work there), waiting for it as patience says.
func (d *dbFlags) openDirect(ctx context.Context, url string) (*database.DB, error) {
	db, err := database.New(url, database.PoolConfig{MaxOpenConns: 2, MaxIdleConns: 1})
	if err != nil {
		return nil, err
	}
	if err := d.patience().ping(ctx, db, "the migration database (MIGRATE_DATABASE_URL)"); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func (d *dbFlags) migrationURL() string {
	if d.uses&usesMigrateURL == 0 {
		return ""
	}
	if d.migrateURL == "" && d.env != nil {
		d.migrateURL = d.env.getenv("MIGRATE_DATABASE_URL")
	}
	return d.migrateURL
}

func (d *dbFlags) reportingURL() string {
	if d.uses&usesReportsURL == 0 {
		return ""
	}
	if d.reportsURL == "" && d.env != nil {
		d.reportsURL = d.env.getenv("REPORTS_DATABASE_URL")
	}
	return d.reportsURL
}

// connectMigration is connect for `repolock migrate`: the pool is on
// MIGRATE_DATABASE_URL when it is set (DATABASE_URL is then not needed).
func (c *commonFlags) connectMigration(ctx context.Context, e *env) (*slog.Logger, *database.DB, error) {
	url := c.db.migrationURL()
	if url == "" {
		return c.connect(ctx, e)
	}
	logger, err := c.logger(e)
	if err != nil {
		return nil, nil, err
	}
	c.db.logger = logger
	// A direct connection: prepared statements work there.
	db, err := c.db.openDirect(ctx, url)
	if err != nil {
		return nil, nil, fmt.Errorf("MIGRATE_DATABASE_URL: %w", err)
	}
	return logger, db, nil
}

// migrateUp applies pending migrations through migrateURL
// (MIGRATE_DATABASE_URL) when it is set, else through db.
func migrateUp(ctx context.Context, migrateURL string, db *database.DB, logger *slog.Logger) error {
	if migrateURL == "" {
		return database.MigrateUp(ctx, db, logger)
	}
	mdb, err := database.Open(ctx, migrateURL, database.PoolConfig{MaxOpenConns: 2, MaxIdleConns: 1})
	if err != nil {
		return fmt.Errorf("MIGRATE_DATABASE_URL: %w", err)
	}
	defer mdb.Close()
	return database.MigrateUp(ctx, mdb, logger)
}

// openReports opens the pool reports read from: REPORTS_DATABASE_URL when
// set, else the ordinary one. The second result is false when it is the
// ordinary database.
func (c *commonFlags) openReports(ctx context.Context) (*database.DB, bool, error) {
	url := c.db.reportingURL()
	if url == "" {
		db, err := c.open(ctx)
		return db, false, err
	}
	db, err := c.db.open(ctx, url, reportsPool)
	if err != nil {
		return nil, false, fmt.Errorf("REPORTS_DATABASE_URL: %w", err)
	}
	return db, true, nil
}
