package reports_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/reports"
)

// reportWorld is a seeded scenario whose every report row is predictable.
type reportWorld struct {
	alice, bob, carol string
	lock              map[string]string    // url -> id
	created           map[string]time.Time // url -> created_at
	denials           []denialRow
	dryRun, failedRun gc.Run
}

type denialRow struct {
	id                   int64
	at                   time.Time
	url                  string
	requesterID, request string
	ownerID, owner       string
}

const (
	urlAppRef  = "git.example.com/a/app-ref"
	urlBothRef = "git.example.com/a/both-ref"
	urlOrphan  = "git.example.com/a/orphan"
	urlCredRef = "git.example.com/b/cred-ref"
	urlYoung   = "git.example.com/b/young"
)

func seedReportWorld(t *testing.T, db *database.DB) reportWorld {
	t.Helper()
	ctx := context.Background()
	w := reportWorld{lock: map[string]string{}, created: map[string]time.Time{}}
	w.alice = dbtest.NewTenant(t, db, "alice").ID
	w.bob = dbtest.NewTenant(t, db, "bob").ID
	w.carol = dbtest.NewTenant(t, db, "carol").ID
	for _, l := range []struct{ url, owner, created string }{
		{urlAppRef, w.alice, "2025-01-01T00:00:00Z"},
		{urlBothRef, w.alice, "2025-01-02T00:00:00Z"},
		{urlOrphan, w.alice, "2025-01-03T00:00:00Z"},
		{urlCredRef, w.bob, "2025-01-04T00:00:00Z"},
		{urlYoung, w.bob, ""}, // ten seconds old
	} {
		var row struct {
			ID      string    `db:"id"`
			Created time.Time `db:"created_at"`
		}
		if err := db.GetContext(ctx, &row, `
			INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at)
			VALUES ($1, 1, $2, COALESCE(NULLIF($3, '')::timestamptz, now() - interval '10 seconds'))
			RETURNING id, created_at`, l.url, l.owner, l.created); err != nil {
			t.Fatal(err)
		}
		w.lock[l.url], w.created[l.url] = row.ID, row.Created
	}
	dbtest.NewApplication(t, db, w.alice, "app-1", w.lock[urlAppRef])
	dbtest.NewApplication(t, db, w.alice, "app-3", w.lock[urlAppRef])
	dbtest.NewApplication(t, db, w.alice, "app-2", w.lock[urlBothRef])
	dbtest.NewCredential(t, db, w.alice, "cred-2", w.lock[urlBothRef])
	dbtest.NewCredential(t, db, w.bob, "cred-1", w.lock[urlCredRef])

	// Denials: two recent ones, one too old for the report, and an event
	// that is not a denial.
	for _, d := range []struct {
		url, reqID, req, ownerID, owner, event, ago string
	}{
		{urlAppRef, w.bob, "bob", w.alice, "alice", "denied", "1 day"},
		{urlCredRef, w.carol, "carol", w.bob, "bob", "denied", "2 hours"},
		{urlCredRef, w.alice, "alice", w.bob, "bob", "denied", "31 days"},
		{urlOrphan, w.alice, "alice", w.alice, "alice", "acquired", "1 hour"},
	} {
		var row struct {
			ID int64     `db:"id"`
			At time.Time `db:"created_at"`
		}
		if err := db.GetContext(ctx, &row, `
			INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, now() - $7::interval) RETURNING id, created_at`,
			d.event, d.url, d.reqID, d.req, d.ownerID, d.owner, d.ago); err != nil {
			t.Fatal(err)
		}
		if d.event == "denied" && d.ago != "31 days" {
			w.denials = append(w.denials, denialRow{row.ID, row.At, d.url, d.reqID, d.req, d.ownerID, d.owner})
		}
	}
	// Newest first, as the report orders them.
	w.denials[0], w.denials[1] = w.denials[1], w.denials[0]

	// Runs: a real dry run (deletes nothing), and a failed run with cleaner
	// figures recorded by hand.
	o := gc.DefaultOptions(gc.TriggerCLI)
	o.BatchSize, o.MinAge, o.DryRun = 1000, time.Minute, true
	var err error
	collector := gc.New(db, svc(db).locks, gc.Config{Holder: "reporter", Logger: slog.New(slog.DiscardHandler)})
	if w.dryRun, err = collector.Collect(ctx, o); err != nil {
		t.Fatal(err)
	}
	var failedID string
	if err := db.GetContext(ctx, &failedID, `
		INSERT INTO gc_runs (kind, trigger, holder, status, min_age, batch_size, started_at, finished_at,
		                     scanned, deleted, batches, cleaner_scanned, cleaner_cleaned, cleaner_failed,
		                     cleaner_stale_initial, cleaner_rows_deleted, error, full_scan, candidates, cleared, flagged)
		VALUES ('gc', 'schedule', 'old-replica', 'failed', interval '5 minutes', 500,
		        '2025-02-01T00:00:00Z', '2025-02-01T00:00:01.2345Z', 10, 7, 2, 4, 3, 1, 2, 99, 'boom', true, 12, 5, 1)
		RETURNING id`); err != nil {
		t.Fatal(err)
	}
	if w.failedRun, err = collector.GetRun(ctx, failedID); err != nil {
		t.Fatal(err)
	}
	if r := w.failedRun; !r.Full || r.Candidates != 12 || r.Cleared != 5 || r.Flagged != 1 {
		t.Fatalf("GetRun read full %v candidates %d cleared %d flagged %d, want true 12 5 1", r.Full, r.Candidates, r.Cleared, r.Flagged)
	}
	return w
}

