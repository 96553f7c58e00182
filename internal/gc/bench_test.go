package gc_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
)

// Benchmark workload (issue 5): 1,000,000 locks of which 100,000 are
// unreferenced; 450,000 are referenced by applications and 450,000 by
// repository credentials, all an hour old, in 100 tenants.
const (
	benchTenants   = 100
	benchAppLocks  = 450_000
	benchCredLocks = 450_000
	benchOrphans   = 100_000
	benchLocks     = benchAppLocks + benchCredLocks + benchOrphans
	benchSample    = 20_000
	benchClients   = 32
)

// BenchmarkGlobalGC measures, on identical copies of the same seeded
// database:
//
//	(a) the design's global GC: for each lock, count its application
//	    references, count its credential references (the design counts
//	    applications twice; that bug is not copied), delete it when both are
//	    zero; one statement at a time. Run on a 20,000-lock sample and
//	    extrapolated to the whole table.
//	(b) one raw DELETE ... WHERE NOT EXISTS ... AND NOT EXISTS ...: the floor.
//	(c) this package's batched GC (default options).
//
// and the p99 latency of 32 clients creating applications with and without
// (c) running. Targets: a/c >= 50, c/b <= 2, p99 with GC <= 2x without.
func BenchmarkGlobalGC(b *testing.B) {
	ctx := context.Background()
	start := time.Now()

	srcURL := dbtest.NewDatabase(b, true)
	src := openBenchDB(b, srcURL)
	seedBench(b, src)
	seeded := time.Since(start)
	src.Close()

	// Copies of the seeded database, one per measurement that deletes.
	admin, err := sql.Open("postgres", dbtest.AdminURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { admin.Close() })
	copyStart := time.Now()
	perRowURL := copyBenchDB(b, admin, srcURL, "a")
	rawURL := copyBenchDB(b, admin, srcURL, "b")
	loadURL := copyBenchDB(b, admin, srcURL, "d")
	copied := time.Since(copyStart)

	// (a) the design's per-row loop on a sample.
	perRowDB := openBenchDB(b, perRowURL)
	aSample, aDeleted := designLoop(b, perRowDB, benchSample)
	aSeconds := aSample.Seconds() * benchLocks / benchSample
	perRowDB.Close()

	// (b) the floor: one statement.
	rawDB := openBenchDB(b, rawURL)
	t0 := time.Now()
	res, err := rawDB.ExecContext(ctx, `
		DELETE FROM RepositoryLockOwner o
		WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
		  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)`)
	bSeconds := time.Since(t0).Seconds()
	if err != nil {
		b.Fatal(err)
	}
	bDeleted, _ := res.RowsAffected()
	rawDB.Close()

	// (c) this GC, on the seeded database itself.
	gcDB := openBenchDB(b, srcURL)
	t0 = time.Now()
	run, err := newCollector(gcDB, gc.Config{}).Collect(ctx, gc.DefaultOptions(gc.TriggerCLI))
	cSeconds := time.Since(t0).Seconds()
	if err != nil {
		b.Fatal(err)
	}
	gcDB.Close()
	if bDeleted != benchOrphans || run.Deleted != benchOrphans {
		b.Fatalf("deleted: raw %d, gc %d; want %d each", bDeleted, run.Deleted, benchOrphans)
	}

	// (d) 32 clients creating applications, without and then during (c).
	loadDB := openBenchDB(b, loadURL)
	tenants := benchTenantIDs(b, loadDB)
	clientsFor(b, loadDB, tenants, "warmup", time.Second, nil) // warm the caches; discarded
	baseline := clientsFor(b, loadDB, tenants, "without-gc", time.Duration(max(cSeconds, 3)*float64(time.Second)), nil)
	var loadedRun gc.Run
	var loadedSeconds float64
	during := clientsFor(b, loadDB, tenants, "during-gc", 0, func() {
		t0 := time.Now()
		var err error
		loadedRun, err = newCollector(loadDB, gc.Config{}).Collect(ctx, gc.DefaultOptions(gc.TriggerCLI))
		loadedSeconds = time.Since(t0).Seconds()
		if err != nil {
			b.Error(err)
		}
	})
	loadDB.Close()
	if loadedRun.Deleted != benchOrphans {
		b.Fatalf("gc under load deleted %d, want %d", loadedRun.Deleted, benchOrphans)
	}

	ac, cb := aSeconds/cSeconds, cSeconds/bSeconds
	p99Ratio := during.p99.Seconds() / baseline.p99.Seconds()
	var out strings.Builder
	fmt.Fprintf(&out, "\nglobal GC: %d locks, %d unreferenced (seeded in %.1fs, 3 copies in %.1fs)\n", benchLocks, benchOrphans, seeded.Seconds(), copied.Seconds())
	fmt.Fprintf(&out, "  %-52s %10s %12s\n", "", "seconds", "deleted")
	fmt.Fprintf(&out, "  %-52s %10.2f %12d\n", fmt.Sprintf("(a) design per-row loop, %d-lock sample", benchSample), aSample.Seconds(), aDeleted)
	fmt.Fprintf(&out, "  %-52s %10.1f %12s\n", "(a) extrapolated to all locks", aSeconds, fmt.Sprintf("~%d", aDeleted*benchLocks/benchSample))
	fmt.Fprintf(&out, "  %-52s %10.2f %12d\n", "(b) one raw DELETE ... NOT EXISTS (floor)", bSeconds, bDeleted)
	fmt.Fprintf(&out, "  %-52s %10.2f %12d\n", fmt.Sprintf("(c) batched GC (batch %d, %d batches)", gc.DefaultBatchSize, run.Batches), cSeconds, run.Deleted)
	fmt.Fprintf(&out, "  a/c = %.0f (target >= 50)   c/b = %.2f (target <= 2)\n", ac, cb)
	fmt.Fprintf(&out, "  %d clients creating applications      %8s %10s %10s %10s\n", benchClients, "ops", "ops/s", "p50", "p99")
	for _, l := range []latencies{baseline, during} {
		fmt.Fprintf(&out, "    %-34s %8d %10.0f %10s %10s\n", l.name, l.ops, l.opsPerSec(), l.p50.Round(10*time.Microsecond), l.p99.Round(10*time.Microsecond))
	}
	fmt.Fprintf(&out, "  (c) under that load took %.2fs; p99 during GC / without = %.2f (target <= 2)\n", loadedSeconds, p99Ratio)
	b.Log(out.String())
	fmt.Print(out.String())

	b.ReportMetric(aSeconds, "a_seconds")
	b.ReportMetric(bSeconds, "b_seconds")
	b.ReportMetric(cSeconds, "c_seconds")
	b.ReportMetric(ac, "a/c")
	b.ReportMetric(cb, "c/b")
	b.ReportMetric(p99Ratio, "p99_gc/no_gc")
}

