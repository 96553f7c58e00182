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
			"Exits 1 when any URL is invalid, naming its position and the reason on stderr.", normalize.Version))
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return errUsage
	}
	failed := 0
	for i, raw := range pos {
		key, err := normalize.RepoURL(raw)
		if err != nil {
			failed++
			fmt.Fprintf(e.stderr, "api normalize: argument %d: %v\n", i+1, err)
			continue
		}
		fmt.Fprintln(e.stdout, key)
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d URLs are invalid", failed, len(pos))}
	}
	return nil
}
