package rekey_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/rekey"
)

// BenchmarkRekey re-keys a version 2 database of benchRekeyLocks locks in
// 10 tenants, each lock with one Application and one Credential on an
// scp-like URL with an escape (v2 key bench.example/o/rI-test, v3
// bench.example/o/rI-te%2573t), so every lock moves: in place, two
// references following it. It reports stale locks re-keyed per second, and
// the time of a second run (nothing to do). It runs its workload once
// (make bench: -benchtime 1x).
func BenchmarkRekey(b *testing.B) {
	const benchRekeyLocks = 5_000
	db := dbtest.New(b)
	ctx := b.Context()
	tenants := make([]string, 10)
	for i := range tenants {
		tenants[i] = dbtest.NewTenant(b, db, "").ID
	}
	if _, err := db.ExecContext(ctx, `
		WITH l AS (
			INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
			SELECT 'bench.example/o/r' || i || '-test', 2, ($1::uuid[])[1 + i % 10] FROM generate_series(1, $2) i
			RETURNING id, git_repository_url, cluster_user_id
		), a AS (
			INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
			SELECT cluster_user_id, 'a-' || split_part(git_repository_url, '/', 3), 'git@bench.example:o/' || replace(split_part(git_repository_url, '/', 3), '-test', '-te%73t'), git_repository_url FROM l
			RETURNING id, normalized_url
		), c AS (
			INSERT INTO repository_credentials (cluster_user_id, name, repo_url, normalized_url)
			SELECT cluster_user_id, 'c-' || split_part(git_repository_url, '/', 3), 'bench.example:o/' || replace(split_part(git_repository_url, '/', 3), '-test', '-te%73t'), git_repository_url FROM l
			RETURNING id, normalized_url
		), ra AS (
			INSERT INTO RepositoryLockApplication (application_id, lock_id)
			SELECT a.id, l.id FROM a JOIN l ON l.git_repository_url = a.normalized_url
		)
		INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id)
		SELECT c.id, l.id FROM c JOIN l ON l.git_repository_url = c.normalized_url`,
		pqArray(tenants), benchRekeyLocks); err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rs := svc(db).rekey
	b.ResetTimer()
	start := time.Now()
	rep, err := rs.Run(ctx, keying(b, db), rekey.Options{Logger: quiet})
	elapsed := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	// Every lock moves in place: none created, none released.
	if rep.Rekeyed != benchRekeyLocks || rep.MovedReferences != 2*benchRekeyLocks || rep.CreatedLocks != 0 || rep.ReleasedLocks != 0 {
		b.Fatalf("report %+v", rep)
	}
	start = time.Now()
	again, err := rs.Run(ctx, keying(b, db), rekey.Options{Logger: quiet})
	second := time.Since(start)
	if err != nil || again.StaleLocks != 0 {
		b.Fatalf("second run %+v, %v", again, err)
	}
	b.StopTimer()
	rate := float64(benchRekeyLocks) / elapsed.Seconds()
	b.Logf("re-keyed %d locks (%d references moved) in %s: %.0f locks/s; second run %s", benchRekeyLocks, rep.MovedReferences, elapsed.Round(time.Millisecond), rate, second.Round(time.Millisecond))
	b.ReportMetric(rate, "locks/s")
}

// seedLocks inserts n locks of rules version version in 10 tenants, set
// based, each with one Application: lock i is keyed hostOf(i)/o/rI and its
// Application's URL is https://hostOf(i)/o/rI.
func seedLocks(b *testing.B, db *database.DB, n, version int, hostSQL string) {
	b.Helper()
	ctx := b.Context()
	tenants := make([]string, 10)
	for i := range tenants {
		tenants[i] = dbtest.NewTenant(b, db, "").ID
	}
	if _, err := db.ExecContext(ctx, `
		WITH l AS (
			INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
			SELECT (`+hostSQL+`) || '/o/r' || i, $3, ($1::uuid[])[1 + i % 10] FROM generate_series(1, $2) i
			RETURNING id, git_repository_url, cluster_user_id
		), a AS (
			INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
			SELECT l.cluster_user_id, 'a-' || l.id, 'https://' || l.git_repository_url, l.git_repository_url FROM l
			RETURNING id, normalized_url
		)
		INSERT INTO RepositoryLockApplication (application_id, lock_id)
		SELECT a.id, l.id FROM a JOIN l ON l.git_repository_url = a.normalized_url`,
		pqArray(tenants), n, version); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
}

