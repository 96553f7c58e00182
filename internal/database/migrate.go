package database

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/repolock/repolock/db/migrations"
)

// MigrationStatus is the schema version recorded in the database.
type MigrationStatus struct {
	Version uint `json:"version"`
	Dirty   bool `json:"dirty"`
	// Latest is the highest version the binary carries.
	Latest uint `json:"latest"`
}

// Migrator applies the embedded migrations. golang-migrate holds a Postgres
// advisory lock while it works, so several replicas may run it at once: one
// migrates, the others wait and then find nothing to do.
type Migrator struct {
	m *migrate.Migrate
}

// NewMigrator returns a Migrator on one dedicated connection of db. Close it
// when done; db stays open.
func NewMigrator(ctx context.Context, db *DB, logger *slog.Logger) (*Migrator, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: connect: %w", err)
	}
	drv, err := postgres.WithConnection(ctx, conn, &postgres.Config{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("migrations: driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "postgres", drv)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	if logger != nil {
		m.Log = migrateLogger{logger}
	}
	return &Migrator{m: m}, nil
}

// Close releases the migrator's connection (the driver closes it).
func (mg *Migrator) Close() error {
	srcErr, dbErr := mg.m.Close()
	return errors.Join(srcErr, dbErr)
}

// Up applies every pending migration. Having nothing to do is not an error.
func (mg *Migrator) Up() error {
	if err := mg.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down rolls back n migrations; n <= 0 rolls back all of them.
func (mg *Migrator) Down(n int) error {
	var err error
	if n <= 0 {
		err = mg.m.Down()
	} else {
		err = mg.m.Steps(-n)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

// Force records version v as applied and clean without running anything:
// the way out of a dirty database once an operator has inspected it
// (golang-migrate's force). v = 0 records no version at all.
func (mg *Migrator) Force(v int) error {
	if v == 0 {
		v = -1 // golang-migrate's "no version"
	}
	if err := mg.m.Force(v); err != nil {
		return fmt.Errorf("migrate force: %w", err)
	}
	return nil
}

// Status reports the recorded version and the latest embedded one.
func (mg *Migrator) Status() (MigrationStatus, error) {
	latest, err := LatestVersion()
	if err != nil {
		return MigrationStatus{}, err
	}
	v, dirty, err := mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return MigrationStatus{Latest: latest}, nil
	}
	if err != nil {
		return MigrationStatus{}, fmt.Errorf("migrate version: %w", err)
	}
	return MigrationStatus{Version: v, Dirty: dirty, Latest: latest}, nil
}

// To migrates up or down to version (one of Versions); being there already
// is not an error.
func (mg *Migrator) To(version uint) error {
	if err := mg.m.Migrate(version); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate to %d: %w", version, err)
	}
	return nil
}

// Versions returns the migration versions embedded in the binary, in order.
// Numbers may have gaps (a number reserved by one change and not used).
func Versions() ([]uint, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return nil, err
	}
	vs := []uint{v}
	for {
		next, err := src.Next(v)
		if err != nil {
			return vs, nil
		}
		vs = append(vs, next)
		v = next
	}
}

// LatestVersion returns the highest migration version embedded in the binary.
func LatestVersion() (uint, error) {
	vs, err := Versions()
	if err != nil {
		return 0, err
	}
	return vs[len(vs)-1], nil
}

// MigrateUp opens a migrator, applies all pending migrations and closes it.
func MigrateUp(ctx context.Context, db *DB, logger *slog.Logger) error {
	mg, err := NewMigrator(ctx, db, logger)
	if err != nil {
		return err
	}
	defer mg.Close()
	return mg.Up()
}

type migrateLogger struct{ l *slog.Logger }

func (l migrateLogger) Printf(format string, v ...any) {
	l.l.Info("migrate: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}
func (l migrateLogger) Verbose() bool { return false }
