package main

import (
	"context"
	"fmt"

	"github.com/repolock/repolock/internal/console"
)

// runConsole is `api console sessions revoke`: it ends every operator
// console session, on every replica (they share the console_sessions
// table). Rotating ADMIN_TOKEN ends them too (a session is bound to the
// token that opened it); this is for when the token stays.
func runConsole(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "console", "sessions revoke",
		"sessions revoke: ends every operator console session, on every replica; the\n"+
			"                 operators sign in again. Prints how many sessions ended.")
	var common commonFlags
	common.register(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return errUsage
	}
	if pos[0] != "sessions" {
		return errUnknownAction(fs, pos[0])
	}
	if len(pos) != 2 {
		fs.Usage()
		return errUsage
	}
	if pos[1] != "revoke" {
		return errUnknownAction(fs, "sessions "+pos[1])
	}
	db, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := console.RevokeSessions(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "ended %d console session(s)\n", n)
	return nil
}
