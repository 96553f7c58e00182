//go:build scale

package tests

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// Capacity at scale (make bench-scale): the same figures at SCALE_SMALL
// (default 100,000) and SCALE_LOCKS (default 10,000,000) locks over
// SCALE_TENANTS (default 10,000) tenants, in one run, each on its own
// database filled with set-based SQL (generate_series): 99% of the locks
// referenced by an application or a credential (half each), 1% unreferenced
// and an hour old, and SCALE_EVENTS (default 1,000,000)
// repository_lock_events. Then, through the real binary:
//
//   - acquire and create-application: p50/p99 and rate of new claims by 8
//     clients;
//   - the first page of a tenant's locks;
//   - report queries (ownership for 100 tenants, the last 1000 denials);
//   - GC (repolock gc, the process start included): one run collecting the 1%
//     unreferenced locks; one right after it with nothing to collect (its
//     scan passes over the index entries of the locks just deleted, not yet
//     vacuumed); then, after a VACUUM of the lock table (what autovacuum
//     does in time), SCALE_GC_FIXED (default 1,000) applications spread over
//     the id space are deleted with plain SQL (the reference triggers flag
//     their locks: the time of that statement is printed too) and one run
//     collects the same number of locks at both sizes; and one run with
//     nothing to collect (the floor);
//   - disk size per table and index;
//   - rules changes (issue 24): the locks are keyed under rules version 1,
//     1% of them on the host gitlab-ssh.scale.example and 1% under a key
//     their URL no longer has; `repolock alias add gitlab-ssh.scale.example
//     gitlab.scale.example` re-keys the first 1% (target: 30 s or less at
//     10M), then `repolock rekey` checks every lock and moves the other 1%
//     (target: 10 minutes or less at 10M);
//   - the latest migration applied to the full table: migrate down 1, then
//     the time of migrate up.
//
// Targets (printed, not asserted): acquire p99 at the large size within
// 1.5x of the small; GC time proportional to the unreferenced locks, not to
// the table: the same number of unreferenced locks takes the same time at
// both sizes.
// scaleKey and scaleURL are the key and the URL of lock g in SQL ($3 the
// number of tenants): 1% on gitlab-ssh.scale.example (an alias moves
// them), 1% under a key their URL no longer has (repolock rekey moves them).
const (
	scaleKey = `CASE WHEN g % 100 = 37 THEN 'gitlab-ssh.scale.example' ELSE 'github.com' END || '/scale-' || (g % $3) || '/repo-' || g || CASE WHEN g % 100 = 51 THEN '.legacy' ELSE '' END`
	scaleURL = `CASE WHEN g % 100 = 37 THEN 'ssh://git@gitlab-ssh.scale.example' ELSE 'https://github.com' END || '/scale-' || (g % $3) || '/repo-' || g`
)

