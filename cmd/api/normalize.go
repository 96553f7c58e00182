package main

import (
	"context"
	"fmt"

	"github.com/repolock/repolock/internal/normalize"
)

// runNormalize prints the lock key of each URL, one per line. An invalid URL
// is reported on stderr by position (never by echoing it: it may hold a
// token) and makes the exit status 1; the other URLs are still printed.
func runNormalize(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "normalize", "URL...",
		fmt.Sprintf("Prints the normalized lock key of each URL, one per line (rules version %d).\n"+
			"With a database (DATABASE_URL or --database-url) it keys under the deployment's configured\n"+
			"aliases, as the server does; without one, under the built-in rules only, and says so on stderr.\n"+
			"Exits 1 when any URL is invalid, naming its position and the reason on stderr.", normalize.Version))
	var common commonFlags
	common.register(fs, usesPool)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, "normalize", pos, "URL..."); err != nil {
		return err
	}
	n, err := normalizer(ctx, e, &common)
	if err != nil {
		return err
	}
	failed := 0
	for i, raw := range pos {
		key, err := n.RepoURL(raw)
		if err != nil {
			failed++
			fmt.Fprintf(e.stderr, "repolock normalize: argument %d: %v\n", i+1, err)
			continue
		}
		fmt.Fprintln(e.stdout, key)
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d URLs are invalid", failed, len(pos))}
	}
	return nil
}

// normalizer returns the rules `repolock normalize` keys under: the deployment's
// (the built-in rules plus the stored aliases, as the server keys) when a
// database is configured, else the built-in rules, with a note on stderr
// that configured aliases were not applied.
func normalizer(ctx context.Context, e *env, common *commonFlags) (*normalize.Normalizer, error) {
	if common.databaseURL == "" {
		common.databaseURL = e.getenv("DATABASE_URL")
	}
	if common.databaseURL == "" {
		fmt.Fprintln(e.stderr, "repolock normalize: no database (DATABASE_URL or --database-url): keyed under the built-in rules only; configured aliases are not applied")
		return normalize.Default(), nil
	}
	db, err := common.open(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	svc, err := loadServices(ctx, db)
	if err != nil {
		return nil, err
	}
	return svc.locks.Rules(), nil
}
