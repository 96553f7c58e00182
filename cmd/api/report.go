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
	// One aligned list: the widest name sets the column, descriptions
	// wrap under themselves.
	var list strings.Builder
	width := 0
	for _, r := range reports.All() {
		width = max(width, len(r.Name))
	}
	for _, r := range reports.All() {
		line := fmt.Sprintf("  %-*s  ", width, r.Name)
		indent := len(line)
		for i, word := range strings.Fields(r.Description) {
			if i > 0 && len(line)+1+len(word) > helpWidth {
				list.WriteString(line + "\n")
				line = strings.Repeat(" ", indent) + word
				continue
			}
			if i > 0 {
				line += " "
			}
			line += word
		}
		list.WriteString(line + "\n")
	}
	fs := newFlagSet(e, "report", "NAME",
		"Prints one of the SQL reporting views (documented in docs/reporting.md):\n"+list.String())
	var common commonFlags
	format := fs.String("format", "table", "table, csv or json")
	limit := fs.Int("limit", 0, "print at most this many rows (0: all)")
	common.register(fs, usesPool|usesReportsURL)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, "report", pos, "NAME"); err != nil {
		return err
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
