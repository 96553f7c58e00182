// Package reports serves the SQL reporting views of db/migrations/000005_gc.up.sql,
// 000006_rekey.up.sql, the transfers and the reservations migrations (ownership, locks, orphan_locks, denials, gc_runs,
// normalizer_versions, rekey_conflicts, transfers, reservations; documented in
// docs/reporting.md) as streamed table, CSV or JSON output. The views are
// readable by the repolock_reporting role, so a BI tool can read them without
// the service.
package reports

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// Report is one of the SQL reporting views (db/migrations/000005_gc.up.sql,
// documented column by column in docs/reporting.md).
type Report struct {
	Name        string `json:"name"`
	View        string `json:"view"`
	Description string `json:"description"`
	orderBy     string
}

// reports lists the reports in the order they are documented. Each orderBy
// follows an index or a small view.
var reports = []Report{
	{Name: "ownership", View: "report_ownership", orderBy: "tenant_name",
		Description: "per tenant: locks owned, applications, credentials and unreferenced locks"},
	{Name: "locks", View: "report_locks", orderBy: "git_repository_url",
		Description: "each lock: key, owner, reference counts and age"},
	{Name: "orphan_locks", View: "report_orphan_locks", orderBy: "created_at, git_repository_url",
		Description: "unreferenced locks, with whether GC would collect them now (eligible)"},
	{Name: "denials", View: "report_denials", orderBy: "denied_at DESC, event_id DESC",
		Description: "refused claims of the last 30 days: who asked, who owns, which key, when"},
	{Name: "gc_runs", View: "report_gc_runs", orderBy: "started_at DESC, run_id DESC",
		Description: "recorded GC and clean runs, newest first"},
	{Name: "normalizer_versions", View: "report_normalizer_versions", orderBy: "normalizer_version, normalizer_rules",
		Description: "locks per normalizer version (older ones are re-keyed by `repolock rekey`; the alias fingerprint column is empty for locks keyed since rules v3)"},
	{Name: "rekey_conflicts", View: "report_rekey_conflicts", orderBy: "detected_at, conflict_id",
		Description: "open re-keying conflicts and rejected URLs: both tenants, both URLs, the new key"},
	{Name: "transfers", View: "report_transfers", orderBy: "at DESC, event_id DESC",
		Description: "lock transfers and handovers (offered, accepted, declined, withdrawn, expired): from, to, who acted, newest first"},
	{Name: "reservations", View: "report_reservations", orderBy: "prefix",
		Description: "reserved key prefixes and the tenant each belongs to"},
}

// All returns every report.
func All() []Report { return append([]Report(nil), reports...) }

// Names returns the names of every report.
func Names() []string {
	names := make([]string, len(reports))
	for i, r := range reports {
		names[i] = r.Name
	}
	return names
}

// Lookup returns the named report; an unknown name is a not_found
// error whose details list the valid names.
func Lookup(name string) (Report, error) {
	for _, r := range reports {
		if r.Name == name {
			return r, nil
		}
	}
	shown := name
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	return Report{}, &repolock.Error{
		Code:    repolock.ENotFound,
		Message: fmt.Sprintf("no report named %q; valid names: %s", shown, strings.Join(Names(), ", ")),
		Details: map[string]any{"valid_names": Names()},
	}
}

// Format is an output format of a report.
type Format string

// Formats.
const (
	FormatTable Format = "table"
	FormatCSV   Format = "csv"
	FormatJSON  Format = "json"
)

// ParseFormat checks a format name against the allowed ones.
func ParseFormat(s string, allowed ...Format) (Format, error) {
	names := make([]string, len(allowed))
	for i, f := range allowed {
		if string(f) == s {
			return f, nil
		}
		names[i] = string(f)
	}
	return "", repolock.Errorf(repolock.EInvalid, "format must be one of %s", strings.Join(names, ", "))
}

// Rows is an open report: its columns and a cursor over its rows.
// Rows are streamed, never held in memory all at once. Close it.
type Rows struct {
	Report  Report
	Columns []string
	rows    *sqlx.Rows
}

// Service runs the reports on one database: the primary, or the read
// replica of REPORTS_DATABASE_URL. cmd/api builds one with New.
type Service struct {
	db *database.DB
}

