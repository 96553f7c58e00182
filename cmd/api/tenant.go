package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"
)

func runTenant(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "user", "create NAME | list | token NAME | revoke NAME | delete NAME",
		"create: creates a tenant and prints its token once.\n"+
			"list:   lists tenants.\n"+
			"token:  issues one more token for a tenant and prints it once.\n"+
			"revoke: revokes every token of a tenant.\n"+
			"delete: deletes a tenant with its applications, credentials and tokens and releases\n"+
			"        its locks, in one transaction; prints what was removed as JSON.")
	var common commonFlags
	display := fs.String("display-name", "", "with create: the tenant's display name")
	common.register(fs, usesPool)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := wantAction(fs, pos, "create NAME, list, token NAME, revoke NAME or delete NAME",
		map[string][]string{"create": {"NAME"}, "list": nil, "token": {"NAME"}, "revoke": {"NAME"}, "delete": {"NAME"}}); err != nil {
		return err
	}
	action, rest := pos[0], pos[1:]
	db, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	svc, err := loadServices(ctx, db)
	if err != nil {
		return err
	}
	switch action {
	case "create":
		u, token, err := svc.tenants.Create(ctx, rest[0], *display)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "created user %s (%s); its token is shown only this once:\n", u.Name, u.ID)
		fmt.Fprintln(e.stdout, token)
	case "list":
		us, err := svc.tenants.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tID\tDISPLAY NAME\tCREATED")
		for _, u := range us {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Name, u.ID, u.DisplayName, u.CreatedAt.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case "token":
		token, err := svc.tenants.IssueToken(ctx, rest[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, token)
	case "revoke":
		n, err := svc.tenants.RevokeTokens(ctx, rest[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "revoked %d token(s) of %s\n", n, rest[0])
	case "delete":
		d, err := svc.apps.DeleteTenant(ctx, rest[0])
		if err != nil {
			return err
		}
		return json.NewEncoder(e.stdout).Encode(d)
	}
	return nil
}
