package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/golang-migrate/migrate/v4"

	"github.com/repolock/repolock/internal/database"
)

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "migrate", "up | down [N|--all] | version | force N",
		"Applies the embedded migrations (up), rolls back N of them (down, default 1; --all for every one),\n"+
			"prints the recorded version (version), or records version N as applied and clean without running\n"+
			"anything (force N: after a migration failed half-way and you inspected and repaired the database).\n"+
			"Safe to run from several replicas at once: a Postgres advisory lock serializes them.")
	var common commonFlags
	all := fs.Bool("all", false, "with down: roll back every migration")
	common.register(fs, usesMigrateURL)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) < 1 {
		return argError(fs, "missing what to do: up, down [N|--all], version or force N")
	}
	action, rest := pos[0], pos[1:]
	steps, force := 1, 0
	switch action {
	case "up", "version":
		if err := wantArgs(fs, "migrate "+action, rest); err != nil {
			return err
		}
	case "down":
		if len(rest) > 1 {
			return argError(fs, "unexpected argument %q (%s migrate down [N|--all])", rest[1], progName)
		}
		if len(rest) == 1 {
			n, err := strconv.Atoi(rest[0])
			if err != nil || n < 1 {
				return &exitError{code: 2, err: fmt.Errorf("down takes a positive number of migrations to roll back (repolock migrate down 2), got %q", rest[0])}
			}
			steps = n
		}
		if *all {
			steps = 0
		}
	case "force":
		if err := wantArgs(fs, "migrate force", rest, "N"); err != nil {
			return err
		}
		n, err := strconv.Atoi(rest[0])
		if err != nil || n < 0 {
			return &exitError{code: 2, err: fmt.Errorf("force takes a migration version, a whole number >= 0, got %q", rest[0])}
		}
		latest, lerr := database.LatestVersion()
		if lerr == nil && uint(n) > latest {
			return &exitError{code: 2, err: fmt.Errorf("force %d: this binary's migrations end at version %d", n, latest)}
		}
		force = n
	default:
		return errUnknownAction(fs, action)
	}
	logger, db, err := common.connectMigration(ctx, e)
	if err != nil {
		return err
	}
	defer db.Close()
	mg, err := database.NewMigrator(ctx, db, logger)
	if err != nil {
		return err
	}
	defer mg.Close()
	switch action {
	case "up":
		err = mg.Up()
	case "down":
		st, serr := mg.Status()
		if serr != nil {
			return serr
		}
		if st.Version == 0 && !st.Dirty {
			return &exitError{code: 2, err: errors.New("nothing to roll back: no migration is applied (version 0)")}
		}
		if steps > int(st.Version) {
			return &exitError{code: 2, err: fmt.Errorf("cannot roll back %d migrations: only versions up to %d are applied (repolock migrate down --all rolls back every one)", steps, st.Version)}
		}
		err = mg.Down(steps)
	case "force":
		err = mg.Force(force)
	}
	if err != nil {
		return err
	}
	st, err := mg.Status()
	if err != nil {
		return err
	}
	if st.Dirty {
		fmt.Fprintf(e.stderr, "repolock migrate: %s\n", dirtyMessage(st.Version))
	}
	return json.NewEncoder(e.stdout).Encode(st)
}

// dirtyMessage explains a dirty schema version and the way out.
func dirtyMessage(v uint) string {
	return fmt.Sprintf("migration %d failed half-way (the database is marked dirty at version %d); inspect the database, then run "+
		"`repolock migrate force %d` if its changes are all in place, or repair them and run `repolock migrate force %d` and `repolock migrate up` to run it again",
		v, v, v, int(v)-1)
}

// migrationMessage explains the migration states an operator must act on:
// a dirty database (from any command that migrates, serve included) and a
// database without the schema (SQLSTATE 42P01 undefined_table).
func migrationMessage(err error) (string, bool) {
	var dirty migrate.ErrDirty
	if errors.As(err, &dirty) {
		return dirtyMessage(uint(dirty.Version)), true
	}
	if database.PQCode(err) == "42P01" {
		return "the database has no repolock schema (a table is missing): run `repolock migrate up` first (repolock serve does it unless --migrate-on-start=false)", true
	}
	return "", false
}
