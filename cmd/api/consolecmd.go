package main

import (
	"context"
	"fmt"

	"github.com/repolock/repolock/internal/console"
)

// runConsole is `repolock console sessions revoke`: it ends every operator
// console session, on every replica (they share the console_sessions
// table). Rotating ADMIN_TOKEN ends them too (a session is bound to the
// token that opened it); this is for when the token stays.
func runConsole(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "console", "sessions revoke",
		"sessions revoke: ends every operator console session, on every replica; the\n"+
			"                 operators sign in again. Prints how many sessions ended.")
	var common commonFlags
	common.register(fs, usesPool)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return argError(fs, "missing what to do (%s console sessions revoke)", progName)
	}
	if pos[0] != "sessions" {
		return errUnknownAction(fs, pos[0])
	}
	if len(pos) == 1 {
		return argError(fs, "missing the action on sessions (%s console sessions revoke)", progName)
	}
	if pos[1] != "revoke" {
		return errUnknownAction(fs, "sessions "+pos[1])
	}
	if err := wantArgs(fs, "console sessions revoke", pos[2:]); err != nil {
		return err
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
