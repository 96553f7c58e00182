package apps_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/tenants"
)

// 10 tenants x 20 goroutines create applications for the same 200
// repositories in mixed spellings. Afterwards every repository has exactly
// one owner, every successful application belongs to it, every loser got
// repository_claimed naming the owner, and nothing else failed.
func TestCreateRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newRaceDB(t)
	svc, _ := newApps(db)
	const (
		nTenants     = 10
		perTenant    = 20
		repos        = 200
		perGoroutine = 20 // 4,000 creates, ~20 per repository
	)
	us := make([]tenants.Tenant, nTenants)
	for i := range us {
		us[i] = dbtest.NewTenant(t, db, fmt.Sprintf("tenant-%d", i))
	}
	type outcome struct {
		tenant, key string
		app         apps.Application
		err         error
	}
	outcomes := make(chan outcome, nTenants*perTenant*perGoroutine)
	var wg sync.WaitGroup
	for ti, u := range us {
		for g := 0; g < perTenant; g++ {
			wg.Add(1)
			go func(u tenants.Tenant, seed uint64, g int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, 7))
				for j := 0; j < perGoroutine; j++ {
					repo := r.IntN(repos)
					sp := spellings("race", repo)
					url := sp[r.IntN(len(sp))]
					app, err := svc.CreateApplication(ctx, u.ID, apps.NewApplication{Name: fmt.Sprintf("g%d-%d", g, j), RepoURL: url})
					outcomes <- outcome{u.Name, fmt.Sprintf("github.com/race/repo-%d", repo), app, err}
				}
			}(u, uint64(ti*1000+g), g)
		}
	}
	wg.Wait()
	close(outcomes)

	type owner struct{ id, name string }
	owners := map[string]owner{}
	var created, claimed int
	var all []outcome
	for o := range outcomes {
		all = append(all, o)
	}
	for _, o := range all {
		if _, ok := owners[o.key]; !ok {
			id, name := lockOf(t, db, o.key)
			if id == "" {
				t.Fatalf("%s was attempted but has no lock", o.key)
			}
			owners[o.key] = owner{id, name}
		}
	}
	for _, o := range all {
		own := owners[o.key]
		switch {
		case o.err == nil:
			created++
			if o.tenant != own.name || o.app.LockID != own.id || o.app.NormalizedURL != o.key {
				t.Errorf("%s created %+v on %s owned by %s (lock %s)", o.tenant, o.app, o.key, own.name, own.id)
			}
		case repolock.ErrorCode(o.err) == repolock.ERepositoryClaimed:
			claimed++
			if o.tenant == own.name || repolock.ErrorDetails(o.err)["owner"] != own.name {
				t.Errorf("%s on %s: %v; the owner is %s", o.tenant, o.key, o.err, own.name)
			}
		default:
			t.Errorf("%s on %s: unexpected error %v", o.tenant, o.key, o.err)
		}
	}
	var locksN, appsN int
	if err := db.GetContext(ctx, &locksN, `SELECT count(*) FROM RepositoryLockOwner`); err != nil {
		t.Fatal(err)
	}
	if err := db.GetContext(ctx, &appsN, `SELECT count(*) FROM applications`); err != nil {
		t.Fatal(err)
	}
	if locksN != len(owners) || appsN != created || created+claimed != nTenants*perTenant*perGoroutine {
		t.Fatalf("%d locks for %d repositories; %d applications, %d created, %d claimed", locksN, len(owners), appsN, created, claimed)
	}
	checkInvariants(t, db)
	t.Logf("%d repositories, %d applications created, %d claims refused", len(owners), created, claimed)
}

// newRaceDB is a test database whose pool is capped at 16 connections: 16
// concurrent transactions are plenty of contention on this machine, and
// Postgres' max_connections is shared by every test process.
func newRaceDB(t *testing.T) *database.DB {
	return dbtest.New(t, dbtest.Pool(database.PoolConfig{MaxOpenConns: 16}))
}

// churnResult counts what the churning goroutines saw.
type churnResult struct {
	created, deleted, claimed atomic.Int64
}

