package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/locks"
)

// runReservation manages reservations (locks.Service: Reserve,
// ListReservations, Unreserve) on the database directly, as `repolock alias`
// does.
func runReservation(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "reservation", "[--keep] [--dry-run] add PREFIX TENANT | list | remove ID",
		"Reservations: a key prefix (a host, host/org or repository URL, any spelling) that belongs to a\n"+
			"tenant. Claims of keys under it by other tenants are refused (409 repository_reserved); the\n"+
			"longest reserved prefix covering a key decides. e.g.\n"+
			"  repolock reservation add github.com/acme acme\n"+
			"add is refused (exit 3, nothing changed) when other tenants hold live locks under the prefix;\n"+
			"it prints them as JSON. --keep reserves anyway and lets them keep those locks until released;\n"+
			"--dry-run prints them and changes nothing.")
	var common commonFlags
	common.register(fs, usesPool)
	common.registerPatience(fs)
	keep := fs.Bool("keep", false, "reserve even when other tenants hold live locks under the prefix (they keep them)")
	dryRun := fs.Bool("dry-run", false, "print the live locks of other tenants under the prefix; change nothing")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := wantAction(fs, pos, "list, add PREFIX TENANT or remove ID",
		map[string][]string{"list": nil, "add": {"PREFIX", "TENANT"}, "remove": {"ID"}}); err != nil {
		return err
	}
	db, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	svc, err := loadServices(ctx, db)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	switch pos[0] {
	case "add":
		r, covered, err := svc.locks.Reserve(ctx, locks.ReserveRequest{Prefix: pos[1], Tenant: pos[2], Keep: *keep, DryRun: *dryRun})
		if repolock.IsCode(err, repolock.EReservationConflict) {
			var re *repolock.Error
			if errors.As(err, &re) {
				_ = enc.Encode(re.Details)
			}
			return &exitError{code: 3, err: errors.New(repolock.ErrorMessage(err))}
		}
		if err != nil {
			return cliError(err)
		}
		if *dryRun {
			return enc.Encode(map[string]any{"prefix": r.Prefix, "locks": covered})
		}
		if err := enc.Encode(map[string]any{"reservation": r, "grandfathered": covered}); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "reserved %s for %s (%d locks of other users grandfathered)\n", r.Prefix, r.TenantName, len(covered))
	case "remove":
		if err := svc.locks.Unreserve(ctx, pos[1]); err != nil {
			return cliError(err)
		}
	case "list":
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PREFIX\tUSER\tID\tSINCE")
		token := ""
		for {
			rs, next, err := svc.locks.ListReservations(ctx, 500, token)
			if err != nil {
				return err
			}
			for _, r := range rs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Prefix, r.TenantName, r.ID, r.CreatedAt.UTC().Format(time.RFC3339))
			}
			if token = next; token == "" {
				break
			}
		}
		return tw.Flush()
	}
	return nil
}
