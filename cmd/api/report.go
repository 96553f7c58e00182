package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/reports"
)

func runReport(ctx context.Context, e *env, args []string) error {
	var list strings.Builder
	for _, r := range reports.All() {
		fmt.Fprintf(&list, "  %-13s %s\n", r.Name, r.Description)
	}
	fs := newFlagSet(e, "report", "NAME",
		"Prints one of the SQL reporting views (documented in docs/reporting.md):\n"+list.String())
	var common commonFlags
	format := fs.String("format", "table", "table, csv or json")
	limit := fs.Int("limit", 0, "print at most this many rows (0: all)")
	common.register(fs)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errUsage
	}
	f, err := reports.ParseFormat(*format, reports.FormatTable, reports.FormatCSV, reports.FormatJSON)
	if err != nil {
		return &exitError{code: 2, err: errors.New(repolock.ErrorMessage(err))}
	}
	if *limit < 0 {
		return &exitError{code: 2, err: errors.New("--limit must not be negative")}
	}
	if _, err := reports.Lookup(pos[0]); err != nil {
		return &exitError{code: 2, err: errors.New(repolock.ErrorMessage(err))}
	}
	db, _, err := common.openReports(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := reports.New(db).Open(ctx, pos[0], *limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	w := bufio.NewWriter(e.stdout)
	if err := rows.Write(w, f); err != nil {
		return err
	}
	return w.Flush()
}