// churn has one tenant create an application on the repository (in a
// random spelling) and delete it again, n times. claimedBy is the only
// tenant whose claim it accepts as a refusal ("" accepts none).
func churn(t *testing.T, svc *apps.Service, u tenants.Tenant, g, n int, claimedBy string, res *churnResult) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(uint64(g), 11))
	for j := 0; j < n; j++ {
		sp := spellings("churn", 0)
		app, err := svc.CreateApplication(ctx, u.ID, apps.NewApplication{Name: fmt.Sprintf("churn-%d-%d", g, j), RepoURL: sp[r.IntN(len(sp))]})
		if err != nil {
			if claimedBy != "" && repolock.ErrorCode(err) == repolock.ERepositoryClaimed && repolock.ErrorDetails(err)["owner"] == claimedBy {
				res.claimed.Add(1)
				continue
			}
			t.Errorf("%s create: %v", u.Name, err)
			return
		}
		res.created.Add(1)
		if err := svc.DeleteApplication(ctx, u.ID, app.ID); err != nil {
			t.Errorf("%s delete: %v", u.Name, err)
			return
		}
		res.deleted.Add(1)
	}
}

// One tenant creates and deletes applications on one URL from many
// goroutines while another tenant tries to claim it.
func TestChurn(t *testing.T) {
	t.Parallel()
	const key = "github.com/churn/repo-0"
	const churners, rounds = 8, 40

	// Only the owner churns: locks are released and re-created all the time,
	// and every create and delete succeeds.
	t.Run("owner alone", func(t *testing.T) {
		t.Parallel()
		db := newRaceDB(t)
		svc, _ := newApps(db)
		alice := dbtest.NewTenant(t, db, "alice")
		var res churnResult
		var wg sync.WaitGroup
		for g := 0; g < churners; g++ {
			wg.Add(1)
			go func(g int) { defer wg.Done(); churn(t, svc, alice, g, rounds, "", &res) }(g)
		}
		wg.Wait()
		if res.created.Load() != churners*rounds || res.deleted.Load() != churners*rounds {
			t.Fatalf("created %d deleted %d, want %d", res.created.Load(), res.deleted.Load(), churners*rounds)
		}
		if id, _ := lockOf(t, db, key); id != "" {
			t.Fatalf("lock %s left without references", id)
		}
		evs := lockEvents(t, db, key)
		checkLifecycle(t, evs)
		s := eventSummary(evs)
		if s["acquired"] != s["released"] || s["acquired"] < 1 {
			t.Fatalf("events %v", s)
		}
		checkInvariants(t, db)
		t.Logf("%d creates and deletes; the lock was acquired and released %d times", churners*rounds, s["acquired"])
	})

	// An application that is never deleted keeps a reference the whole
	// time: the other tenant never wins, and the owner never fails.
	t.Run("anchored", func(t *testing.T) {
		t.Parallel()
		db := newRaceDB(t)
		svc, _ := newApps(db)
		alice := dbtest.NewTenant(t, db, "alice")
		bob := dbtest.NewTenant(t, db, "bob")
		anchor, err := svc.CreateApplication(context.Background(), alice.ID, apps.NewApplication{Name: "anchor", RepoURL: "https://github.com/churn/repo-0"})
		if err != nil {
			t.Fatal(err)
		}
		var res churnResult
		var bobDenied atomic.Int64
		stop := make(chan struct{})
		var wg, bobs sync.WaitGroup
		for g := 0; g < churners; g++ {
			wg.Add(1)
			go func(g int) { defer wg.Done(); churn(t, svc, alice, g, rounds, "", &res) }(g)
		}
		for g := 0; g < 2; g++ {
			bobs.Add(1)
			go func(g int) {
				defer bobs.Done()
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					default:
					}
					_, err := svc.CreateApplication(context.Background(), bob.ID, apps.NewApplication{Name: fmt.Sprintf("bob-%d-%d", g, j), RepoURL: "git@github.com:churn/repo-0.git"})
					if repolock.ErrorCode(err) != repolock.ERepositoryClaimed || repolock.ErrorDetails(err)["owner"] != "alice" {
						t.Errorf("bob: %v, want repository_claimed by alice", err)
						return
					}
					bobDenied.Add(1)
				}
			}(g)
		}
		wg.Wait()
		close(stop)
		bobs.Wait()
		if res.created.Load() != churners*rounds || res.deleted.Load() != churners*rounds {
			t.Fatalf("created %d deleted %d, want %d", res.created.Load(), res.deleted.Load(), churners*rounds)
		}
		if id, owner := lockOf(t, db, key); id != anchor.LockID || owner != "alice" {
			t.Fatalf("lock %s of %s, want the anchor's %s", id, owner, anchor.LockID)
		}
		s := eventSummary(lockEvents(t, db, key))
		if s["acquired"] != 1 || s["released"] != 0 || int64(s["denied"]) != bobDenied.Load() {
			t.Fatalf("events %v, bob denied %d times", s, bobDenied.Load())
		}
		checkInvariants(t, db)
	})

	// Without an anchor the lock becomes free whenever the owner's last
	// application is deleted; the other tenant may win it then, and only
	// then. Afterwards the owner's creates are refused naming the winner.
	t.Run("contested", func(t *testing.T) {
		t.Parallel()
		db := newRaceDB(t)
		svc, _ := newApps(db)
		alice := dbtest.NewTenant(t, db, "alice")
		bob := dbtest.NewTenant(t, db, "bob")
		var res churnResult
		var wg sync.WaitGroup
		for g := 0; g < churners; g++ {
			wg.Add(1)
			go func(g int) { defer wg.Done(); churn(t, svc, alice, g, rounds, "bob", &res) }(g)
		}
		var bobWon atomic.Bool
		var bobApp apps.Application
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < churners*rounds && !bobWon.Load(); j++ {
				app, err := svc.CreateApplication(context.Background(), bob.ID, apps.NewApplication{Name: fmt.Sprintf("bob-%d", j), RepoURL: "https://github.com/churn/repo-0"})
				switch {
				case err == nil:
					bobApp = app
					bobWon.Store(true)
				case repolock.ErrorCode(err) == repolock.ERepositoryClaimed && repolock.ErrorDetails(err)["owner"] == "alice":
				default:
					t.Errorf("bob: %v", err)
					return
				}
			}
		}()
		wg.Wait()
		if res.created.Load() != res.deleted.Load() || res.created.Load()+res.claimed.Load() != churners*rounds {
			t.Fatalf("alice: created %d deleted %d claimed %d", res.created.Load(), res.deleted.Load(), res.claimed.Load())
		}
		id, owner := lockOf(t, db, key)
		switch {
		case bobWon.Load():
			if id != bobApp.LockID || owner != "bob" {
				t.Fatalf("bob won but the lock is %s of %s", id, owner)
			}
		case id != "":
			t.Fatalf("bob lost and alice deleted everything, yet lock %s of %s remains", id, owner)
		case res.claimed.Load() != 0:
			t.Fatalf("alice was refused %d times but bob never won", res.claimed.Load())
		}
		evs := lockEvents(t, db, key)
		checkLifecycle(t, evs)
		checkInvariants(t, db)
		t.Logf("bob won: %v; alice created %d, refused %d; events %v", bobWon.Load(), res.created.Load(), res.claimed.Load(), eventSummary(evs))
	})
}

