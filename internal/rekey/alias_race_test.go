package rekey_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/normalize"
)

// TestAliasChangesConcurrentWithTraffic adds and removes an alias over and
// over while two tenants create, update and delete Applications and
// Credentials on the repositories of both its endpoints, and claims come
// in: an alias change reads the locks it moves and their references
// without row locks (the table lock is its guarantee, endpointLocksSQL),
// so traffic must never see or leave a reference on another key than its
// URL's under the stored rules, or on another tenant's lock, or a
// repository with two owners. Each change either applies or is refused
// with alias_conflict (both tenants race for the same repositories).
func TestAliasChangesConcurrentWithTraffic(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()
	s, src := sourced(t, db)
	x := dbtest.NewTenant(t, db, "xavier").ID
	y := dbtest.NewTenant(t, db, "yolanda").ID
	const repos = 40
	const from, to = "gl-ssh.example", "gl.example"
	// Repository i, spelled on either endpoint.
	url := func(r *rand.Rand, i int) string {
		if r.IntN(2) == 0 {
			return fmt.Sprintf("git@%s:o/r%d.git", from, i)
		}
		return fmt.Sprintf("https://%s/o/r%d", to, i)
	}
	// xavier works on the even repositories, yolanda on the odd ones, and
	// now and then on an even one, which she deletes again at once: an add
	// is refused while both hold a repository under its two spellings, and
	// applied otherwise.
	for i := 0; i < repos; i += 2 {
		if _, err := s.apps.CreateApplication(ctx, x, apps.NewApplication{Name: fmt.Sprintf("seed-%d", i), RepoURL: fmt.Sprintf("git@%s:o/r%d.git", from, i)}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		stop    = make(chan struct{})
		done    sync.WaitGroup
		ops     atomic.Int64
		changes atomic.Int64
		refused atomic.Int64
		errs    = make(chan error, 16)
	)
	// Unavailable: a claim keyed again under each new generation gives up
	// after a few (the alias changes here come back to back), an honest
	// "try again".
	allowed := func(err error, codes ...repolock.Code) error {
		for _, c := range append(codes, repolock.EUnavailable) {
			if err == nil || repolock.IsCode(err, c) {
				return nil
			}
		}
		return err
	}
	worker := func(name string, seed uint64, fn func(r *rand.Rand, n int) error) {
		done.Add(1)
		go func() {
			defer done.Done()
			r := rand.New(rand.NewPCG(seed, 11))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := fn(r, n); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	repo := func(r *rand.Rand, ti int) int { return 2*r.IntN(repos/2) + ti }
	for ti, tenant := range []string{x, y} {
		worker(fmt.Sprintf("create-delete-%d", ti), uint64(ti+1), func(r *rand.Rand, n int) error {
			i, cross := repo(r, ti), ti == 1 && r.IntN(10) == 0
			if cross {
				i = repo(r, 0)
			}
			a, err := s.apps.CreateApplication(ctx, tenant, apps.NewApplication{Name: fmt.Sprintf("a-%d", n), RepoURL: url(r, i)})
			if err != nil {
				return allowed(err, repolock.ERepositoryClaimed)
			}
			if n%2 == 0 || cross {
				return allowed(s.apps.DeleteApplication(ctx, tenant, a.ID), repolock.ENotFound)
			}
			return nil
		})
		worker(fmt.Sprintf("credentials-%d", ti), uint64(ti+10), func(r *rand.Rand, n int) error {
			c, err := s.apps.CreateRepositoryCredential(ctx, tenant, apps.NewRepositoryCredential{Name: fmt.Sprintf("c-%d", n), RepoURL: url(r, repo(r, ti)), Username: "git", SecretRef: "vault://kv/c"})
			if err != nil {
				return allowed(err, repolock.ERepositoryClaimed)
			}
			// Another spelling of the same repository (same key, or the
			// other endpoint's key, depending on the alias), then another
			// repository, then gone.
			u := url(r, repo(r, ti))
			if _, err := s.apps.UpdateRepositoryCredential(ctx, tenant, c.ID, apps.RepositoryCredentialPatch{RepoURL: &u}); allowed(err, repolock.ERepositoryClaimed) != nil {
				return err
			}
			if n%3 == 0 {
				return allowed(s.apps.DeleteRepositoryCredential(ctx, tenant, c.ID), repolock.ENotFound)
			}
			return nil
		})
	}
	worker("acquire", 99, func(r *rand.Rand, n int) error {
		ti := r.IntN(2)
		_, err := s.locks.Acquire(ctx, []string{x, y}[ti], url(r, repo(r, ti)))
		return allowed(err)
	})
	// The operator: add, then remove, each after some traffic.
	var last int64
	worker("aliases", 42, func(r *rand.Rand, n int) error {
		for ops.Load() < last+20 {
			select {
			case <-stop:
				return nil
			case <-time.After(time.Millisecond): // a poll of the counter
			}
		}
		last = ops.Load()
		if n%2 == 0 {
			_, err := s.rekey.AddAlias(ctx, from, to, false)
			if repolock.IsCode(err, repolock.EAliasConflict) {
				refused.Add(1)
				_, err = s.rekey.AddAlias(ctx, from, to, false)
				if repolock.IsCode(err, repolock.EAliasConflict) {
					refused.Add(1)
					return nil
				}
			}
			if err == nil {
				changes.Add(1)
			}
			return err
		}
		_, err := s.rekey.RemoveAlias(ctx, from, false)
		if err == nil {
			changes.Add(1)
		}
		return allowed(err, repolock.ENotFound, repolock.EAliasConflict)
	})
	// Until enough traffic has run around enough changes (applied or
	// refused: which one is the race's business).
	for polls := 0; ops.Load() < 120 || changes.Load()+refused.Load() < 6; polls++ {
		select {
		case e := <-errs:
			t.Fatal(e)
		default:
		}
		if polls%2000 == 0 {
			t.Logf("%d operations, %d alias changes applied, %d refused", ops.Load(), changes.Load(), refused.Load())
		}
		time.Sleep(5 * time.Millisecond) // a poll of the counters, not an interleaving
	}
	close(stop)
	done.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d operations, %d alias changes applied, %d refused", ops.Load(), changes.Load(), refused.Load())
	if changes.Load() == 0 {
		t.Fatal("no alias change applied: the test proved nothing")
	}

	// Under the rules stored now, every reference is on its own tenant's
	// lock, keyed like its URL.
	if err := src.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	n := src.Keying().Current
	type refRow struct {
		Name    string `db:"name"`
		URL     string `db:"repo_url"`
		Norm    string `db:"normalized_url"`
		Key     string `db:"git_repository_url"`
		Owner   string `db:"owner"`
		Holder  string `db:"holder"`
		Missing bool   `db:"missing"`
	}
	var refs []refRow
	if err := db.SelectContext(ctx, &refs, `
		SELECT a.name, a.repo_url, a.normalized_url, coalesce(o.git_repository_url, '') AS git_repository_url,
			a.cluster_user_id::text AS owner, coalesce(o.cluster_user_id::text, '') AS holder, o.id IS NULL AS missing
		FROM applications a LEFT JOIN RepositoryLockApplication r ON r.application_id = a.id LEFT JOIN RepositoryLockOwner o ON o.id = r.lock_id
		UNION ALL
		SELECT c.name, c.repo_url, c.normalized_url, coalesce(o.git_repository_url, ''),
			c.cluster_user_id::text, coalesce(o.cluster_user_id::text, ''), o.id IS NULL
		FROM repository_credentials c LEFT JOIN RepositoryLockRepositoryCredential r ON r.repository_credential_id = c.id LEFT JOIN RepositoryLockOwner o ON o.id = r.lock_id`); err != nil {
		t.Fatal(err)
	}
	owners := map[normalize.Key]string{}
	for _, f := range refs {
		k, err := n.RepoURL(f.URL)
		switch {
		case err != nil:
			t.Errorf("%s: %s: %v", f.Name, f.URL, err)
		case f.Missing:
			t.Errorf("%s (%s) has no lock", f.Name, f.URL)
		case f.Holder != f.Owner:
			t.Errorf("%s (%s) is on another tenant's lock %s", f.Name, f.URL, f.Key)
		case string(k) != f.Key || f.Norm != f.Key:
			t.Errorf("%s (%s): key %s under the stored rules, normalized_url %s, lock %s", f.Name, f.URL, k, f.Norm, f.Key)
		}
		if o, ok := owners[k]; ok && o != f.Owner {
			t.Errorf("repository %s has two owners", k)
		}
		owners[k] = f.Owner
	}
	var unflagged int
	if err := db.GetContext(ctx, &unflagged, dbtest.UnflaggedLocksSQL); err != nil || unflagged != 0 {
		t.Errorf("%d unreferenced locks are not GC candidates (%v)", unflagged, err)
	}
}
