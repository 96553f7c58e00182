//go:build scale

package tests

import (
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// BenchmarkScaleOwnership is issue 28's targets for report_ownership (make
// bench-scale): SCALE_LOCKS (default 10,000,000) locks over SCALE_TENANTS
// (default 10,000) tenants, 99% referenced (half by an application, half
// by a credential), 1% not; then, through the binary:
//
//   - `repolock report ownership --format csv`, every tenant, process start
//     included (target: 5 s or less at 10M locks);
//   - the first HTTP page, GET /v1/admin/reports/ownership?limit=100
//     (target: 100 ms or less);
//   - both again with SCALE_DELTAS (default 20,000) unfolded delta rows,
//     what a busy fleet leaves between two folds (REPORTS_FOLD_INTERVAL);
//   - `repolock report verify` (the recount from the base tables: O(locks), not
//     a report) and the figures' one-time computation
//     (repolock_ownership_rebuild, what migration 000023 costs).
func BenchmarkScaleOwnership(b *testing.B) {
	locks := envIntOr("SCALE_LOCKS", 10_000_000)
	tenants := envIntOr("SCALE_TENANTS", 10_000)
	deltas := envIntOr("SCALE_DELTAS", 20_000)
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench-scale ownership %s: %s %s\n", fmtCount(locks), time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	dbURL := dbtest.NewDatabase(b, true)
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	run := func(q string, args ...any) {
		b.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			b.Fatalf("%v\n%s", err, q)
		}
	}
	start := time.Now()
	run(`SET synchronous_commit = off`)
	run(`INSERT INTO cluster_users (name) SELECT 'own-' || g FROM generate_series(0, $1 - 1) g`, tenants)
	run(`CREATE UNLOGGED TABLE scale_tenants AS SELECT (substr(name, 5))::int AS n, id FROM cluster_users WHERE name LIKE 'own-%'`)
	run(`CREATE UNIQUE INDEX ON scale_tenants (n)`)
	// Triggers off for the bulk load; the figures are computed once after.
	run(`SET session_replication_role = replica`)
	const chunk = 1_000_000
	for lo := 0; lo < locks; lo += chunk {
		hi := min(lo+chunk, locks)
		run(`INSERT INTO RepositoryLockOwner (id, git_repository_url, normalizer_version, cluster_user_id, gc_candidate, unreferenced)
			SELECT md5('lock' || g)::uuid, 'github.com/own-' || (g % $3) || '/repo-' || g, 1, t.id, g % 100 = 0, g % 100 = 0
			FROM generate_series($1::int, $2::int - 1) g JOIN scale_tenants t ON t.n = g % $3`, lo, hi, tenants)
		run(`INSERT INTO applications (id, cluster_user_id, name, repo_url, normalized_url)
			SELECT md5('app' || g)::uuid, t.id, 'app-' || g, 'https://github.com/own-' || (g % $3) || '/repo-' || g, 'github.com/own-' || (g % $3) || '/repo-' || g
			FROM generate_series($1::int, $2::int - 1) g JOIN scale_tenants t ON t.n = g % $3
			WHERE g % 100 <> 0 AND g % 2 = 1`, lo, hi, tenants)
		run(`INSERT INTO RepositoryLockApplication (application_id, lock_id)
			SELECT md5('app' || g)::uuid, md5('lock' || g)::uuid
			FROM generate_series($1::int, $2::int - 1) g WHERE g % 100 <> 0 AND g % 2 = 1`, lo, hi)
		run(`INSERT INTO repository_credentials (id, cluster_user_id, name, repo_url, normalized_url, secret_ref)
			SELECT md5('cred' || g)::uuid, t.id, 'cred-' || g, 'https://github.com/own-' || (g % $3) || '/repo-' || g, 'github.com/own-' || (g % $3) || '/repo-' || g, 'vault://x'
			FROM generate_series($1::int, $2::int - 1) g JOIN scale_tenants t ON t.n = g % $3
			WHERE g % 100 <> 0 AND g % 2 = 0`, lo, hi, tenants)
		run(`INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id)
			SELECT md5('cred' || g)::uuid, md5('lock' || g)::uuid
			FROM generate_series($1::int, $2::int - 1) g WHERE g % 100 <> 0 AND g % 2 = 0`, lo, hi)
		progress("%s of %s locks", fmtCount(hi), fmtCount(locks))
	}
	run(`RESET session_replication_role`)
	run(`DROP TABLE scale_tenants`)
	run(`VACUUM ANALYZE`)
	loadTime := time.Since(start)
	t0 := time.Now()
	run(`SELECT repolock_ownership_rebuild()`)
	rebuildTime := time.Since(t0)
	run(`VACUUM ANALYZE report_ownership_totals`)
	progress("data ready in %s, figures computed in %s", loadTime.Round(time.Second), rebuildTime.Round(time.Millisecond))

	s := startServerWith(b, serverOptions{DatabaseURL: dbURL, Env: []string{"GC_INTERVAL=0", "REPORTS_FOLD_INTERVAL=0", "REQUEST_TIMEOUT=10m", "LOG_LEVEL=warn"}})
	cli := func(args ...string) (time.Duration, string) {
		best := time.Duration(1<<63 - 1)
		var out string
		for range 3 {
			t0 := time.Now()
			o, errOut, code := runCLIB(b, dbURL, args...)
			d := time.Since(t0)
			if code != 0 {
				b.Fatalf("api %v: exit %d: %s", args, code, errOut)
			}
			best, out = min(best, d), o
		}
		return best, out
	}
	page := func() (p50, p99 time.Duration) {
		var ds []time.Duration
		for i := range 25 {
			t0 := time.Now()
			st, _, raw := s.doRaw(b, http.MethodGet, "/v1/admin/reports/ownership?limit=100", s.AdminToken, nil, nil)
			d := time.Since(t0)
			if st != http.StatusOK {
				b.Fatalf("first page: %d %s", st, raw)
			}
			if i >= 5 { // the first five warm the plan and the caches
				ds = append(ds, d)
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2], ds[len(ds)*99/100]
	}
	allTime, out := cli("report", "ownership", "--format", "csv")
	if n := strings.Count(out, "\n") - 1; n != tenants {
		b.Fatalf("repolock report ownership printed %d tenants, want %d", n, tenants)
	}
	p50, p99 := page()
	run(`INSERT INTO report_ownership_deltas (cluster_user_id, locks, applications, credentials, unreferenced_locks)
		SELECT id, 0, 0, 0, 0 FROM cluster_users, generate_series(1, ceil($1::float8 / $2)::int) LIMIT $1`, deltas, tenants)
	allDeltas, _ := cli("report", "ownership", "--format", "csv")
	p50d, p99d := page()
	t0 = time.Now()
	if _, errOut, code := runCLIB(b, dbURL, "report", "verify"); code != 0 {
		b.Fatalf("repolock report verify: exit %d: %s", code, errOut)
	}
	verifyTime := time.Since(t0)

	var w strings.Builder
	fmt.Fprintf(&w, "\nreport_ownership at %s locks, %s tenants (load average %s)\n", fmtCount(locks), fmtCount(tenants), loadAvg())
	fmt.Fprintf(&w, "  repolock report ownership (all tenants, csv, process start included): %7.0f ms\n", ms(allTime))
	fmt.Fprintf(&w, "  GET /v1/admin/reports/ownership?limit=100: p50 %.1f ms, p99 %.1f ms\n", ms(p50), ms(p99))
	fmt.Fprintf(&w, "  with %s unfolded deltas: all tenants %.0f ms; first page p50 %.1f ms, p99 %.1f ms\n", fmtCount(deltas), ms(allDeltas), ms(p50d), ms(p99d))
	fmt.Fprintf(&w, "  repolock report verify (recount, O(locks)): %.1f s; figures computed from scratch (migration 000023, repair): %.1f s\n", verifyTime.Seconds(), rebuildTime.Seconds())
	fmt.Fprintf(&w, "target: all %s tenants in 5 s or less: %.2f s\n", fmtCount(tenants), allTime.Seconds())
	fmt.Fprintf(&w, "target: first HTTP page (100 tenants) in 100 ms or less: p99 %.1f ms\n", ms(p99))
	b.Log(w.String())
	fmt.Fprint(os.Stderr, w.String())
	b.ReportMetric(allTime.Seconds(), "all_tenants_s")
	b.ReportMetric(ms(p99), "first_page_p99_ms")
}

// runCLIB runs the binary with args against dbURL (runCLI for benchmarks).
func runCLIB(b *testing.B, dbURL string, args ...string) (stdout, stderr string, code int) {
	b.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "LOG_FORMAT=text")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			return out.String(), errb.String(), ee.ExitCode()
		}
		b.Fatalf("run api %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}