// Updates moving applications between two repositories race with deletes
// of the same applications; the references and locks stay consistent.
func TestUpdateDeleteRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newRaceDB(t)
	svc, _ := newApps(db)
	alice := dbtest.NewTenant(t, db, "alice")
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		a, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: fmt.Sprintf("a%d", i), RepoURL: "https://github.com/mv/one"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = a.ID
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(2)
		go func(i int, id string) {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				url := []string{"https://github.com/mv/one", "https://github.com/mv/two", "https://github.com/mv/three"}[(i+j)%3]
				_, err := svc.UpdateApplication(ctx, alice.ID, id, apps.ApplicationPatch{RepoURL: &url})
				if err != nil && repolock.ErrorCode(err) != repolock.ENotFound {
					t.Errorf("update: %v", err)
				}
			}
		}(i, id)
		go func(id string) {
			defer wg.Done()
			if err := svc.DeleteApplication(ctx, alice.ID, id); err != nil {
				t.Errorf("delete: %v", err)
			}
		}(id)
	}
	wg.Wait()
	var left int
	if err := db.GetContext(ctx, &left, `SELECT (SELECT count(*) FROM applications) + (SELECT count(*) FROM RepositoryLockOwner)`); err != nil || left != 0 {
		t.Fatalf("%d rows left (%v)", left, err)
	}
	for _, key := range []string{"github.com/mv/one", "github.com/mv/two", "github.com/mv/three"} {
		checkLifecycle(t, lockEvents(t, db, key))
	}
}