func openBenchDB(b *testing.B, u string) *database.DB {
	b.Helper()
	db, err := database.Open(context.Background(), u, database.PoolConfig{MaxOpenConns: benchClients + 4, MaxIdleConns: benchClients + 4})
	if err != nil {
		b.Fatal(err)
	}
	return db
}

// seedBench writes the workload set-based: every lock row in three INSERT
// ... SELECT generate_series statements, each parent row in the same
// statement as its lock (the application or credential reuses the lock's
// id, which keeps the reference insert a plain copy). The secondary indexes
// of the five tables are dropped first and rebuilt after from their
// definitions in the catalog (so whatever the migrations declare is what is
// measured); constraint indexes stay.
func seedBench(b *testing.B, db *database.DB) {
	b.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		`SET synchronous_commit = off`,
		`SET maintenance_work_mem = '256MB'`,
		`CREATE TEMP TABLE bench_indexes AS
			SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
			FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
			WHERE t.relname IN ('repositorylockowner', 'applications', 'repository_credentials',
			                    'repositorylockapplication', 'repositorylockrepositorycredential')
			  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`,
		`DO $$ DECLARE r record; BEGIN
			FOR r IN SELECT name FROM bench_indexes LOOP EXECUTE 'DROP INDEX ' || r.name; END LOOP;
		END $$`,
		fmt.Sprintf(`INSERT INTO cluster_users (name) SELECT 'bench-' || g FROM generate_series(0, %d) g`, benchTenants-1),
		benchLockInsert("app", benchAppLocks, `
			INSERT INTO applications (id, cluster_user_id, name, repo_url, normalized_url, created_at)
			SELECT id, cluster_user_id, 'app-' || n, git_repository_url, git_repository_url, created_at FROM l`),
		`INSERT INTO RepositoryLockApplication (application_id, lock_id, created_at) SELECT id, id, created_at FROM applications`,
		benchLockInsert("cred", benchCredLocks, `
			INSERT INTO repository_credentials (id, cluster_user_id, name, repo_url, normalized_url, created_at)
			SELECT id, cluster_user_id, 'cred-' || n, git_repository_url, git_repository_url, created_at FROM l`),
		`INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id, created_at) SELECT id, id, created_at FROM repository_credentials`,
		benchLockInsert("orphan", benchOrphans, `SELECT count(*) FROM l`),
		`DO $$ DECLARE r record; BEGIN
			FOR r IN SELECT def FROM bench_indexes LOOP EXECUTE r.def; END LOOP;
		END $$`,
		`VACUUM (ANALYZE)`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			b.Fatalf("seed: %v\n%s", err, q)
		}
	}
}

