package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/reports"
)

func runReport(ctx context.Context, e *env, args []string) error {
	// One aligned list: the widest name sets the column, descriptions
	// wrap under themselves.
	type entry struct{ name, desc string }
	entries := []entry{}
	for _, r := range reports.All() {
		entries = append(entries, entry{r.Name, r.Description})
	}
	entries = append(entries,
		entry{"verify", "recount the ownership figures from the base tables, print any drift per tenant; exit 1 on drift (--repair: recompute them; writers wait meanwhile)"},
		entry{"fold", "fold the ownership figures' deltas into their totals now"})
	var list strings.Builder
	width := 0
	for _, r := range entries {
		width = max(width, len(r.name))
	}
	for _, r := range entries {
		line := fmt.Sprintf("  %-*s  ", width, r.name)
		indent := len(line)
		for i, word := range strings.Fields(r.desc) {
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
	fs := newFlagSet(e, "report", "NAME | verify | fold",
		"Prints one of the SQL reporting views (documented in docs/reporting.md), or checks their figures:\n"+list.String())
	var common commonFlags
	format := fs.String("format", "table", "table, csv or json")
	limit := fs.Int("limit", 0, "print at most this many rows (0: all)")
	repair := fs.Bool("repair", false, "verify: recompute the figures from the base tables after printing the drift")
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
	switch pos[0] {
	case "verify":
		if f == reports.FormatCSV {
			return &exitError{code: 2, err: errors.New("verify prints table or json")}
		}
		return runReportVerify(ctx, e, &common, f, *repair)
	case "fold":
		db, err := common.open(ctx)
		if err != nil {
			return err
		}
		defer db.Close()
		n, err := reports.New(db).Fold(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "folded %d deltas\n", n)
		return nil
	}
	if *repair {
		return &exitError{code: 2, err: errors.New("--repair is for api report verify")}
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

// foldOwnership folds the ownership report's deltas into its totals every
// interval (0: never) until ctx ends, on the primary (db, never the reports
// replica). A failure (the database down, startup not done) is retried at
// the next tick; the figures stay exact meanwhile, only reading them costs
// more.
func foldOwnership(ctx context.Context, rs *reports.Service, interval time.Duration, logger *slog.Logger) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := rs.Fold(ctx); err != nil {
			if !failing && ctx.Err() == nil {
				logger.Warn("reports: folding the ownership figures failed; retrying at the next tick", "error", err.Error())
			}
			failing = true
			continue
		}
		failing = false
	}
}

// runReportVerify recounts the ownership figures on the primary and prints
// the drift: exit 0 when every figure is exact, 1 on drift (after
// repairing it with repair).
func runReportVerify(ctx context.Context, e *env, common *commonFlags, f reports.Format, repair bool) error {
	db, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	rs := reports.New(db)
	v, err := rs.Verify(ctx)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(e.stdout)
	if f == reports.FormatJSON {
		b, _ := json.Marshal(struct {
			reports.Verification
			OK bool `json:"ok"`
		}{v, len(v.Drift) == 0})
		w.Write(append(b, '\n'))
	} else {
		writeDrift(w, v)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(v.Drift) == 0 {
		return nil
	}
	if repair {
		n, err := rs.Repair(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "repaired: figures recomputed from the base tables (%d lock flags corrected)\n", n)
	}
	return &exitError{code: 1, err: fmt.Errorf("ownership figures drift for %d of %d tenants", len(v.Drift), v.Tenants)}
}

// writeDrift prints one line per wrong figure of each drifting tenant.
func writeDrift(w *bufio.Writer, v reports.Verification) {
	if len(v.Drift) == 0 {
		fmt.Fprintf(w, "ok: the ownership figures of %d tenants match the base tables (recounted in %s)\n", v.Tenants, v.Took.Round(time.Millisecond))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT_NAME\tTENANT_ID\tFIGURE\tREPORTED\tACTUAL\tDRIFT")
	for _, d := range v.Drift {
		for _, c := range []struct {
			name             string
			reported, actual int64
		}{
			{"locks", d.Reported.Locks, d.Actual.Locks},
			{"applications", d.Reported.Applications, d.Actual.Applications},
			{"credentials", d.Reported.Credentials, d.Actual.Credentials},
			{"unreferenced_locks", d.Reported.UnreferencedLocks, d.Actual.UnreferencedLocks},
			{"lock_flags_wrong", 0, d.BadFlags},
		} {
			if c.reported != c.actual {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%+d\n", d.TenantName, d.TenantID, c.name, c.reported, c.actual, c.reported-c.actual)
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "drift: %d of %d tenants\n", len(v.Drift), v.Tenants)
}
