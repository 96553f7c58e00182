package rekey_test

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/rekey"
)

// TestRekeyConcurrentWithTraffic re-keys a version 2 database while
// tenants create, update and delete applications on the same repositories
// (in their v3 spellings, so on the very keys re-keying moves locks to), and
// the global GC runs. Afterwards: every lock is current except those the
// report names, every reference points at its own tenant's lock on the key
// of its URL, no lock is left unreferenced, and another run moves nothing.
func TestRekeyConcurrentWithTraffic(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	as, rs := svc(db).apps, svc(db).rekey
	ctx := t.Context()
	const repos = 120
	x := dbtest.NewTenant(t, db, "xavier").ID
	y := dbtest.NewTenant(t, db, "yolanda").ID
	// url is the v3 spelling of repository i (v2 and v3 key it alike);
	// the v2 references are scp-like, "te%73t", keyed c.example/o/rI-test
	// by v2 and c.example/o/rI-te%2573t (url's key) by v3.
	url := func(i int) string { return fmt.Sprintf("ssh://git@c.example/o/r%d-te%%2573t", i) }
	for i := range repos {
		insertOld(t, db, x, fmt.Sprintf("c.example/o/r%d-test", i), 2,
			oldRef{"application", fmt.Sprintf("v1-%d", i), fmt.Sprintf("git@c.example:o/r%d-te%%73t", i)},
			oldRef{"credential", fmt.Sprintf("v1c-%d", i), fmt.Sprintf("c.example:o/r%d-te%%73t", i)})
	}
	var (
		stop    = make(chan struct{})
		started sync.WaitGroup
		done    sync.WaitGroup
		ops     atomic.Int64
		errs    = make(chan error, 16)
	)
	worker := func(name string, fn func(r *rand.Rand, n int) error) {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			r := rand.New(rand.NewPCG(uint64(len(name)), 7))
			for n := 0; ; n++ {
				if err := fn(r, n); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					if n == 0 {
						started.Done()
					}
					return
				}
				ops.Add(1)
				if n == 0 {
					started.Done()
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	allowed := func(err error, codes ...repolock.Code) error {
		for _, c := range codes {
			if repolock.IsCode(err, c) {
				return nil
			}
		}
		return err
	}
	// xavier: new applications on the v3 key of a repository, deleted again.
	worker("create-delete", func(r *rand.Rand, n int) error {
		a, err := as.CreateApplication(ctx, x, apps.NewApplication{Name: fmt.Sprintf("new-%d", n), RepoURL: url(r.IntN(repos))})
		if err != nil {
			return allowed(err, repolock.ERepositoryClaimed) // yolanda took the v2 key first
		}
		if n%2 == 0 {
			return as.DeleteApplication(ctx, x, a.ID)
		}
		return nil
	})
	// xavier: delete v2 applications and credentials (releasing v2 locks
	// while re-keying holds or wants them).
	worker("delete-v1", func(r *rand.Rand, n int) error {
		var id string
		err := db.GetContext(ctx, &id, `SELECT id FROM applications WHERE cluster_user_id = $1 AND name LIKE 'v1-%' ORDER BY random() LIMIT 1`, x)
		if database.IsNoRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return allowed(as.DeleteApplication(ctx, x, id), repolock.ENotFound)
	})
	// xavier: move v2 credentials to another repository and back.
	worker("update-v1", func(r *rand.Rand, n int) error {
		var id string
		err := db.GetContext(ctx, &id, `SELECT id FROM repository_credentials WHERE cluster_user_id = $1 ORDER BY random() LIMIT 1`, x)
		if err != nil {
			return err
		}
		u := url(r.IntN(repos))
		_, err = as.UpdateRepositoryCredential(ctx, x, id, apps.RepositoryCredentialPatch{RepoURL: &u})
		return allowed(err, repolock.ENotFound, repolock.ERepositoryClaimed)
	})
	// yolanda: tries to claim every fourth repository (denied when xavier
	// holds the v3 key, granted while only xavier's v2 key exists: then
	// re-keying must report the conflict and leave xavier's lock alone).
	worker("other-tenant", func(r *rand.Rand, n int) error {
		_, err := as.CreateApplication(ctx, y, apps.NewApplication{Name: fmt.Sprintf("y-%d", n), RepoURL: url(4 * r.IntN(repos/4))})
		return allowed(err, repolock.ERepositoryClaimed)
	})
	// Every unreferenced lock is a GC candidate in every snapshot (one
	// statement is one snapshot): re-keying moves references with UPDATE
	// and releases emptied locks, the traffic deletes and moves.
	worker("gc-candidates", func(r *rand.Rand, n int) error {
		var unflagged int
		if err := db.GetContext(ctx, &unflagged, dbtest.UnflaggedLocksSQL); err != nil {
			return err
		}
		if unflagged != 0 {
			return fmt.Errorf("%d unreferenced locks are not GC candidates", unflagged)
		}
		return nil
	})
	metrics, err := gc.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	collector := gc.New(db, svc(db).locks, gc.Config{Logger: quiet, Metrics: metrics})
	worker("gc", func(r *rand.Rand, n int) error {
		opts := gc.DefaultOptions(gc.TriggerCLI)
		opts.MinAge = 0
		_, err := collector.Collect(ctx, opts)
		return err
	})
	started.Wait()
	before := ops.Load()
	rep, err := rs.Run(ctx, keying(t, db), rekey.Options{BatchSize: 10, Logger: quiet})
	during := ops.Load() - before
	close(stop)
	done.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first run: %d stale, %d re-keyed, %d moved, %d conflicts; %d API/GC operations during the run",
		rep.StaleLocks, rep.Rekeyed, rep.MovedReferences, len(rep.Conflicts), during)

	// Traffic has stopped: a run now settles what the first could not see
	// (locks it found gone or current), then a further run must move nothing.
	settle, err := rs.Run(ctx, keying(t, db), rekey.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	again, err := rs.Run(ctx, keying(t, db), rekey.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if again.Rekeyed != 0 || again.MovedReferences != 0 || len(again.Conflicts) != len(settle.Conflicts) {
		t.Errorf("a further run changed something: %+v (previous %+v)", again, settle)
	}
	if len(again.Rejected) != 0 {
		t.Errorf("rejected: %+v", again.Rejected)
	}

	// Every reference points at a lock of its own tenant, keyed like the
	// reference's normalized_url.
	var bad []string
	if err := db.SelectContext(ctx, &bad, `
		SELECT a.name FROM applications a JOIN RepositoryLockApplication r ON r.application_id = a.id JOIN RepositoryLockOwner o ON o.id = r.lock_id
		WHERE o.cluster_user_id <> a.cluster_user_id OR o.git_repository_url <> a.normalized_url
		UNION ALL
		SELECT c.name FROM repository_credentials c JOIN RepositoryLockRepositoryCredential r ON r.repository_credential_id = c.id JOIN RepositoryLockOwner o ON o.id = r.lock_id
		WHERE o.cluster_user_id <> c.cluster_user_id OR o.git_repository_url <> c.normalized_url
		UNION ALL
		SELECT a.name FROM applications a WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockApplication r WHERE r.application_id = a.id)
		UNION ALL
		SELECT c.name FROM repository_credentials c WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential r WHERE r.repository_credential_id = c.id)`); err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("references on the wrong lock or without one: %v", bad)
	}
	// Current locks are keyed by the v3 key of every URL on them; stale
	// ones are exactly those with an open conflict.
	type lockRow struct {
		ID      string `db:"id"`
		Key     string `db:"git_repository_url"`
		Version int    `db:"normalizer_version"`
		URLs    string `db:"urls"`
		Refs    int    `db:"refs"`
	}
	var ls []lockRow
	if err := db.SelectContext(ctx, &ls, `
		SELECT o.id, o.git_repository_url, o.normalizer_version,
			coalesce(string_agg(u.repo_url, ' '), '') AS urls, count(u.repo_url) AS refs
		FROM RepositoryLockOwner o LEFT JOIN (
			SELECT r.lock_id, a.repo_url FROM RepositoryLockApplication r JOIN applications a ON a.id = r.application_id
			UNION ALL
			SELECT r.lock_id, c.repo_url FROM RepositoryLockRepositoryCredential r JOIN repository_credentials c ON c.id = r.repository_credential_id
		) u ON u.lock_id = o.id
		GROUP BY o.id`); err != nil {
		t.Fatal(err)
	}
	conflicted := map[string]bool{}
	for _, p := range again.Conflicts {
		conflicted[p.LockID] = true
	}
	stale := 0
	for _, l := range ls {
		if l.Refs == 0 {
			t.Errorf("lock %s is unreferenced", l.Key)
		}
		if l.Version == 2 {
			stale++
			if !conflicted[l.ID] {
				t.Errorf("lock %s is still version 2 and not reported as a conflict", l.Key)
			}
			continue
		}
		for _, u := range splitFields(l.URLs) {
			if k, err := normalize.RepoURL(u); err != nil || string(k) != l.Key {
				t.Errorf("lock %s holds %s (key %s, %v)", l.Key, u, k, err)
			}
		}
	}
	if stale != len(conflicted) {
		t.Errorf("%d stale locks, %d conflicted", stale, len(conflicted))
	}
}

func splitFields(s string) []string {
	var out []string
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' {
			if start >= 0 {
				out = append(out, s[start:i])
			}
			start = -1
		} else if start < 0 {
			start = i
		}
	}
	return out
}