// benchLockInsert inserts n locks named bench.example.com/<kind>/<i>, spread
// over the tenants, then runs then over them (as CTE l). Only orphans are GC
// candidates, as the one-statement creates leave the others.
func benchLockInsert(kind string, n int, then string) string {
	return fmt.Sprintf(`
		WITH t AS (SELECT array_agg(id ORDER BY name) AS ids FROM cluster_users),
		l AS (
			INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id, created_at, gc_candidate)
			SELECT 'bench.example.com/%s/' || g, 1, t.ids[1 + g %% %d], now() - interval '1 hour', %t
			FROM generate_series(1, %d) g, t
			RETURNING id, cluster_user_id, git_repository_url, created_at, split_part(git_repository_url, '/', 3) AS n
		)
		%s`, kind, benchTenants, kind == "orphan", n, then)
}

// copyBenchDB copies the seeded database with a file copy (much faster than
// Postgres 15's default WAL_LOG strategy for a database this size) and drops
// the copy at the end.
func copyBenchDB(b *testing.B, admin *sql.DB, srcURL, suffix string) string {
	b.Helper()
	u, err := url.Parse(srcURL)
	if err != nil {
		b.Fatal(err)
	}
	src := strings.TrimPrefix(u.Path, "/")
	name := src + "_" + suffix
	if _, err := admin.Exec(`CREATE DATABASE ` + pq.QuoteIdentifier(name) + ` TEMPLATE ` + pq.QuoteIdentifier(src) + ` STRATEGY = FILE_COPY`); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if _, err := admin.Exec(`DROP DATABASE IF EXISTS ` + pq.QuoteIdentifier(name) + ` WITH (FORCE)`); err != nil {
			b.Errorf("drop %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// designLoop is the design's global GC, corrected to count both reference
// tables: list the locks, then per lock two counts and, when both are zero,
// a delete, each its own statement. It runs over the first n locks.
func designLoop(b *testing.B, db *database.DB, n int) (time.Duration, int) {
	b.Helper()
	ctx := context.Background()
	t0 := time.Now()
	var ids []string
	if err := db.SelectContext(ctx, &ids, `SELECT id FROM RepositoryLockOwner ORDER BY id LIMIT $1`, n); err != nil {
		b.Fatal(err)
	}
	deleted := 0
	for _, id := range ids {
		var apps, creds int
		if err := db.GetContext(ctx, &apps, `SELECT count(*) FROM RepositoryLockApplication WHERE lock_id = $1`, id); err != nil {
			b.Fatal(err)
		}
		if err := db.GetContext(ctx, &creds, `SELECT count(*) FROM RepositoryLockRepositoryCredential WHERE lock_id = $1`, id); err != nil {
			b.Fatal(err)
		}
		if apps == 0 && creds == 0 {
			if _, err := db.ExecContext(ctx, `DELETE FROM RepositoryLockOwner WHERE id = $1`, id); err != nil {
				b.Fatal(err)
			}
			deleted++
		}
	}
	return time.Since(t0), deleted
}

func benchTenantIDs(b *testing.B, db *database.DB) []string {
	b.Helper()
	var ids []string
	if err := db.SelectContext(context.Background(), &ids, `SELECT id FROM cluster_users ORDER BY name LIMIT $1`, benchClients); err != nil {
		b.Fatal(err)
	}
	return ids
}

type latencies struct {
	name     string
	ops      int
	elapsed  time.Duration
	p50, p99 time.Duration
}

func (l latencies) opsPerSec() float64 { return float64(l.ops) / l.elapsed.Seconds() }

// clientsFor runs benchClients clients, each creating applications on new
// URLs with the pool's apps.Service CreateApplication (lock, application and
// reference in one transaction), for d, or, when during is set, until during
// returns.
func clientsFor(b *testing.B, db *database.DB, tenants []string, name string, d time.Duration, during func()) latencies {
	b.Helper()
	ctx := context.Background()
	as := svc(db).apps
	stop := make(chan struct{})
	var (
		mu  sync.Mutex
		all []time.Duration
		wg  sync.WaitGroup
	)
	t0 := time.Now()
	for c := range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
					return
				default:
				}
				s := time.Now()
				_, err := as.CreateApplication(ctx, tenants[c%len(tenants)], apps.NewApplication{
					Name:    fmt.Sprintf("%s-%d-%d", name, c, i),
					RepoURL: fmt.Sprintf("https://load.example.com/%s/c%d/r%d.git", name, c, i),
				})
				if err != nil {
					b.Errorf("client %d: %v", c, err)
				}
				mine = append(mine, time.Since(s))
			}
		}()
	}
	if during != nil {
		during()
	} else {
		time.Sleep(d)
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(t0)
	slices.Sort(all)
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))]
	}
	return latencies{name: name, ops: len(all), elapsed: elapsed, p50: pct(0.50), p99: pct(0.99)}
}
