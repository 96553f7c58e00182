package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/repolock/repolock/internal/database"
)

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "migrate", "up | down [N|--all] | version",
		"Applies the embedded migrations (up), rolls back N of them (down, default 1; --all for every one),\n"+
			"or prints the recorded version. Safe to run from several replicas at once: a Postgres\n"+
			"advisory lock serializes them.")
	var common commonFlags
	all := fs.Bool("all", false, "with down: roll back every migration")
	common.register(fs, e)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 {
		fs.Usage()
		return errUsage
	}
	action, rest := pos[0], pos[1:]
	steps := 1
	switch action {
	case "up", "version":
		if len(rest) != 0 {
			fs.Usage()
			return errUsage
		}
	case "down":
		if len(rest) > 1 {
			fs.Usage()
			return errUsage
		}
		if len(rest) == 1 {
			n, err := strconv.Atoi(rest[0])
			if err != nil || n < 1 {
				return fmt.Errorf("down takes a positive number of migrations, got %q", rest[0])
			}
			steps = n
		}
		if *all {
			steps = 0
		}
	default:
		fs.Usage()
		return errUsage
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
		err = mg.Down(steps)
	}
	if err != nil {
		return err
	}
	st, err := mg.Status()
	if err != nil {
		return err
	}
	return json.NewEncoder(e.stdout).Encode(st)
}