// reportJSON runs a report on db (inOneTx's pool: inside its transaction)
// and decodes its JSON output.
func reportJSON(t *testing.T, db *database.DB, name string) (cols []string, items []map[string]any) {
	t.Helper()
	rr, err := svc(db).reports.Open(context.Background(), name, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	var buf bytes.Buffer
	if err := rr.Write(&buf, reports.FormatJSON); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Report  string           `json:"report"`
		Columns []string         `json:"columns"`
		Items   []map[string]any `json:"items"`
	}
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("report %s: invalid JSON: %v\n%s", name, err, buf.String())
	}
	if out.Report != name {
		t.Fatalf("report = %q, want %q", out.Report, name)
	}
	return out.Columns, out.Items
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
func ageSeconds(now, created time.Time) json.Number {
	return json.Number(fmt.Sprint(int64(math.Floor(now.Sub(created).Seconds()))))
}
func num(v any) json.Number { return json.Number(fmt.Sprint(v)) }

func TestReportViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dbURL := dbtest.NewWithURL(t)
	w := seedReportWorld(t, db)

	// One transaction: now() is fixed, so ages are exact.
	tx := inOneTx(t, dbURL)
	var now time.Time
	if err := tx.GetContext(ctx, &now, `SELECT now()`); err != nil {
		t.Fatal(err)
	}

	lockRow := func(url, owner, ownerName string, apps, creds int) map[string]any {
		return map[string]any{
			"lock_id": w.lock[url], "git_repository_url": url, "normalizer_version": num(1),
			"owner_id": owner, "owner_name": ownerName,
			"application_refs": num(apps), "credential_refs": num(creds),
			"created_at": ts(w.created[url]), "age_seconds": ageSeconds(now, w.created[url]),
		}
	}
	orphanRow := func(url, owner, ownerName string, eligible bool) map[string]any {
		return map[string]any{
			"lock_id": w.lock[url], "git_repository_url": url, "owner_id": owner, "owner_name": ownerName,
			"created_at": ts(w.created[url]), "age_seconds": ageSeconds(now, w.created[url]), "eligible": eligible,
		}
	}
	runRow := func(r gc.Run, cleaner []any, errText any) map[string]any {
		return map[string]any{
			"run_id": r.ID, "kind": string(r.Kind), "trigger": string(r.Trigger), "status": string(r.Status),
			"dry_run": r.DryRun, "holder": r.Holder, "started_at": ts(r.StartedAt), "finished_at": ts(*r.FinishedAt),
			"duration_seconds": num(math.Round(r.FinishedAt.Sub(r.StartedAt).Seconds()*1000) / 1000),
			"min_age_seconds":  num(r.MinAgeSeconds), "batch_size": num(r.BatchSize),
			"scanned": num(r.Scanned), "deleted": num(r.Deleted), "batches": num(r.Batches),
			"cleaner_scanned": cleaner[0], "cleaner_cleaned": cleaner[1], "cleaner_failed": cleaner[2],
			"cleaner_stale_initial": cleaner[3], "cleaner_rows_deleted": cleaner[4], "error": errText,
			"full_scan": r.Full, "candidates": num(r.Candidates), "cleared": num(r.Cleared), "flagged": num(r.Flagged),
		}
	}
	noCleaner := []any{nil, nil, nil, nil, nil}

	tests := []struct {
		report    string
		setting   string // SET LOCAL repolock.gc_min_age
		wantCols  []string
		wantItems []map[string]any
	}{
		{
			report:   "ownership",
			wantCols: []string{"tenant_id", "tenant_name", "locks", "applications", "credentials", "unreferenced_locks"},
			wantItems: []map[string]any{
				{"tenant_id": w.alice, "tenant_name": "alice", "locks": num(3), "applications": num(3), "credentials": num(1), "unreferenced_locks": num(1)},
				{"tenant_id": w.bob, "tenant_name": "bob", "locks": num(2), "applications": num(0), "credentials": num(1), "unreferenced_locks": num(1)},
				{"tenant_id": w.carol, "tenant_name": "carol", "locks": num(0), "applications": num(0), "credentials": num(0), "unreferenced_locks": num(0)},
			},
		},
		{
			report: "locks",
			wantCols: []string{"lock_id", "git_repository_url", "normalizer_version", "owner_id", "owner_name",
				"application_refs", "credential_refs", "created_at", "age_seconds"},
			wantItems: []map[string]any{
				lockRow(urlAppRef, w.alice, "alice", 2, 0),
				lockRow(urlBothRef, w.alice, "alice", 1, 1),
				lockRow(urlOrphan, w.alice, "alice", 0, 0),
				lockRow(urlCredRef, w.bob, "bob", 0, 1),
				lockRow(urlYoung, w.bob, "bob", 0, 0),
			},
		},
		{
			report:   "orphan_locks",
			wantCols: []string{"lock_id", "git_repository_url", "owner_id", "owner_name", "created_at", "age_seconds", "eligible"},
			wantItems: []map[string]any{
				orphanRow(urlOrphan, w.alice, "alice", true),
				orphanRow(urlYoung, w.bob, "bob", false), // ten seconds old, min age 1 minute
			},
		},
		{
			report:  "orphan_locks",
			setting: "5s",
			wantItems: []map[string]any{
				orphanRow(urlOrphan, w.alice, "alice", true),
				orphanRow(urlYoung, w.bob, "bob", true),
			},
		},
		{
			report:  "orphan_locks",
			setting: "100 years",
			wantItems: []map[string]any{
				orphanRow(urlOrphan, w.alice, "alice", false),
				orphanRow(urlYoung, w.bob, "bob", false),
			},
		},
		{
			report:   "denials",
			wantCols: []string{"event_id", "denied_at", "git_repository_url", "requested_by_id", "requested_by", "owner_id", "owner_name", "denials", "last_denied_at", "reason", "reserved_prefix"},
			wantItems: func() []map[string]any {
				var out []map[string]any
				for _, d := range w.denials {
					out = append(out, map[string]any{
						"event_id": num(d.id), "denied_at": ts(d.at), "git_repository_url": d.url,
						"requested_by_id": d.requesterID, "requested_by": d.request, "owner_id": d.ownerID, "owner_name": d.owner,
						"denials": num(1), "last_denied_at": ts(d.at), "reason": "claimed", "reserved_prefix": nil,
					})
				}
				return out
			}(),
		},
		{
			report: "gc_runs",
			wantCols: []string{"run_id", "kind", "trigger", "status", "dry_run", "holder", "started_at", "finished_at",
				"duration_seconds", "min_age_seconds", "batch_size", "scanned", "deleted", "batches",
				"cleaner_scanned", "cleaner_cleaned", "cleaner_failed", "cleaner_stale_initial", "cleaner_rows_deleted", "error",
				"full_scan", "candidates", "cleared", "flagged"},
			wantItems: []map[string]any{
				runRow(w.dryRun, noCleaner, nil),
				runRow(w.failedRun, []any{num(4), num(3), num(1), num(2), num(99)}, "boom"),
			},
		},
	}
	for _, tt := range tests {
		name := tt.report
		if tt.setting != "" {
			name += " with min age " + tt.setting
		}
		t.Run(name, func(t *testing.T) {
			if tt.setting != "" {
				mustExec(t, tx, `SELECT set_config('repolock.gc_min_age', $1, true)`, tt.setting)
				defer mustExec(t, tx, `SELECT set_config('repolock.gc_min_age', '', true)`)
			}
			cols, items := reportJSON(t, tx, tt.report)
			if tt.wantCols != nil && !reflect.DeepEqual(cols, tt.wantCols) {
				t.Fatalf("columns = %v\nwant      %v", cols, tt.wantCols)
			}
			if len(items) != len(tt.wantItems) {
				t.Fatalf("%d rows, want %d: %v", len(items), len(tt.wantItems), items)
			}
			for i := range items {
				if !reflect.DeepEqual(items[i], tt.wantItems[i]) {
					t.Fatalf("row %d =\n  %v\nwant\n  %v", i, items[i], tt.wantItems[i])
				}
			}
		})
	}

	// The durations are what the runs say: the dry run's to the millisecond,
	// the failed run's 1.2345 s rounded to 1.235 (round half away from zero)
	// ... checked through the rows above; here the failed one literally.
	_, items := reportJSON(t, tx, "gc_runs")
	if got := items[1]["duration_seconds"]; got != json.Number("1.235") {
		t.Fatalf("failed run duration = %v, want 1.235", got)
	}
	// Every report above ran in the one transaction.
	var end time.Time
	if err := tx.GetContext(ctx, &end, `SELECT now()`); err != nil || !end.Equal(now) {
		t.Fatalf("now() = %v (%v), want %v: the reports did not run in one transaction", end, err, now)
	}
}

