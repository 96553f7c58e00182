package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/locks"
)

// runLocks is the operators' view of ownership locks.
func runLocks(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "locks", "owner URL... | list USER | transfer [-references refuse|delete] LOCK_ID|URL USER",
		"owner:    prints who holds the lock on each repository URL (any spelling); exits 1 when a URL is free or invalid.\n"+
			"list:     prints the locks of a tenant with their reference counts.\n"+
			"transfer: moves a lock to the tenant USER, never leaving it unowned; refused (exit 1, listing them) while the\n"+
			"          old owner has Applications or Credentials on it, unless -references delete deletes them.")
	references := fs.String("references", "refuse", "transfer: what to do with the old owner's references: refuse or delete")
	var common commonFlags
	common.register(fs, usesPool)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := wantAction(fs, pos, "owner URL..., list USER or transfer LOCK_ID|URL USER",
		map[string][]string{"owner": {"URL..."}, "list": {"USER"}, "transfer": {"LOCK_ID|URL", "USER"}}); err != nil {
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
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	switch pos[0] {
	case "owner":
		n := svc.locks.Rules() // with the deployment's configured aliases
		fmt.Fprintln(tw, "NORMALIZED URL\tOWNER\tLOCK\tAPPLICATIONS\tCREDENTIALS\tSINCE")
		failed := 0
		for i, raw := range pos[1:] {
			key, err := n.RepoURL(raw)
			if err != nil {
				failed++
				fmt.Fprintf(e.stderr, "repolock locks owner: argument %d: %v\n", i+1, err)
				continue
			}
			o, err := svc.locks.OwnerOf(ctx, key)
			if repolock.IsCode(err, repolock.ENotFound) {
				failed++
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\n", key)
				continue
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", o.NormalizedURL, o.TenantName, o.LockID, o.Applications, o.Credentials, o.CreatedAt.UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if failed > 0 {
			return &exitError{code: 1, err: fmt.Errorf("%d of %d URLs are free or invalid", failed, len(pos)-1)}
		}
	case "list":
		u, err := svc.tenants.GetByName(ctx, pos[1])
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "LOCK\tNORMALIZED URL\tAPPLICATIONS\tCREDENTIALS\tSINCE")
		for token := ""; ; {
			page, next, err := svc.locks.List(ctx, u.ID, 500, token)
			if err != nil {
				return err
			}
			for _, l := range page {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", l.ID, l.NormalizedURL, l.Applications, l.RepositoryCredentials, l.CreatedAt.UTC().Format(time.RFC3339))
			}
			if token = next; token == "" {
				break
			}
		}
		return tw.Flush()
	case "transfer":
		return transferLock(ctx, e, svc, pos[1], pos[2], *references)
	}
	return nil
}

// transferLock is `repolock locks transfer`: lock is a lock id or any spelling
// of a repository URL. The actor recorded is the operator at the CLI
// ("cli:USER@HOST").
func transferLock(ctx context.Context, e *env, svc *services, lock, to, references string) error {
	lockID := lock
	if _, err := uuid.Parse(lock); err != nil {
		key, err := svc.locks.Rules().RepoURL(lock)
		if err != nil {
			return err
		}
		o, err := svc.locks.OwnerOf(ctx, key)
		if err != nil {
			return err
		}
		lockID = o.LockID
	}
	host, _ := os.Hostname()
	actor := "cli:" + e.getenv("USER") + "@" + host
	tr, err := svc.locks.Transfer(ctx, locks.TransferRequest{LockID: lockID, To: to, References: references, Actor: actor})
	if err != nil {
		if refs, ok := repolock.ErrorDetails(err)["references"].([]locks.Reference); ok {
			for _, r := range refs {
				fmt.Fprintf(e.stderr, "in use by %s %s (%s)\n", r.Kind, r.Name, r.ID)
			}
		}
		return err
	}
	fmt.Fprintf(e.stdout, "transferred %s (%s) from %s to %s", tr.NormalizedURL, tr.LockID, tr.From, tr.To)
	if n := len(tr.DeletedReferences); n > 0 {
		fmt.Fprintf(e.stdout, "; deleted %d references:", n)
		for _, r := range tr.DeletedReferences {
			fmt.Fprintf(e.stdout, " %s/%s", r.Kind, r.Name)
		}
	}
	fmt.Fprintln(e.stdout)
	return nil
}
