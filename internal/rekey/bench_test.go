package rekey_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/rekey"
)

// BenchmarkRekey re-keys a version 1 database of benchRekeyLocks locks in
// 10 tenants, each lock with one Application and one Credential on a ported
// URL (v1 key host:port/path, v2 host+port/path), so every lock moves: a
// new lock, two references moved, the old lock released. It reports stale
// locks re-keyed per second, and the time of a second run (nothing to do).
// It runs its workload once (make bench: -benchtime 1x).
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
			SELECT 'bench.example:8443/o/r' || i, 1, ($1::uuid[])[1 + i % 10] FROM generate_series(1, $2) i
			RETURNING id, git_repository_url, cluster_user_id
		), a AS (
			INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
			SELECT cluster_user_id, 'a-' || split_part(git_repository_url, '/r', 2), 'https://bench.example:8443/' || split_part(git_repository_url, '/', 2) || '/' || split_part(git_repository_url, '/', 3), git_repository_url FROM l
			RETURNING id, normalized_url
		), c AS (
			INSERT INTO repository_credentials (cluster_user_id, name, repo_url, normalized_url)
			SELECT cluster_user_id, 'c-' || split_part(git_repository_url, '/r', 2), 'ssh://git@bench.example:8443/' || split_part(git_repository_url, '/', 2) || '/' || split_part(git_repository_url, '/', 3) || '.git', git_repository_url FROM l
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
	rep, err := rs.Run(ctx, normalize.Default(), rekey.Options{Logger: quiet})
	elapsed := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if rep.Rekeyed != benchRekeyLocks || rep.MovedReferences != 2*benchRekeyLocks || rep.ReleasedLocks != benchRekeyLocks {
		b.Fatalf("report %+v", rep)
	}
	start = time.Now()
	again, err := rs.Run(ctx, normalize.Default(), rekey.Options{Logger: quiet})
	second := time.Since(start)
	if err != nil || again.StaleLocks != 0 {
		b.Fatalf("second run %+v, %v", again, err)
	}
	b.StopTimer()
	rate := float64(benchRekeyLocks) / elapsed.Seconds()
	b.Logf("re-keyed %d locks (%d references moved) in %s: %.0f locks/s; second run %s", benchRekeyLocks, rep.MovedReferences, elapsed.Round(time.Millisecond), rate, second.Round(time.Millisecond))
	b.ReportMetric(rate, "locks/s")
}

func pqArray(ss []string) any { return pq.Array(ss) }
