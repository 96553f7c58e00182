package tests

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/dbtest"
)

// gcProcess is one `repolock gc` process.
type gcProcess struct {
	cmd         *exec.Cmd
	out, errOut bytes.Buffer
	done        chan struct{}
	code        int
}

func startGC(t *testing.T, dbURL string, args ...string) *gcProcess {
	t.Helper()
	p := &gcProcess{done: make(chan struct{})}
	p.cmd = exec.Command(binPath, append([]string{"gc"}, args...)...)
	p.cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "LOG_FORMAT=json", "LOG_LEVEL=warn")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		if err := p.cmd.Wait(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				p.code = ee.ExitCode()
				return
			}
			p.code = -1
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

type gcSummary struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Scanned int64  `json:"scanned"`
	Deleted int64  `json:"deleted"`
}

func (p *gcProcess) summary(t *testing.T) gcSummary {
	t.Helper()
	var s gcSummary
	if err := json.Unmarshal(p.out.Bytes(), &s); err != nil {
		t.Fatalf("repolock gc stdout is not a JSON summary: %v\nstdout: %s\nstderr: %s", err, p.out.String(), p.errOut.String())
	}
	return s
}

// seedOrphans creates a tenant and n unreferenced locks an hour old, keyed
// under the binary's rules version (3): a stored version the binary cannot
// key under stops every command that loads the keying rules.
func seedOrphans(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	var tenant string
	if err := db.QueryRow(`INSERT INTO cluster_users (name) VALUES ('gc-e2e') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at)
		SELECT 'git.example.com/e2e/' || g, 3, $1, now() - interval '1 hour' FROM generate_series(1, $2) g`, tenant, n); err != nil {
		t.Fatal(err)
	}
}

// Two `repolock gc` processes started together (as two cron jobs or two
// CronJob pods would be): one collects, the other reports skipped, both
// exit 0.
//
// To make "together" deterministic, the test holds an EXCLUSIVE lock on
// gc_runs: whichever process takes the lease first then blocks recording its
// run, inside the lease, so the other one certainly finds the lease taken.
func TestTwoGCProcessesOneCollects(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, true)
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seedOrphans(t, db, 50)

	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`LOCK TABLE gc_runs IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	procs := []*gcProcess{startGC(t, dbURL), startGC(t, dbURL)}

	var first, second *gcProcess
	select {
	case <-procs[0].done:
		first, second = procs[0], procs[1]
	case <-procs[1].done:
		first, second = procs[1], procs[0]
	case <-time.After(2 * time.Minute):
		t.Fatal("neither repolock gc process finished while one held the lease")
	}
	s := first.summary(t)
	if first.code != 0 || s.Status != "skipped" || s.Reason != "another collection is running" || s.ID != "" ||
		first.errOut.String() != "skipped: another collection is running\n" {
		t.Fatalf("the second process: exit %d, %+v, stderr %q", first.code, s, first.errOut.String())
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the collecting repolock gc process did not finish")
	}
	s = second.summary(t)
	if second.code != 0 || s.Status != "succeeded" || s.Deleted != 50 || s.Scanned != 50 {
		t.Fatalf("the collecting process: exit %d, %+v, stderr %s", second.code, s, second.errOut.String())
	}
	var runs, locks, leases int
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM gc_runs), (SELECT count(*) FROM RepositoryLockOwner), (SELECT count(*) FROM gc_leases)`).
		Scan(&runs, &locks, &leases); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || locks != 0 || leases != 0 {
		t.Fatalf("gc_runs %d, locks %d, leases %d; want 1, 0, 0", runs, locks, leases)
	}
}

// Without the test holding anyone back: whatever the interleaving, both
// exit 0, each either collects or is skipped, and together they collect
// every orphan exactly once.
func TestConcurrentGCProcessesAlwaysExitZero(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, true)
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seedOrphans(t, db, 200)

	procs := []*gcProcess{startGC(t, dbURL, "--batch-size", "10"), startGC(t, dbURL, "--batch-size", "10"), startGC(t, dbURL, "--batch-size", "10")}
	var deleted int64
	for i, p := range procs {
		<-p.done
		s := p.summary(t)
		if p.code != 0 || (s.Status != "succeeded" && s.Status != "skipped") {
			t.Fatalf("process %d: exit %d, %+v, stderr %s", i, p.code, s, p.errOut.String())
		}
		deleted += s.Deleted
	}
	var events int64
	if err := db.QueryRow(`SELECT count(*) FROM repository_lock_events WHERE event = 'collected'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if deleted != 200 || events != 200 {
		t.Fatalf("deleted %d, collected events %d; want 200 each", deleted, events)
	}
}

// The HTTP and CLI faces against the real server: a bare acquire leaves a
// lock nothing references, POST /v1/admin/gc collects it, and the reports
// show the run.
func TestGCAndReportsEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, serverOptions{Env: []string{"GC_INTERVAL=0"}})
	ctx := t.Context()
	alice := s.tenant(t, "alice")
	admin := s.admin(t)

	if _, err := alice.AcquireLock(ctx, "https://github.com/alice/infra.git"); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	// Too young for the default minimum age: a dry run finds nothing.
	if run, err := admin.RunGC(ctx, client.GCOptions{DryRun: true}); err != nil || run.Scanned != 0 {
		t.Fatalf("dry run: %v %+v", err, run)
	}
	var zero time.Duration
	run, err := admin.RunGC(ctx, client.GCOptions{MinAge: &zero})
	if err != nil || run.Status != "succeeded" || run.Deleted != 1 {
		t.Fatalf("gc: %v %+v", err, run)
	}
	runID := run.ID

	// The exact CSV media type is raw HTTP behaviour.
	status, hdr, body := s.doRaw(t, http.MethodGet, "/v1/admin/reports/gc_runs?format=csv", s.AdminToken, nil, nil)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if status != http.StatusOK || hdr.Get("Content-Type") != "text/csv; charset=utf-8" || len(lines) != 3 ||
		!strings.HasPrefix(lines[1], runID+",gc,api,succeeded,false,") {
		t.Fatalf("gc_runs report: %d %v\n%s", status, hdr, body)
	}
	_, err = admin.GetReport(ctx, "nope", client.ReportOptions{})
	if ce := wantAPIError(t, "unknown report", err, http.StatusNotFound, client.CodeNotFound, ""); ce.Message != `no report named "nope"; valid names: ownership, locks, orphan_locks, denials, gc_runs, normalizer_versions, rekey_conflicts, transfers, reservations` {
		t.Fatalf("unknown report: %+v", ce)
	}

	out, errOut, code := runCLI(t, s.DatabaseURL, "report", "ownership", "--format", "csv")
	if code != 0 || !strings.Contains(out, ",alice,0,0,0,0\n") {
		t.Fatalf("repolock report ownership: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, s.DatabaseURL, "report", "gc_runs", "--format", "json")
	var rep struct {
		Items []map[string]any `json:"items"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Items) != 2 || rep.Items[0]["run_id"] != runID || rep.Items[0]["deleted"] != 1.0 {
		t.Fatalf("repolock report gc_runs: exit %d\n%s\n%s", code, out, errOut)
	}
}