func BenchmarkScale(b *testing.B) {
	small := envIntOr("SCALE_SMALL", 100_000)
	large := envIntOr("SCALE_LOCKS", 10_000_000)
	tenants := envIntOr("SCALE_TENANTS", 10_000)
	events := envIntOr("SCALE_EVENTS", 1_000_000)
	fixed := envIntOr("SCALE_GC_FIXED", 1000)
	var results []*scaleResult
	for _, n := range []int{small, large} {
		results = append(results, runScale(b, n, tenants, events, fixed))
	}
	s, l := results[0], results[1]
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-50s %16s %16s %8s\n", "", fmtCount(s.locks)+" locks", fmtCount(l.locks)+" locks", "ratio")
	row := func(name string, a, c float64, unit string) {
		fmt.Fprintf(&out, "%-50s %14.2f%-2s %14.2f%-2s %7.2fx\n", name, a, unit, c, unit, c/a)
	}
	if !scaleRulesOnly() {
		for _, op := range []string{"acquire", "create application", "list locks (first page)", "report ownership (100 tenants)", "report denials (1000)"} {
			a, c := s.ops[op], l.ops[op]
			row(op+" p50", ms(a.p50), ms(c.p50), "ms")
			row(op+" p99", ms(a.p99), ms(c.p99), "ms")
			row(op+" rate", a.rate, c.rate, "/s")
		}
		gcRows := func(name string, a, c gcStats) {
			row(name+" time", a.time.Seconds(), c.time.Seconds(), "s ")
			if a.Deleted > 0 || c.Deleted > 0 {
				row(name+": locks deleted", float64(a.Deleted), float64(c.Deleted), "  ")
			}
			row(name+": candidates visited", float64(a.Candidates), float64(c.Candidates), "  ")
			if a.Deleted > 0 && c.Deleted > 0 {
				row(name+": time per deleted lock", 1e6*a.time.Seconds()/float64(a.Deleted), 1e6*c.time.Seconds()/float64(c.Deleted), "µs")
			}
		}
		gcRows("GC of the 1% unreferenced", s.gcPercent, l.gcPercent)
		gcRows("GC right after, nothing to collect", s.gcAfter, l.gcAfter)
		row("VACUUM RepositoryLockOwner", s.vacuumTime.Seconds(), l.vacuumTime.Seconds(), "s ")
		row(fmt.Sprintf("DELETE %s applications (triggers)", fmtCount(s.fixed)), s.unrefTime.Seconds(), l.unrefTime.Seconds(), "s ")
		gcRows(fmt.Sprintf("GC of %s unreferenced", fmtCount(s.fixed)), s.gcFixed, l.gcFixed)
		gcRows("GC with nothing to collect", s.gcIdle, l.gcIdle)
	}
	row("repolock alias add (1% of the locks on its host)", s.aliasTime.Seconds(), l.aliasTime.Seconds(), "s ")
	row("  locks it re-keyed", float64(s.aliasRekeyed), float64(l.aliasRekeyed), "  ")
	row("repolock rekey (every lock stale, 1% moving)", s.rekeyTime.Seconds(), l.rekeyTime.Seconds(), "s ")
	row("  locks checked per second", float64(s.rekeyChecked)/s.rekeyTime.Seconds(), float64(l.rekeyChecked)/l.rekeyTime.Seconds(), "/s")
	row("  references moved to another key", float64(s.rekeyMoved), float64(l.rekeyMoved), "  ")
	row("migrate up, latest migration (whole table)", s.migrateTime.Seconds(), l.migrateTime.Seconds(), "s ")
	row("data generation", s.loadTime.Seconds(), l.loadTime.Seconds(), "s ")
	fmt.Fprintln(&out)
	if !scaleRulesOnly() {
		fmt.Fprintf(&out, "target: acquire p99 at %s within 1.5x of at %s: %.2fx\n", fmtCount(l.locks), fmtCount(s.locks), ms(l.ops["acquire"].p99)/ms(s.ops["acquire"].p99))
	}
	fmt.Fprintf(&out, "target: repolock alias add on the host of 1%% of %s locks in 30 s or less: %.1f s\n", fmtCount(l.locks), l.aliasTime.Seconds())
	fmt.Fprintf(&out, "target: repolock rekey of %s locks (1%% moving) in 10 minutes or less: %.1f min\n", fmtCount(l.locks), l.rekeyTime.Minutes())
	if !scaleRulesOnly() {
		fmt.Fprintf(&out, "target: GC time proportional to the unreferenced locks, not to the table size:\n")
		fmt.Fprintf(&out, "  the same %s unreferenced locks in a %.0fx larger table took %.2fx the time\n",
			fmtCount(l.fixed), float64(l.locks)/float64(s.locks), l.gcFixed.time.Seconds()/s.gcFixed.time.Seconds())
		fmt.Fprintf(&out, "  1%%: %.1fx the deletions took %.1fx the time\n",
			float64(l.gcPercent.Deleted)/float64(max(s.gcPercent.Deleted, 1)), l.gcPercent.time.Seconds()/s.gcPercent.time.Seconds())
		fmt.Fprintf(&out, "\ncandidate scan at %s locks:\n%s", fmtCount(l.locks), l.plan)
	}
	fmt.Fprintf(&out, "\ndisk sizes at %s locks:\n%s", fmtCount(l.locks), l.sizes)
	fmt.Fprintf(&out, "\ndisk sizes at %s locks:\n%s", fmtCount(s.locks), s.sizes)
	b.Log(out.String())
	fmt.Fprint(os.Stderr, out.String())
	if !scaleRulesOnly() {
		b.ReportMetric(ms(l.ops["acquire"].p99)/ms(s.ops["acquire"].p99), "acquire_p99_ratio")
		b.ReportMetric(l.gcFixed.time.Seconds()/s.gcFixed.time.Seconds(), "gc_fixed_ratio")
	}
	b.ReportMetric(l.aliasTime.Seconds(), "alias_s")
	b.ReportMetric(l.rekeyTime.Seconds(), "rekey_s")
}

