package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/rekey"
)

// runRekey re-keys stale locks (internal/rekey).
func runRekey(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "rekey", "",
		"Re-keys the locks made under an older normalizer version or another set of configured aliases:\n"+
			"re-normalizes the stored repo_url of every Application and Credential on such a lock, moves\n"+
			"references to the new keys, releases emptied locks and records \"rekeyed\" lock events.\n"+
			"Conflicts (two tenants' locks collapsing into one key) and URLs the current rules reject are\n"+
			"reported and left untouched (also in `repolock report rekey_conflicts`). Safe while the API serves\n"+
			"traffic and alongside GC; a second run moves nothing. Prints the report as JSON on stdout.\n"+
			"Exits 0 when nothing stays stale, 3 when conflicts or rejected URLs remain, 1 on failure.")
	var (
		common    commonFlags
		dryRun    = fs.Bool("dry-run", false, "report what would be re-keyed; change nothing")
		batchSize = fs.Int("batch-size", rekey.DefaultBatchSize, fmt.Sprintf("stale locks moved per transaction, 1..%d", rekey.MaxBatchSize))
		quiet     = fs.Bool("quiet", false, "print no progress on stderr")
	)
	common.register(fs, usesPool)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(fs, pos); err != nil {
		return err
	}
	if *batchSize < 1 || *batchSize > rekey.MaxBatchSize {
		return &exitError{code: 2, err: fmt.Errorf("--batch-size must be from 1 to %d", rekey.MaxBatchSize)}
	}
	logger, db, err := common.connect(ctx, e)
	if err != nil {
		return err
	}
	defer db.Close()
	svc, err := loadServices(ctx, db)
	if err != nil {
		return err
	}
	opts := rekey.Options{DryRun: *dryRun, BatchSize: *batchSize, Logger: logger}
	if !*quiet {
		start := time.Now()
		opts.Progress = func(r rekey.Report) {
			fmt.Fprintf(e.stderr, "rekey: %d stale locks checked (%d re-keyed, %d moved references, %d conflicts, %d rejected) in %s\n",
				r.StaleLocks, r.Rekeyed, r.MovedReferences, len(r.Conflicts), len(r.Rejected), time.Since(start).Round(time.Millisecond))
		}
	}
	rep, err := svc.rekey.Run(ctx, svc.locks.Keying(), opts)
	if err != nil {
		if rep.Batches > 0 {
			fmt.Fprintf(e.stderr, "rekey: stopped after %d stale locks (%d re-keyed); run it again to continue\n", rep.StaleLocks, rep.Rekeyed)
		}
		return err
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if left := len(rep.Conflicts) + len(rep.Rejected); left > 0 {
		return &exitError{code: 3, err: fmt.Errorf("%d conflicts and %d rejected URLs keep locks on their old keys (repolock report rekey_conflicts)",
			len(rep.Conflicts), len(rep.Rejected))}
	}
	return nil
}

// runAlias manages the configured normalizer aliases.
func runAlias(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "alias", "[--dry-run] list | add FROM TO | remove FROM",
		"Configured (per-deployment) normalizer aliases: every key under the endpoint FROM is rewritten to\n"+
			"the same rest under TO; endpoints in key syntax host[+port][/prefix], e.g.\n"+
			"  repolock alias add gitlab.example.com+2222 gitlab.example.com\n"+
			"  repolock alias add bitbucket.example.com+7999 bitbucket.example.com/scm\n"+
			"A change re-keys the locks it moves in the same transaction (no `repolock rekey` needed), and is\n"+
			"refused (exit 3, nothing changed) when it would give a repository two owners; it prints the\n"+
			"change as JSON. --dry-run prints the plan and changes nothing.")
	var common commonFlags
	common.register(fs, usesPool)
	common.registerPatience(fs)
	dryRun := fs.Bool("dry-run", false, "print what the change would move, and its conflicts; change nothing")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := wantAction(fs, pos, "list, add FROM TO or remove FROM",
		map[string][]string{"list": nil, "add": {"FROM", "TO"}, "remove": {"FROM"}}); err != nil {
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
	switch pos[0] {
	case "add", "remove":
		var ch rekey.AliasChange
		if pos[0] == "add" {
			ch, err = svc.rekey.AddAlias(ctx, pos[1], pos[2], *dryRun)
		} else {
			ch, err = svc.rekey.RemoveAlias(ctx, pos[1], *dryRun)
		}
		if repolock.IsCode(err, repolock.EAliasConflict) {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(ch)
			return &exitError{code: 3, err: errors.New(repolock.ErrorMessage(err))}
		}
		if err != nil {
			return cliError(err)
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ch); err != nil {
			return err
		}
		if !*dryRun {
			fmt.Fprintf(e.stderr, "%s %s -> %s: %d locks re-keyed; servers key under the new set at once (their next claim reloads it)\n",
				ch.Action, ch.Alias.From, ch.Alias.To, ch.RekeyedLocks)
		}
	case "list":
		as, err := svc.rekey.ListAliases(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FROM\tTO\tID\tSINCE")
		for _, a := range as {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.From, a.To, a.ID, a.CreatedAt.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	}
	return nil
}

// cliError makes an invalid argument exit 2 and anything else 1.
func cliError(err error) error {
	if repolock.IsCode(err, repolock.EInvalid) {
		return &exitError{code: 2, err: errors.New(repolock.ErrorMessage(err))}
	}
	return err
}
