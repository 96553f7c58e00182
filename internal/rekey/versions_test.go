package rekey_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/rekey"
)

// nextRules is the locks.Rules of a replica of rules N+1 (legacyToNew):
// rekey.Source's loading, with the next hook.
type nextRules struct {
	db *database.DB
	k  atomic.Pointer[locks.Keying]
}

func (r *nextRules) Keying() *locks.Keying { return r.k.Load() }
func (r *nextRules) Reload(ctx context.Context) error {
	k, err := rekey.LoadKeyingNext(ctx, r.db, legacyToNew)
	if err != nil {
		return err
	}
	r.k.Store(k)
	return nil
}

// TestTwoRulesVersions serves rules N (this binary's) and N+1 side by side
// against one database, each replica on its own pool: once N+1 has
// registered, N refuses claims; N+1 denies a URL whose N key another
// tenant holds, and a URL whose own N key is free but whose N+1 key's
// predecessor (the N key of its other spelling) another tenant holds; and
// N+1 claims racing a Run under N+1 leave every repository with one
// owner.
func TestTwoRulesVersions(t *testing.T) {
	t.Parallel()
	dbN, url := dbtest.NewWithURL(t)
	ctx := t.Context()
	dbN1, err := database.Open(ctx, url, database.PoolConfig{MaxOpenConns: dbtest.PoolSize, MaxIdleConns: dbtest.PoolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dbN1.Close() })
	sN, _ := sourced(t, dbN)
	const repos = 30
	ten := make([]string, 4)
	for i := range ten {
		ten[i] = dbtest.NewTenant(t, dbN, fmt.Sprintf("t%d", i)).ID
	}
	// Under N: tenant i%4 owns legacy.example/o/rI.
	for i := range repos {
		if _, err := sN.apps.CreateApplication(ctx, ten[i%4], apps.NewApplication{Name: fmt.Sprintf("n-%d", i), RepoURL: fmt.Sprintf("https://legacy.example/o/r%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	rN1 := &nextRules{db: dbN1}
	if err := rN1.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if v := rN1.Keying().Current.Version(); v != normalize.Version+1 || len(rN1.Keying().Shadows) != 1 {
		t.Fatalf("N+1 keying: version %d, %d shadows", v, len(rN1.Keying().Shadows))
	}
	sN1 := svcWith(dbN1, rN1)
	rekey.SetNextRules(sN1.rekey, legacyToNew)
	if err := rekey.RegisterVersion(ctx, dbN1, normalize.Version+1); err != nil {
		t.Fatal(err)
	}

	// N's next claim reloads and refuses: unavailable.
	if _, err := sN.locks.Acquire(ctx, ten[0], "https://fresh.example/o/r"); !repolock.IsCode(err, repolock.EUnavailable) {
		t.Fatalf("N claim after N+1 registered: %v", err)
	}
	// N+1: the N key of the URL is another tenant's: denied; the owner's
	// own claim finds its N lock.
	acq, err := sN1.locks.Acquire(ctx, ten[1], "https://legacy.example/o/r0")
	if err != nil || acq.Acquired || acq.Owner != "t0" || acq.Key != "new.example/o/r0" {
		t.Fatalf("N+1 claim of another tenant's N key: %+v, %v", acq, err)
	}
	acq, err = sN1.locks.Acquire(ctx, ten[0], "https://new.example/o/r0")
	if err != nil || !acq.Acquired {
		t.Fatalf("N+1 claim of the owner: %+v, %v", acq, err)
	}
	// The other spelling: its own N key (new.example/o/r1) is free, but
	// the predecessor of its N+1 key, legacy.example/o/r1, is t1's.
	acq, err = sN1.locks.Acquire(ctx, ten[2], "https://new.example/o/r1")
	if err != nil || acq.Acquired || acq.Owner != "t1" {
		t.Fatalf("N+1 claim of the other spelling of another tenant's N lock: %+v, %v", acq, err)
	}

	// N+1 claims from several goroutines, both spellings, while a Run under
	// N+1 moves the N locks.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range repos {
				u := fmt.Sprintf("https://legacy.example/o/r%d", i)
				if (i+g)%2 == 0 {
					u = fmt.Sprintf("https://new.example/o/r%d", i)
				}
				_, err := sN1.apps.CreateApplication(ctx, ten[g], apps.NewApplication{Name: fmt.Sprintf("g%d-%d", g, i), RepoURL: u})
				if err != nil && !repolock.IsCode(err, repolock.ERepositoryClaimed) {
					errs <- fmt.Errorf("goroutine %d repo %d: %w", g, i, err)
				}
			}
		}()
	}
	rep, err := sN1.rekey.Run(ctx, rN1.Keying(), rekey.Options{BatchSize: 7, Logger: quietLog})
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Conflicts)+len(rep.Rejected) != 0 || rep.NormalizerVersion != normalize.Version+1 {
		t.Fatalf("run %+v", rep)
	}
	again, err := sN1.rekey.Run(ctx, rN1.Keying(), rekey.Options{Logger: quietLog})
	if err != nil || again.Rekeyed != 0 || again.MovedReferences != 0 || again.StaleLocks != 0 {
		t.Fatalf("second run: %+v, %v", countsOf(again), err)
	}

	// One owner per repository: every stored reference keyed under N+1,
	// grouped by key.
	type refRow struct {
		Tenant string `db:"cluster_user_id"`
		URL    string `db:"repo_url"`
	}
	var refs []refRow
	if err := dbN.SelectContext(ctx, &refs, `SELECT cluster_user_id, repo_url FROM applications
		UNION ALL SELECT cluster_user_id, repo_url FROM repository_credentials`); err != nil {
		t.Fatal(err)
	}
	next := legacyToNew(normalize.Default())
	owners := map[normalize.Key]map[string]bool{}
	for _, r := range refs {
		k, err := next.RepoURL(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		if owners[k] == nil {
			owners[k] = map[string]bool{}
		}
		owners[k][r.Tenant] = true
	}
	for k, ts := range owners {
		if len(ts) != 1 {
			t.Errorf("%s has %d owners", k, len(ts))
		}
	}
	if len(owners) != repos {
		t.Errorf("%d repositories referenced, want %d", len(owners), repos)
	}
	var stale int
	if err := dbN.GetContext(ctx, &stale, `SELECT count(*) FROM RepositoryLockOwner WHERE normalizer_version <= $1`, normalize.Version); err != nil || stale != 0 {
		t.Errorf("%d locks of version N left, %v", stale, err)
	}
}