// legacyToNew is the rules N+1 of the version benchmarks and tests: the
// keys of legacy.example move to new.example, so a key new.example/P has
// the predecessor legacy.example/P (the N key of its other spelling).
func legacyToNew(n *normalize.Normalizer) *normalize.Normalizer {
	return normalize.NextForTest(n, func(k normalize.Key) normalize.Key {
		if h, p, ok := strings.Cut(string(k), "/"); ok && h == "legacy.example" {
			return normalize.Key("new.example/" + p)
		}
		return k
	}, func(k normalize.Key) []normalize.Key {
		if h, p, ok := strings.Cut(string(k), "/"); ok && h == "new.example" {
			return []normalize.Key{normalize.Key("legacy.example/" + p)}
		}
		return nil
	})
}

// BenchmarkRekey100k re-keys 100,000 locks (one Application each) of rules
// version 3 under rules 3+1 (normalize.NextForTest) that change the key of
// the 10% on legacy.example: the run checks every lock, moves 10,000 in
// place and marks 90,000 current. It reports locks checked per second
// (target: at least 20,000/s) and the run's duration. Then, on a fresh
// database of 100,000 current locks, it times an alias on a host that
// holds 1% of them (target at 10M locks: 30 s or less).
func BenchmarkRekey100k(b *testing.B) {
	const total = 100_000
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	db := dbtest.New(b)
	ctx := b.Context()
	seedLocks(b, db, total, 3, `CASE WHEN i % 10 = 0 THEN 'legacy.example' ELSE 'h' || (i % 97) || '.example' END`)
	rs := svc(db).rekey
	rekey.SetNextRules(rs, legacyToNew)
	k, err := rekey.LoadKeyingNext(ctx, db, legacyToNew)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	rep, err := rs.Run(ctx, k, rekey.Options{Logger: quiet})
	elapsed := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if rep.StaleLocks != total || rep.Rekeyed != total || rep.MovedReferences != total/10 || len(rep.Conflicts) != 0 {
		b.Fatalf("report %+v", countsOf(rep))
	}
	start = time.Now()
	again, err := rs.Run(ctx, k, rekey.Options{Logger: quiet})
	second := time.Since(start)
	if err != nil || again.StaleLocks != 0 {
		b.Fatalf("second run %+v, %v", countsOf(again), err)
	}
	b.StopTimer()
	rate := float64(total) / elapsed.Seconds()
	b.Logf("rules version bump, %d locks (%d moved in place, %d checked unchanged, %d batches): run %s, %.0f locks checked/s (target >= 20,000/s); second run %s",
		total, rep.MovedReferences, rep.Rekeyed-rep.MovedReferences, rep.Batches, elapsed.Round(time.Millisecond), rate, second.Round(time.Millisecond))
	b.ReportMetric(rate, "locks/s")
	b.ReportMetric(elapsed.Seconds(), "run-s")

	// An alias on a host holding 1% of the locks.
	adb := dbtest.New(b)
	seedLocks(b, adb, total, 3, `CASE WHEN i % 100 = 0 THEN 'alias-ssh.example' ELSE 'h' || (i % 97) || '.example' END`)
	ars := svc(adb).rekey
	start = time.Now()
	ch, err := ars.AddAlias(ctx, "alias-ssh.example", "alias.example", false)
	aliasTime := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if ch.ExaminedLocks != total/100 || ch.RekeyedLocks != total/100 || ch.MovedReferences != total/100 {
		b.Fatalf("alias change %+v", ch)
	}
	b.Logf("alias on a host holding 1%% of %d locks: %d locks moved in %s (target at 10M locks, 100,000 moved: <= 30 s)",
		total, ch.RekeyedLocks, aliasTime.Round(time.Millisecond))
	b.ReportMetric(aliasTime.Seconds(), "alias-s")
}

func pqArray(ss []string) any { return pq.Array(ss) }