// gcStats is one repolock gc run: its wall time (process start included) and
// figures.
type gcStats struct {
	time       time.Duration
	Status     string `json:"status"`
	Candidates int64  `json:"candidates"`
	Scanned    int64  `json:"scanned"`
	Deleted    int64  `json:"deleted"`
	Cleared    int64  `json:"cleared"`
	Batches    int64  `json:"batches"`
}

type opStats struct {
	p50, p99 time.Duration
	rate     float64
}

type scaleResult struct {
	locks, fixed                        int
	ops                                 map[string]opStats
	gcPercent, gcAfter, gcFixed, gcIdle gcStats
	vacuumTime, unrefTime, migrateTime  time.Duration
	aliasTime, rekeyTime                time.Duration
	aliasRekeyed, rekeyChecked          int
	rekeyMoved                          int
	loadTime                            time.Duration
	sizes, plan                         string
}

func runScale(b *testing.B, locks, tenants, events, fixed int) *scaleResult {
	b.Helper()
	r := &scaleResult{locks: locks, fixed: fixed, ops: map[string]opStats{}}
	dbURL := dbtest.NewDatabase(b, true)
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one session: its SET applies to every statement
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench-scale %s: %s %s\n", fmtCount(locks), time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	exec := func(q string, args ...any) {
		b.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			b.Fatalf("%v\n%s", err, q)
		}
	}

	// The data, set-based, the way a bulk load is done: the indexes and
	// constraints of the tables being filled are dropped first and rebuilt
	// afterwards with the definitions Postgres reports (index builds sort
	// once instead of updating the B-trees row by row), and every id is
	// computed from g (md5 as a uuid: random-looking, like
	// gen_random_uuid), so references need no join. Lock g belongs to
	// tenant g % tenants; g % 100 = 0 is unreferenced (and so a GC
	// candidate: gc_candidate is true exactly there), odd g has an
	// application, even g a credential.
	start := time.Now()
	exec(`SET synchronous_commit = off`)
	exec(`SET maintenance_work_mem = '1GB'`)
	exec(`SET max_parallel_maintenance_workers = 2`)
	exec(`INSERT INTO cluster_users (name) SELECT 'scale-' || g FROM generate_series(0, $1 - 1) g`, tenants)
	exec(`CREATE UNLOGGED TABLE scale_tenants AS SELECT (substr(name, 7))::int AS n, id FROM cluster_users WHERE name LIKE 'scale-%'`)
	exec(`CREATE UNIQUE INDEX ON scale_tenants (n)`)
	const tables = `'repositorylockowner', 'applications', 'repository_credentials', 'repositorylockapplication', 'repositorylockrepositorycredential', 'repository_lock_events'`
	var rebuild []string
	{
		// Constraints backed by an index (primary and unique keys) and
		// foreign keys, in the order they can be re-added; then the
		// plain indexes.
		rows, err := db.Query(`
SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid)),
       format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname)
FROM pg_constraint c
WHERE c.contype IN ('p', 'u', 'f')
  AND (c.conrelid::regclass::text IN (` + tables + `) OR c.confrelid::regclass::text IN (` + tables + `))
ORDER BY c.contype = 'f', c.conname`)
		if err != nil {
			b.Fatal(err)
		}
		var drops []string
		for rows.Next() {
			var add, drop string
			if err := rows.Scan(&add, &drop); err != nil {
				b.Fatal(err)
			}
			rebuild = append(rebuild, add)
			drops = append([]string{drop}, drops...) // foreign keys first
		}
		rows.Close()
		rows, err = db.Query(`
SELECT pg_get_indexdef(i.indexrelid), format('DROP INDEX %s', i.indexrelid::regclass)
FROM pg_index i
WHERE i.indrelid::regclass::text IN (` + tables + `)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var create, drop string
			if err := rows.Scan(&create, &drop); err != nil {
				b.Fatal(err)
			}
			rebuild = append(rebuild, create)
			drops = append(drops, drop)
		}
		rows.Close()
		for _, q := range drops {
			exec(q)
		}
	}
	// The triggers are off during the load (the ownership figures' would
	// look up every new reference's lock without the indexes): the
	// figures are computed once afterwards (repolock_ownership_rebuild).
	exec(`SET session_replication_role = replica`)
	const chunk = 2_000_000
	for lo := 0; lo < locks; lo += chunk {
		hi := min(lo+chunk, locks)
		exec(`INSERT INTO RepositoryLockOwner (id, git_repository_url, normalizer_version, cluster_user_id, created_at, gc_candidate, unreferenced)
			SELECT md5('lock' || g)::uuid, `+scaleKey+`, 1, t.id, now() - interval '2 hours' + g * interval '1 microsecond',
			       g % 100 = 0, g % 100 = 0
			FROM generate_series($1::int, $2::int - 1) g JOIN scale_tenants t ON t.n = g % $3`, lo, hi, tenants)
		exec(`INSERT INTO applications (id, cluster_user_id, name, repo_url, normalized_url)
			SELECT md5('app' || g)::uuid, t.id, 'app-' || g, `+scaleURL+`, `+scaleKey+`
			FROM generate_series($1::int, $2::int - 1) g JOIN scale_tenants t ON t.n = g % $3
			WHERE g % 100 <> 0 AND g % 2 = 1`, lo, hi, tenants)
		exec(`INSERT INTO RepositoryLockApplication (application_id, lock_id)
			SELECT md5('app' || g)::uuid, md5('lock' || g)::uuid
			FROM generate_series($1::int, $2::int - 1) g WHERE g % 100 <> 0 AND g % 2 = 1`, lo, hi)
		exec(`INSERT INTO repository_credentials (id, cluster_user_id, name, repo_url, normalized_url, username, secret_ref)
			SELECT md5('cred' || g)::uuid, t.id, 'cred-' || g, 'https://github.com/scale-' || (g % $3) || '/repo-' || g, 'github.com/scale-' || (g % $3) || '/repo-' || g, 'git', 'vault://scale/' || g
			FROM generate_series($1::int, $2::int - 1) g JOIN scale_tenants t ON t.n = g % $3
			WHERE g % 100 <> 0 AND g % 2 = 0`, lo, hi, tenants)
		exec(`INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id)
			SELECT md5('cred' || g)::uuid, md5('lock' || g)::uuid
			FROM generate_series($1::int, $2::int - 1) g WHERE g % 100 <> 0 AND g % 2 = 0`, lo, hi)
		progress("%s of %s locks with their references", fmtCount(hi), fmtCount(locks))
	}
	exec(`INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name, created_at)
		SELECT CASE WHEN g % 10 = 0 THEN 'denied' WHEN g % 3 = 0 THEN 'released' ELSE 'acquired' END,
		       'github.com/scale-' || (g % $2) || '/repo-' || g, t.id, 'scale-' || t.n, t.id, 'scale-' || t.n,
		       now() - (g % 86400) * interval '1 second'
		FROM generate_series(0, $1 - 1) g JOIN scale_tenants t ON t.n = g % $2`, events, tenants)
	progress("rows loaded; rebuilding %d indexes and constraints", len(rebuild))
	for _, q := range rebuild {
		exec(q)
	}
	exec(`DROP TABLE scale_tenants`)
	exec(`RESET session_replication_role`)
	progress("events done; the ownership figures")
	exec(`SELECT repolock_ownership_rebuild()`)
	progress("VACUUM ANALYZE")
	exec(`VACUUM ANALYZE`)
	r.loadTime = time.Since(start)
	progress("data ready in %s", r.loadTime.Round(time.Second))

	if !scaleRulesOnly() {
		r.serve(b, dbURL, db, tenants, progress)
	}
	r.rulesChanges(b, dbURL, db, progress)
	return r
}

// scaleRulesOnly is SCALE_ONLY=rules: only the data and the rules changes
// (and the latest migration), for working on re-keying.
func scaleRulesOnly() bool { return os.Getenv("SCALE_ONLY") == "rules" }

// serve measures requests and GC through the binary.
func (r *scaleResult) serve(b *testing.B, dbURL string, db *sql.DB, tenants int, progress func(string, ...any)) {
	locks, fixed := r.locks, r.fixed
	exec := func(q string, args ...any) {
		b.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			b.Fatalf("%v\n%s", err, q)
		}
	}
	// Through the binary.
	// The binary keeps its default per-tenant rate limit (RATE_LIMIT, 50/s):
	// each of the 8 clients takes turns with the tokens of tenantsPerClient
	// tenants, as a multi-tenant platform spreads its load (make bench-http
	// does the same), so no tenant reaches the limit.
	s := startServerWith(b, serverOptions{DatabaseURL: dbURL, Env: []string{"GC_INTERVAL=0", "REQUEST_TIMEOUT=10m"}})
	const tenantsPerClient = 16
	clients := make([][]string, 8)
	for ci := range clients {
		for k := range tenantsPerClient {
			clients[ci] = append(clients[ci], s.createTenant(b, fmt.Sprintf("bench-%d-%d", ci, k)))
		}
	}
	const perClient = 250
	// Warm-up (not measured): connections, caches, the plan of each query.
	measure(b, clients, 25, func(ci int, token string, i int) (int, []byte) {
		return postJSON(b, s, "/v1/locks/acquire", token, map[string]any{"repo_url": fmt.Sprintf("https://github.com/bench-%d/warm-%d", ci, i)})
	}, http.StatusOK)
	r.ops["acquire"] = measure(b, clients, perClient, func(ci int, token string, i int) (int, []byte) {
		return postJSON(b, s, "/v1/locks/acquire", token, map[string]any{"repo_url": fmt.Sprintf("https://github.com/bench-%d/acquire-%d", ci, i)})
	}, http.StatusOK)
	r.ops["create application"] = measure(b, clients, perClient, func(ci int, token string, i int) (int, []byte) {
		return postJSON(b, s, "/v1/applications", token, map[string]any{"name": fmt.Sprintf("app-%d", i), "repo_url": fmt.Sprintf("https://github.com/bench-%d/app-%d", ci, i)})
	}, http.StatusCreated)
	// Generated tenants' locks (locks/tenants of them each), the same
	// number of tenants per client.
	bulkTokens := make([][]string, len(clients))
	for ci := range bulkTokens {
		for k := range tenantsPerClient {
			name := fmt.Sprintf("scale-%d", (ci*tenantsPerClient+k)%tenants)
			status, resp := s.do(b, http.MethodPost, "/v1/admin/users/"+name+"/tokens", s.AdminToken, nil)
			token, _ := resp["token"].(string)
			if status != http.StatusCreated || token == "" {
				b.Fatalf("token for %s: %d %v", name, status, resp)
			}
			bulkTokens[ci] = append(bulkTokens[ci], token)
		}
	}
	r.ops["list locks (first page)"] = measure(b, bulkTokens, 50, func(_ int, token string, _ int) (int, []byte) {
		st, _, raw := s.doRaw(b, http.MethodGet, "/v1/locks?page_size=50", token, nil, nil)
		return st, raw
	}, http.StatusOK)
	adminTokens := [][]string{{s.AdminToken}, {s.AdminToken}} // the admin token is not rate-limited
	r.ops["report ownership (100 tenants)"] = measure(b, adminTokens, 10, func(_ int, token string, _ int) (int, []byte) {
		st, _, raw := s.doRaw(b, http.MethodGet, "/v1/admin/reports/ownership?limit=100", token, nil, nil)
		return st, raw
	}, http.StatusOK)
	r.ops["report denials (1000)"] = measure(b, adminTokens, 10, func(_ int, token string, _ int) (int, []byte) {
		st, _, raw := s.doRaw(b, http.MethodGet, "/v1/admin/reports/denials?limit=1000", token, nil, nil)
		return st, raw
	}, http.StatusOK)
	progress("requests measured; GC")

	// GC through `repolock gc` (what cron runs): at 10M a full scan took longer
	// than an HTTP client waits. Only the generated locks are old enough
	// (--min-age 1h), not the bench's own fresh acquires.
	gc := func(what string) gcStats {
		b.Helper()
		start := time.Now()
		out, errOut, code := runCLIWith(b, dbURL, 2*time.Hour, "gc", "--min-age", "1h", "--timeout", "2h")
		st := gcStats{time: time.Since(start)}
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Status != "succeeded" {
			b.Fatalf("repolock gc (%s): exit %d\n%s\n%s", what, code, out, errOut)
		}
		progress("GC %s: deleted %d of %d candidates (cleared %d) in %s", what, st.Deleted, st.Candidates, st.Cleared, st.time.Round(time.Millisecond))
		return st
	}
	timed := func(q string, args ...any) time.Duration {
		b.Helper()
		start := time.Now()
		exec(q, args...)
		return time.Since(start)
	}
	r.gcPercent = gc("of the 1% unreferenced")
	if want := int64((locks + 99) / 100); r.gcPercent.Deleted != want {
		b.Errorf("gc deleted %d locks, want the %d generated unreferenced ones", r.gcPercent.Deleted, want)
	}
	r.gcAfter = gc("right after, nothing to collect")
	r.vacuumTime = timed(`VACUUM ANALYZE RepositoryLockOwner`)
	// The same number of unreferenced locks at every size: the applications
	// of fixed locks spread evenly over g (odd g: application-referenced),
	// deleted in one plain SQL statement; the reference triggers flag their
	// locks.
	step := locks / fixed
	r.unrefTime = timed(`DELETE FROM applications WHERE id IN (
		SELECT md5('app' || ((k * $1) | 1))::uuid FROM generate_series(0, $2::int - 1) k)`, step, fixed)
	r.gcFixed = gc(fmt.Sprintf("of %s unreferenced", fmtCount(fixed)))
	if r.gcFixed.Deleted != int64(fixed) {
		b.Errorf("gc deleted %d locks, want the %d made unreferenced", r.gcFixed.Deleted, fixed)
	}
	r.gcIdle = gc("with nothing to collect")
	var plan []string
	if err := func() error {
		rows, err := db.Query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
			SELECT o.id FROM RepositoryLockOwner o
			WHERE o.gc_candidate AND o.id > '00000000-0000-0000-0000-000000000000'
			ORDER BY o.id LIMIT 1000`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				return err
			}
			plan = append(plan, "  "+line)
		}
		return rows.Err()
	}(); err != nil {
		b.Fatal(err)
	}
	r.plan = strings.Join(plan, "\n") + "\n"

	// Disk sizes.
	rows, err := db.Query(`
SELECT c.relname, c.relkind, pg_total_relation_size(c.oid), pg_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') AND pg_total_relation_size(c.oid) > 1024 * 1024
ORDER BY pg_total_relation_size(c.oid) DESC`)
	if err != nil {
		b.Fatal(err)
	}
	var sizes strings.Builder
	for rows.Next() {
		var name, kind string
		var total, own int64
		if err := rows.Scan(&name, &kind, &total, &own); err != nil {
			b.Fatal(err)
		}
		if kind == "r" {
			fmt.Fprintf(&sizes, "  table %-52s %9s total, %9s heap\n", name, fmtBytes(total), fmtBytes(own))
		} else {
			fmt.Fprintf(&sizes, "    index %-50s %9s\n", name, fmtBytes(own))
		}
	}
	rows.Close()
	var dbSize int64
	_ = db.QueryRow(`SELECT pg_database_size(current_database())`).Scan(&dbSize)
	fmt.Fprintf(&sizes, "  database %s\n", fmtBytes(dbSize))
	r.sizes = sizes.String()
	// The figures of this size now, so a failure later does not lose them.
	for op, st := range r.ops {
		progress("%-32s p50 %8.2f ms  p99 %8.2f ms  %8.1f/s", op, ms(st.p50), ms(st.p99), st.rate)
	}
	progress("load %s\n%s", r.loadTime.Round(time.Second), r.sizes)
	s.stop(b)
}

