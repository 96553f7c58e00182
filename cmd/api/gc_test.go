package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/repostate"
)

// gcCLI runs the api binary's commands in-process against one test
// database.
type gcCLI struct {
	t    *testing.T
	db   *database.DB
	env  map[string]string
	user string
}

func newGCCLI(t *testing.T) *gcCLI {
	t.Helper()
	db, url := dbtest.NewWithURL(t)
	c := &gcCLI{t: t, db: db, env: map[string]string{"DATABASE_URL": url, "LOG_LEVEL": "warn"}}
	if err := db.GetContext(context.Background(), &c.user, `INSERT INTO cluster_users (name) VALUES ('alice') RETURNING id`); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *gcCLI) run(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errb syncBuffer
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return c.env[k] }}
	code = run(ctx, e, args)
	return code, out.String(), errb.String()
}

// orphans creates n unreferenced locks an hour old, keyed under the
// binary's rules version (a stored version it cannot key under stops
// every command that loads the keying rules).
func (c *gcCLI) orphans(n int) {
	c.t.Helper()
	if _, err := c.db.ExecContext(context.Background(), `
		INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at)
		SELECT 'git.example.com/o/' || g, $3, $1, now() - interval '1 hour' FROM generate_series(1, $2) g`, c.user, n, normalize.Version); err != nil {
		c.t.Fatal(err)
	}
}

func (c *gcCLI) count(query string) int {
	c.t.Helper()
	var n int
	if err := c.db.GetContext(context.Background(), &n, query); err != nil {
		c.t.Fatal(err)
	}
	return n
}

type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed at the next write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

// waitForLine waits, woken by each write (no polling), until a line of the
// output contains every one of parts; it fails the test if the command
// exits first (a value on exited) or nothing matches within a minute.
func (s *syncBuffer) waitForLine(t *testing.T, exited <-chan int, parts ...string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		s.mu.Lock()
		out := s.b.String()
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		s.mu.Unlock()
		for _, line := range strings.Split(out, "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return
			}
		}
		select {
		case <-changed:
		case code := <-exited:
			t.Fatalf("the command exited (%d) before logging %q:\n%s", code, parts, out)
		case <-deadline:
			t.Fatalf("no line with %q within a minute:\n%s", parts, out)
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func decodeRun(t *testing.T, stdout string) gc.Run {
	t.Helper()
	var r gc.Run
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("stdout is not a JSON run: %v\n%s", err, stdout)
	}
	return r
}

func TestGCCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newGCCLI(t)
	c.orphans(5)
	metrics := filepath.Join(t.TempDir(), "gc.prom")

	code, out, errOut := c.run(ctx, "gc", "--dry-run", "--batch-size", "2")
	if r := decodeRun(t, out); code != 0 || r.Status != gc.StatusSucceeded || !r.DryRun || r.Scanned != 5 || r.Deleted != 0 || r.Batches != 3 {
		t.Fatalf("gc --dry-run: exit %d, %+v, stderr %s", code, r, errOut)
	}
	if n := c.count(`SELECT count(*) FROM RepositoryLockOwner`); n != 5 {
		t.Fatalf("dry run deleted locks: %d left", n)
	}

	code, out, errOut = c.run(ctx, "gc", "--min-age", "30m", "--metrics-textfile", metrics)
	r := decodeRun(t, out)
	if code != 0 || r.Status != gc.StatusSucceeded || r.Trigger != gc.TriggerCLI || r.Deleted != 5 || r.MinAgeSeconds != 1800 ||
		r.Cleaner == nil || *r.Cleaner != (repostate.CleanerResult{}) || errOut != "" {
		t.Fatalf("gc: exit %d, %+v, stderr %q", code, r, errOut)
	}
	prom, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"repolock_gc_collected_locks_total 5\n", `repolock_gc_runs_total{dry_run="false",kind="gc",result="succeeded"} 1` + "\n",
		// The failed series is there at 0: the textfile alert on the last
		// run (docs/operations.md) has a series to compare.
		`repolock_gc_runs_total{dry_run="false",kind="gc",result="failed"} 0` + "\n"} {
		if !strings.Contains(string(prom), want) {
			t.Fatalf("metrics textfile lacks %q:\n%s", want, prom)
		}
	}

	// Another holder has the lease: skipped, exit 0.
	if _, err := c.db.ExecContext(ctx, `INSERT INTO gc_leases (name, holder, expires_at) VALUES ('gc', 'cron-elsewhere', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = c.run(ctx, "gc")
	if r := decodeRun(t, out); code != 0 || r.Status != gc.StatusSkipped || r.Reason != gc.ReasonAnotherRunning ||
		errOut != "skipped: another collection is running\n" {
		t.Fatalf("gc while another holds the lease: exit %d, %+v, stderr %q", code, r, errOut)
	}
	code, out, errOut = c.run(ctx, "clean")
	if r := decodeRun(t, out); code != 0 || r.Kind != gc.KindClean || r.Status != gc.StatusSkipped {
		t.Fatalf("clean while another holds the lease: exit %d, %+v, stderr %q", code, r, errOut)
	}
	if _, err := c.db.ExecContext(ctx, `DELETE FROM gc_leases`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = c.run(ctx, "clean")
	if r := decodeRun(t, out); code != 0 || r.Kind != gc.KindClean || r.Status != gc.StatusSucceeded || r.Cleaner == nil {
		t.Fatalf("clean: exit %d, %+v, stderr %q", code, r, errOut)
	}
}

func TestGCCommandErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newGCCLI(t)
	tests := []struct {
		args       []string
		code       int
		wantStderr string
	}{
		{[]string{"gc", "--batch-size", "0"}, 2, "repolock gc: batch size must be from 1 to 100000, got 0\n"},
		{[]string{"gc", "--min-age", "-1s"}, 2, "repolock gc: min age must not be negative, got -1s\n"},
		{[]string{"gc", "--timeout", "0s"}, 2, "repolock gc: --timeout must be positive\n"},
		{[]string{"gc", "extra"}, 2, ""},
		{[]string{"report", "nope"}, 2, "repolock report: no report named \"nope\"; valid names: ownership, locks, orphan_locks, denials, gc_runs, normalizer_versions, rekey_conflicts, transfers, reservations\n"},
		{[]string{"report", "locks", "--format", "xml"}, 2, "repolock report: format must be one of table, csv, json\n"},
		{[]string{"report"}, 2, ""},
	}
	for _, tt := range tests {
		code, _, errOut := c.run(ctx, tt.args...)
		if code != tt.code || (tt.wantStderr != "" && errOut != tt.wantStderr) {
			t.Fatalf("api %v: exit %d, stderr %q; want %d, %q", tt.args, code, errOut, tt.code, tt.wantStderr)
		}
	}
	if n := c.count(`SELECT count(*) FROM gc_runs`); n != 0 {
		t.Fatalf("rejected commands recorded %d runs", n)
	}
	c.env["DATABASE_URL"] = strings.Replace(c.env["DATABASE_URL"], "127.0.0.1:5432", "127.0.0.1:1", 1)
	c.env["CONNECT_TIMEOUT"] = "0" // one attempt (TestCommandsWaitForTheDatabase waits)
	if code, _, errOut := c.run(ctx, "gc"); code != 1 || !strings.HasPrefix(errOut, "repolock gc: database: ping:") {
		t.Fatalf("gc without a database: exit %d, stderr %q; want 1", code, errOut)
	}
}

func TestReportCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newGCCLI(t)
	c.orphans(2)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"report", "ownership", "--format", "csv"},
			"tenant_id,tenant_name,locks,applications,credentials,unreferenced_locks\n" + c.user + ",alice,2,0,0,2\n"},
		{[]string{"report", "ownership"},
			"TENANT_ID                             TENANT_NAME  LOCKS  APPLICATIONS  CREDENTIALS  UNREFERENCED_LOCKS\n" +
				c.user + "  alice        2      0             0            2\n"},
		{[]string{"report", "ownership", "--format", "json"},
			`{"report":"ownership","columns":["tenant_id","tenant_name","locks","applications","credentials","unreferenced_locks"],"items":[` +
				`{"tenant_id":"` + c.user + `","tenant_name":"alice","locks":2,"applications":0,"credentials":0,"unreferenced_locks":2}]}` + "\n"},
		{[]string{"report", "locks", "--format", "csv", "--limit", "1"}, ""}, // checked below
	}
	for _, tt := range tests {
		code, out, errOut := c.run(ctx, tt.args...)
		if code != 0 {
			t.Fatalf("api %v: exit %d, stderr %s", tt.args, code, errOut)
		}
		if tt.want != "" && out != tt.want {
			t.Fatalf("api %v:\n%s\nwant\n%s", tt.args, out, tt.want)
		}
		if tt.want == "" {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2 || lines[0] != "lock_id,git_repository_url,normalizer_version,owner_id,owner_name,application_refs,credential_refs,created_at,age_seconds" ||
				!strings.Contains(lines[1], fmt.Sprintf(",git.example.com/o/1,%d,", normalize.Version)+c.user+",alice,0,0,") {
				t.Fatalf("api %v:\n%s", tt.args, out)
			}
		}
	}
}

// api report verify: exit 0 and "ok" when the figures are exact; a
// corrupted total (and a wrong lock flag) is printed per tenant and figure,
// exit 1; --repair recomputes them; api report fold folds.
func TestReportVerifyCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newGCCLI(t)
	c.orphans(2)
	if code, out, errOut := c.run(ctx, "report", "fold"); code != 0 || !strings.HasPrefix(out, "folded ") {
		t.Fatalf("fold: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := c.run(ctx, "report", "verify"); code != 0 || !strings.HasPrefix(out, "ok: the ownership figures of 1 tenants match") {
		t.Fatalf("verify: exit %d, %q, %q", code, out, errOut)
	}
	if _, err := c.db.ExecContext(ctx, `
		WITH t AS (UPDATE report_ownership_totals SET applications = applications + 3)
		UPDATE RepositoryLockOwner SET unreferenced = false WHERE id = (SELECT min(id::text)::uuid FROM RepositoryLockOwner)`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := c.run(ctx, "report", "verify")
	want := "TENANT_NAME  TENANT_ID                             FIGURE              REPORTED  ACTUAL  DRIFT\n" +
		"alice        " + c.user + "  applications        3         0       +3\n" +
		"alice        " + c.user + "  unreferenced_locks  1         2       -1\n" +
		"alice        " + c.user + "  lock_flags_wrong    0         1       -1\n" +
		"drift: 1 of 1 tenants\n"
	if code != 1 || out != want || errOut != "repolock report: ownership figures drift for 1 of 1 tenants\n" {
		t.Fatalf("verify with drift: exit %d, stdout\n%s\nwant\n%s\nstderr %q", code, out, want, errOut)
	}
	if code, out, _ := c.run(ctx, "report", "verify", "--format", "json"); code != 1 || !strings.Contains(out, `"ok":false`) || !strings.Contains(out, `"bad_flags":1`) {
		t.Fatalf("verify --format json: exit %d, %s", code, out)
	}
	if code, _, errOut := c.run(ctx, "report", "verify", "--repair"); code != 1 || !strings.Contains(errOut, "1 lock flags corrected") {
		t.Fatalf("verify --repair: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut := c.run(ctx, "report", "verify"); code != 0 {
		t.Fatalf("verify after the repair: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, _ := c.run(ctx, "report", "ownership", "--repair"); code != 2 {
		t.Fatalf("--repair on a report: exit %d, want 2", code)
	}
}

// serve runs the scheduled collections: orphans are collected without any
// request, and GC_INTERVAL=0 disables them.
func TestServeRunsScheduledGC(t *testing.T) {
	t.Parallel()
	c := newGCCLI(t)
	c.orphans(3)
	c.env["ADMIN_TOKEN"] = "rla_test_admin_token_of_32_bytes_or_more"
	c.env["LISTEN_ADDR"] = "127.0.0.1:0"
	c.env["GC_INTERVAL"] = "50ms"
	c.env["GC_MIN_AGE"] = "1m"
	c.env["LOG_LEVEL"] = "info"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		e := &env{stdout: &syncBuffer{}, stderr: &stderr, getenv: func(k string) string { return c.env[k] }}
		done <- run(ctx, e, []string{"serve"})
	}()
	// The collector's own report of the scheduled run that collected them.
	stderr.waitForLine(t, done, `"msg":"gc: run finished"`, `"trigger":"schedule"`, `"deleted":3`)
	if n := c.count(`SELECT count(*) FROM RepositoryLockOwner`); n != 0 {
		t.Fatalf("%d locks left after the run that collected the orphans", n)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	if n := c.count(`SELECT count(*) FROM gc_runs WHERE trigger = 'schedule' AND deleted = 3 AND min_age = interval '1 minute'`); n != 1 {
		t.Fatalf("scheduled runs that collected the orphans = %d, want 1", n)
	}
	if n := c.count(`SELECT count(*) FROM gc_runs WHERE status = 'running'`); n != 0 {
		t.Fatalf("%d runs left running after serve stopped", n)
	}
}

func TestServeWithGCDisabled(t *testing.T) {
	t.Parallel()
	c := newGCCLI(t)
	c.env["ADMIN_TOKEN"] = "rla_test_admin_token_of_32_bytes_or_more"
	c.env["LISTEN_ADDR"] = "127.0.0.1:0"
	c.env["GC_INTERVAL"] = "0"
	c.env["LOG_LEVEL"] = "info"
	ctx, cancel := context.WithCancel(context.Background())
	var errOut string
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		e := &env{stdout: &syncBuffer{}, stderr: &stderr, getenv: func(k string) string { return c.env[k] }}
		done <- run(ctx, e, []string{"serve"})
	}()
	stderr.waitForLine(t, done, `"msg":"listening"`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	errOut = stderr.String()
	if !strings.Contains(errOut, "gc: scheduled collections are disabled (GC_INTERVAL=0)") || strings.Contains(errOut, "gc: scheduled collections\"") {
		t.Fatalf("logs:\n%s", errOut)
	}
}

// A database whose flags are wrong (here: unreferenced locks without the
// GC candidate flag, as after a data-only restore with triggers disabled):
// a run does not see those locks; --full --dry-run counts them and --full
// flags and collects them.
func TestGCCommandFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newGCCLI(t)
	c.orphans(3)
	if _, err := c.db.ExecContext(ctx, `UPDATE RepositoryLockOwner SET gc_candidate = false`); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := c.run(ctx, "gc")
	if r := decodeRun(t, out); code != 0 || r.Full || r.Candidates != 0 || r.Deleted != 0 || r.Flagged != 0 {
		t.Fatalf("gc: exit %d, %+v, stderr %s", code, r, errOut)
	}
	code, out, errOut = c.run(ctx, "gc", "--full", "--dry-run")
	if r := decodeRun(t, out); code != 0 || !r.Full || !r.DryRun || r.Flagged != 3 || r.Scanned != 3 || r.Deleted != 0 {
		t.Fatalf("gc --full --dry-run: exit %d, %+v, stderr %s", code, r, errOut)
	}
	if n := c.count(`SELECT count(*) FROM RepositoryLockOwner WHERE gc_candidate`); n != 0 {
		t.Fatalf("a dry run flagged %d locks", n)
	}
	code, out, errOut = c.run(ctx, "gc", "--full")
	r := decodeRun(t, out)
	if code != 0 || !r.Full || r.Flagged != 3 || r.Deleted != 3 {
		t.Fatalf("gc --full: exit %d, %+v, stderr %s", code, r, errOut)
	}
	if got, err := gc.New(c.db, testServices(t, c.db).locks, gc.Config{}).GetRun(ctx, r.ID); err != nil || !got.Full || got.Flagged != 3 || got.Deleted != 3 {
		t.Fatalf("recorded run %+v, %v", got, err)
	}
	if n := c.count(`SELECT count(*) FROM RepositoryLockOwner`); n != 0 {
		t.Fatalf("%d locks left after gc --full", n)
	}
}

// TestGCRetentionOff: a negative EVENT_RETENTION and GC_RUN_RETENTION keep
// lock events and GC runs forever (retention off), as the same values do in
// gc.Retention; the defaults delete the same rows.
func TestGCRetentionOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newGCCLI(t)
	if _, err := c.db.ExecContext(ctx, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, created_at)
		SELECT 'acquired', 'git.example.com/old/' || g, $1, 'alice', now() - interval '100 days' FROM generate_series(1, 3) g`, c.user); err != nil {
		t.Fatal(err)
	}
	if _, err := c.db.ExecContext(ctx, `
		INSERT INTO gc_runs (kind, trigger, holder, status, min_age, batch_size, started_at, finished_at)
		SELECT 'gc', 'cli', 'h', 'succeeded', interval '1 minute', 10, now() - interval '100 days' + g * interval '1 second',
		       now() - interval '100 days' + g * interval '1 second'
		FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	c.env["GC_RUNS_KEPT"] = "1"
	c.env["EVENT_RETENTION"] = "-1s"
	c.env["GC_RUN_RETENTION"] = "-1s"
	if code, _, errOut := c.run(ctx, "gc"); code != 0 {
		t.Fatalf("gc with retention off: exit %d, %s", code, errOut)
	}
	if n := c.count(`SELECT count(*) FROM repository_lock_events`); n != 3 {
		t.Fatalf("retention off: %d events left, want the 3 of 100 days ago", n)
	}
	if n := c.count(`SELECT count(*) FROM gc_runs`); n != 4 {
		t.Fatalf("retention off: %d GC runs left, want the 3 of 100 days ago and this one", n)
	}
	delete(c.env, "EVENT_RETENTION")
	delete(c.env, "GC_RUN_RETENTION")
	if code, _, errOut := c.run(ctx, "gc"); code != 0 {
		t.Fatalf("gc with the default retention: exit %d, %s", code, errOut)
	}
	if n := c.count(`SELECT count(*) FROM repository_lock_events`); n != 0 {
		t.Fatalf("default retention: %d events of 100 days ago left", n)
	}
	if n := c.count(`SELECT count(*) FROM gc_runs WHERE started_at < now() - interval '90 days'`); n != 0 {
		t.Fatalf("default retention: %d GC runs of 100 days ago left", n)
	}
}