func TestReportFormats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice").ID
	bob := dbtest.NewTenant(t, db, "bob").ID
	id := dbtest.NewLock(t, db, alice, "git.example.com/a/x", time.Hour)
	dbtest.NewApplication(t, db, alice, "app", id)
	// Names in events are free text copied at the time: CSV must quote them.
	var ev struct {
		ID int64     `db:"id"`
		At time.Time `db:"created_at"`
	}
	if err := db.GetContext(ctx, &ev, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name)
		VALUES ('denied', 'git.example.com/a/x', $1, 'bob, "the" builder', $2, 'alice') RETURNING id, created_at`, bob, alice); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		report string
		format reports.Format
		limit  int
		want   string
	}{
		{"ownership", reports.FormatCSV, 0, "tenant_id,tenant_name,locks,applications,credentials,unreferenced_locks\n" +
			alice + ",alice,1,1,0,0\n" +
			bob + ",bob,0,0,0,0\n"},
		{"ownership", reports.FormatCSV, 1, "tenant_id,tenant_name,locks,applications,credentials,unreferenced_locks\n" +
			alice + ",alice,1,1,0,0\n"},
		{"ownership", reports.FormatTable, 1, "TENANT_ID                             TENANT_NAME  LOCKS  APPLICATIONS  CREDENTIALS  UNREFERENCED_LOCKS\n" +
			alice + "  alice        1      1             0            0\n"},
		{"ownership", reports.FormatJSON, 1, `{"report":"ownership","columns":["tenant_id","tenant_name","locks","applications","credentials","unreferenced_locks"],"items":[` +
			`{"tenant_id":"` + alice + `","tenant_name":"alice","locks":1,"applications":1,"credentials":0,"unreferenced_locks":0}]}` + "\n"},
		{"denials", reports.FormatCSV, 0, "event_id,denied_at,git_repository_url,requested_by_id,requested_by,owner_id,owner_name,denials,last_denied_at,reason,reserved_prefix\n" +
			fmt.Sprintf("%d,%s,git.example.com/a/x,%s,\"bob, \"\"the\"\" builder\",%s,alice,1,%s,claimed,\n", ev.ID, ts(ev.At), bob, alice, ts(ev.At))},
		{"denials", reports.FormatJSON, 0, fmt.Sprintf(`{"report":"denials","columns":["event_id","denied_at","git_repository_url","requested_by_id","requested_by","owner_id","owner_name","denials","last_denied_at","reason","reserved_prefix"],"items":[`+
			`{"event_id":%d,"denied_at":"%s","git_repository_url":"git.example.com/a/x","requested_by_id":"%s","requested_by":"bob, \"the\" builder","owner_id":"%s","owner_name":"alice","denials":1,"last_denied_at":"%s","reason":"claimed","reserved_prefix":null}]}`+"\n",
			ev.ID, ts(ev.At), bob, alice, ts(ev.At))},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %s limit %d", tt.report, tt.format, tt.limit), func(t *testing.T) {
			rr, err := svc(db).reports.Open(ctx, tt.report, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			defer rr.Close()
			var buf bytes.Buffer
			if err := rr.Write(&buf, tt.format); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Fatalf("output =\n%s\nwant\n%s", buf.String(), tt.want)
			}
		})
	}
}

func TestUnknownReport(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, err := svc(db).reports.Open(context.Background(), "users; DROP TABLE x", 0)
	if repolock.ErrorCode(err) != repolock.ENotFound {
		t.Fatalf("err = %v, want not_found", err)
	}
	want := `no report named "users; DROP TABLE x"; valid names: ownership, locks, orphan_locks, denials, gc_runs, normalizer_versions, rekey_conflicts, transfers, reservations`
	if msg := repolock.ErrorMessage(err); msg != want {
		t.Fatalf("message = %q, want %q", msg, want)
	}
	names := repolock.ErrorDetails(err)["valid_names"]
	if !reflect.DeepEqual(names, []string{"ownership", "locks", "orphan_locks", "denials", "gc_runs", "normalizer_versions", "rekey_conflicts", "transfers", "reservations"}) {
		t.Fatalf("valid_names = %v", names)
	}
	if _, err := svc(db).reports.Open(context.Background(), "locks", -1); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("negative limit: err = %v, want invalid_argument", err)
	}
	if _, err := reports.ParseFormat("xml", reports.FormatJSON, reports.FormatCSV); repolock.ErrorCode(err) != repolock.EInvalid ||
		repolock.ErrorMessage(err) != "format must be one of json, csv" {
		t.Fatalf("ParseFormat(xml) = %v", err)
	}
}

// The reporting role reads the views and nothing else.
func TestReportingRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	seedReportWorld(t, db)
	views := []string{"report_ownership", "report_locks", "report_orphan_locks", "report_denials", "report_gc_runs"}

	// As the role, every view answers with the rows the superuser sees.
	for _, v := range views {
		var asOwner, asRole int
		if err := db.GetContext(ctx, &asOwner, `SELECT count(*) FROM `+v); err != nil {
			t.Fatal(err)
		}
		err := db.WithTx(ctx, func(tx database.Tx) error {
			if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE repolock_reporting`); err != nil {
				return err
			}
			return tx.GetContext(ctx, &asRole, `SELECT count(*) FROM `+v)
		})
		if err != nil || asRole != asOwner || asOwner == 0 {
			t.Fatalf("%s as repolock_reporting: %d rows, err %v; owner sees %d", v, asRole, err, asOwner)
		}
	}
	// The re-keying views (migration 000006) are readable too.
	for _, v := range []string{"report_normalizer_versions", "report_rekey_conflicts", "report_transfers", "report_reservations"} {
		err := db.WithTx(ctx, func(tx database.Tx) error {
			if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE repolock_reporting`); err != nil {
				return err
			}
			var n int
			return tx.GetContext(ctx, &n, `SELECT count(*) FROM `+v)
		})
		if err != nil {
			t.Fatalf("%s as repolock_reporting: %v", v, err)
		}
	}
	// Tables are off limits, and the views are read-only for it.
	for _, q := range []string{
		`SELECT count(*) FROM rekey_conflicts`,
		`SELECT count(*) FROM normalizer_aliases`,
		`SELECT count(*) FROM applications`,
		`SELECT count(*) FROM RepositoryLockOwner`,
		`SELECT count(*) FROM api_tokens`,
		`SELECT count(*) FROM gc_runs`,
		`DELETE FROM report_denials`,
		`INSERT INTO report_gc_runs (run_id) VALUES (gen_random_uuid())`,
	} {
		err := db.WithTx(ctx, func(tx database.Tx) error {
			if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE repolock_reporting`); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, q)
			return err
		})
		if database.PQCode(err) != "42501" {
			t.Fatalf("%s as repolock_reporting: err = %v, want insufficient_privilege (42501)", q, err)
		}
	}
	var grants []string
	if err := db.SelectContext(ctx, &grants, `
		SELECT table_name || ':' || privilege_type FROM information_schema.role_table_grants
		WHERE grantee = 'repolock_reporting' AND table_catalog = current_database()
		ORDER BY table_name, privilege_type`); err != nil {
		t.Fatal(err)
	}
	want := []string{"report_denials:SELECT", "report_gc_runs:SELECT", "report_locks:SELECT", "report_normalizer_versions:SELECT",
		"report_orphan_locks:SELECT", "report_ownership:SELECT", "report_rekey_conflicts:SELECT", "report_reservations:SELECT", "report_transfers:SELECT"}
	if !slices.Equal(grants, want) {
		t.Fatalf("grants = %v, want %v", grants, want)
	}
}