// rulesChanges measures an alias change and a re-key through the CLI, then
// the latest migration.
func (r *scaleResult) rulesChanges(b *testing.B, dbURL string, db *sql.DB, progress func(string, ...any)) {
	// Rules changes through the CLI, as an operator runs them: an alias on
	// the host of 1% of the locks (re-keyed in its transaction), then a
	// re-key of every lock (all keyed under rules version 1).
	start := time.Now()
	out, errOut, code := runCLIWith(b, dbURL, time.Hour, "alias", "add", "gitlab-ssh.scale.example", "gitlab.scale.example")
	r.aliasTime = time.Since(start)
	if code != 0 {
		b.Fatalf("alias add: exit %d\n%s\n%s", code, out, errOut)
	}
	var ch struct {
		Rekeyed int `json:"rekeyed_locks"`
	}
	if err := json.Unmarshal([]byte(out), &ch); err != nil {
		b.Fatalf("alias add: %v\n%s", err, out)
	}
	r.aliasRekeyed = ch.Rekeyed
	progress("repolock alias add in %s: %d locks re-keyed", r.aliasTime.Round(time.Millisecond), ch.Rekeyed)
	start = time.Now()
	out, errOut, code = runCLIWith(b, dbURL, 3*time.Hour, "rekey", "--quiet")
	r.rekeyTime = time.Since(start)
	if code != 0 {
		b.Fatalf("rekey: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep struct {
		Stale int `json:"stale_locks"`
		Moved int `json:"moved_references"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		b.Fatalf("rekey: %v\n%s", err, out)
	}
	r.rekeyChecked, r.rekeyMoved = rep.Stale, rep.Moved
	progress("repolock rekey in %s: %d locks checked, %d references moved", r.rekeyTime.Round(time.Millisecond), rep.Stale, rep.Moved)

	// The latest migration on the whole table, as an upgrade would run it.
	if out, errOut, code := runCLIWith(b, dbURL, time.Hour, "migrate", "down", "1"); code != 0 {
		b.Fatalf("migrate down 1: exit %d\n%s\n%s", code, out, errOut)
	}
	start = time.Now()
	if out, errOut, code := runCLIWith(b, dbURL, time.Hour, "migrate", "up"); code != 0 {
		b.Fatalf("migrate up: exit %d\n%s\n%s", code, out, errOut)
	}
	r.migrateTime = time.Since(start)
	var unflagged, flagged int
	if err := db.QueryRow(`SELECT count(*) FILTER (WHERE gc_candidate), count(*) FILTER (WHERE NOT gc_candidate AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id) AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)) FROM RepositoryLockOwner o`).Scan(&flagged, &unflagged); err != nil {
		b.Fatal(err)
	}
	if unflagged != 0 {
		b.Errorf("after migrate up: %d unreferenced locks without the flag", unflagged)
	}
	progress("migrate up (latest) in %s (%d candidates: the bench's fresh acquires)", r.migrateTime.Round(time.Millisecond), flagged)
}

// measure runs one client per entry of tokens at once, each making
// perClient calls of do, taking turns with its tokens, and returns the
// latency percentiles and the rate. Any status but ok fails the benchmark.
func measure(b *testing.B, tokens [][]string, perClient int, do func(ci int, token string, i int) (int, []byte), ok int) opStats {
	b.Helper()
	var (
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
	)
	start := time.Now()
	for ci, own := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				t0 := time.Now()
				status, raw := do(ci, own[i%len(own)], i)
				d := time.Since(t0)
				if status != ok {
					b.Errorf("status %d %s", status, raw)
					return
				}
				mu.Lock()
				lats = append(lats, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(lats) == 0 {
		b.Fatal("no successful request")
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	return opStats{p50: lats[len(lats)/2], p99: lats[len(lats)*99/100], rate: float64(len(lats)) / elapsed.Seconds()}
}

func envIntOr(key string, def int) int {
	if v := os.Getenv(key); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return def
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d kB", n>>10)
}

// runCLIWith runs the api binary against dbURL with a timeout.
func runCLIWith(b *testing.B, dbURL string, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "LOG_FORMAT=text", "LOG_LEVEL=warn")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			b.Fatalf("api %v: %v", args, err)
		}
		return out.String(), errb.String(), ee.ExitCode()
	}
	return out.String(), errb.String(), 0
}