// New returns the service reading db. db is required: a nil one is a
// wiring error and panics at start-up.
func New(db *database.DB) *Service {
	if db == nil {
		panic("reports.New: a pool is required")
	}
	return &Service{db: db}
}

// Open runs the named report. limit > 0 caps the rows returned.
// Errors (unknown report, database) come back here, before anything is
// written.
func (s *Service) Open(ctx context.Context, name string, limit int) (_ *Rows, err error) {
	defer repolock.WrapOp(&err, "reports.Open")
	r, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, repolock.Errorf(repolock.EInvalid, "limit must not be negative")
	}
	var lim any // NULL: LIMIT ALL
	if limit > 0 {
		lim = limit
	}
	// The view name and ORDER BY come from the fixed table above, never
	// from the caller.
	rows, err := s.db.QueryxContext(ctx, "SELECT * FROM "+r.View+" ORDER BY "+r.orderBy+" LIMIT $1", lim)
	if err != nil {
		return nil, database.MapError(err)
	}
	cols, err := rows.Columns()
	if err != nil {
		rows.Close()
		return nil, database.MapError(err)
	}
	return &Rows{Report: r, Columns: cols, rows: rows}, nil
}

// Close releases the cursor.
func (rr *Rows) Close() (err error) {
	defer repolock.WrapOp(&err, "reports.Rows.Close")
	return rr.rows.Close()
}

// next returns the next row's values, normalized: nil, string, int64,
// float64, bool or time.Time.
func (rr *Rows) next() ([]any, bool, error) {
	if !rr.rows.Next() {
		return nil, false, database.MapError(rr.rows.Err())
	}
	vals, err := rr.rows.SliceScan()
	if err != nil {
		return nil, false, database.MapError(err)
	}
	for i, v := range vals {
		if b, ok := v.([]byte); ok {
			vals[i] = string(b)
		}
	}
	return vals, true, nil
}

// Write streams the remaining rows to w in the given format:
//
//   - table: aligned columns with a header (for terminals),
//   - csv: RFC 4180 with a header row,
//   - json: {"report":NAME,"columns":[...],"items":[{column: value, ...}]},
//     keys in column order.
//
// NULL is empty in table and csv, null in json; times are RFC 3339 in UTC.
func (rr *Rows) Write(w io.Writer, format Format) (err error) {
	defer repolock.WrapOp(&err, "reports.Rows.Write")
	switch format {
	case FormatTable:
		return rr.writeTable(w)
	case FormatCSV:
		return rr.writeCSV(w)
	case FormatJSON:
		return rr.writeJSON(w)
	}
	return repolock.Errorf(repolock.EInvalid, "unknown format %q", format)
}

func (rr *Rows) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := make([]string, len(rr.Columns))
	for i, c := range rr.Columns {
		header[i] = strings.ToUpper(c)
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for {
		vals, ok, err := rr.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		cells := make([]string, len(vals))
		for i, v := range vals {
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(text(v, time.RFC3339))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func (rr *Rows) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(rr.Columns); err != nil {
		return err
	}
	for {
		vals, ok, err := rr.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		rec := make([]string, len(vals))
		for i, v := range vals {
			rec[i] = text(v, time.RFC3339Nano)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func (rr *Rows) writeJSON(w io.Writer) error {
	bw := bufio.NewWriter(w)
	name, _ := json.Marshal(rr.Report.Name)
	cols, _ := json.Marshal(rr.Columns)
	keys := make([][]byte, len(rr.Columns))
	for i, c := range rr.Columns {
		keys[i], _ = json.Marshal(c)
	}
	fmt.Fprintf(bw, `{"report":%s,"columns":%s,"items":[`, name, cols)
	for n := 0; ; n++ {
		vals, ok, err := rr.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		bw.WriteByte('{')
		for i, v := range vals {
			if i > 0 {
				bw.WriteByte(',')
			}
			bw.Write(keys[i])
			bw.WriteByte(':')
			if t, ok := v.(time.Time); ok {
				v = t.UTC().Format(time.RFC3339Nano)
			}
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			bw.Write(b)
		}
		bw.WriteByte('}')
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// text renders a value for table and csv output.
func text(v any, timeLayout string) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case time.Time:
		return v.UTC().Format(timeLayout)
	default:
		return fmt.Sprint(v)
	}
}
