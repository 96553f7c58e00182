package reports_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/rekey"
	"github.com/repolock/repolock/internal/reports"
)

// TestOwnershipFiguresChaos drives random concurrent creates and deletes of
// Applications and Credentials, bare acquires, releases, GC runs, re-keying
// (an alias added and removed, which moves references between locks and
// deletes and creates locks), transfers, tenant deletions and folds, while
// at random gaps around FIGURES_CHAOS_KILL_EVERY (400 ms) all of the
// database's sessions are killed with pg_terminate_backend (so statements,
// batches and COMMITs fail midway), then proves the figures have not
// drifted: Verify recounts them from the base tables.
// FIGURES_CHAOS_DURATION (default 8s) sets the run, which goes on (up to
// three times as long) until every kind of operation succeeded once.
func TestOwnershipFiguresChaos(t *testing.T) {
	t.Parallel()
	duration := 8 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FIGURES_CHAOS_DURATION")); err == nil && d > 0 {
		duration = d
	}
	killEvery := 400 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("FIGURES_CHAOS_KILL_EVERY")); err == nil && d > 0 {
		killEvery = d
	}
	ctx := context.Background()
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{MaxOpenConns: 12}))
	quiet := slog.New(slog.DiscardHandler)
	src, err := rekey.NewSource(ctx, db, quiet)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rekey.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ls := locks.New(db, src, nil)
	as := apps.New(db, ls)
	rk := rekey.New(db, ls, m)
	rs := reports.New(db)
	collector := gc.New(db, ls, gc.Config{Holder: "chaos", Logger: quiet})

	var tmu sync.Mutex
	names := []string{}
	ids := map[string]string{}
	newTenant := func() {
		u := dbtest.NewTenant(t, db, "")
		tmu.Lock()
		names = append(names, u.Name)
		ids[u.Name] = u.ID
		tmu.Unlock()
	}
	for range 4 {
		newTenant()
	}
	pick := func(r *rand.Rand) (string, string) {
		tmu.Lock()
		defer tmu.Unlock()
		n := names[r.IntN(len(names))]
		return n, ids[n]
	}
	url := func(r *rand.Rand) string {
		if r.IntN(3) == 0 {
			// Re-keyed by the alias, onto keys no other URL has.
			return fmt.Sprintf("https://mirror.example.com/chaos/m%d", r.IntN(20))
		}
		return fmt.Sprintf("https://git.example.com/chaos/r%d", r.IntN(40))
	}

	var ok, failed [10]atomic.Int64
	var firstErr [10]atomic.Value
	const (
		opApp = iota
		opCred
		opAcquire
		opDeleteApp
		opDeleteCred
		opGC
		opAlias
		opTransfer
		opTenant
		opFold
	)
	opNames := []string{"create application", "create credential", "acquire", "delete application", "delete credential", "gc", "alias (re-key)", "transfer", "delete tenant", "fold"}
	mix := []int{opApp, opAcquire, opDeleteApp, opCred, opApp, opDeleteCred, opAcquire, opTransfer, opApp,
		opDeleteApp, opGC, opAlias, opFold, opApp, opAcquire, opDeleteApp, opCred, opTransfer, opDeleteCred, opTenant}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// The kinds in a fixed mix (the machine may be slow: each
				// must run), with random arguments.
				kind := mix[(w*5+i)%len(mix)]
				var err error
				name, tenant := pick(r)
				switch kind {
				case opApp:
					_, err = as.CreateApplication(ctx, tenant, apps.NewApplication{Name: fmt.Sprintf("a%d-%d", w, i), RepoURL: url(r)})
				case opCred:
					_, err = as.CreateRepositoryCredential(ctx, tenant, apps.NewRepositoryCredential{Name: fmt.Sprintf("c%d-%d", w, i), RepoURL: url(r), SecretRef: "vault:x"})
				case opAcquire:
					_, err = ls.Acquire(ctx, tenant, url(r))
				case opDeleteApp:
					var id string
					if err = db.GetContext(ctx, &id, `SELECT id FROM applications WHERE cluster_user_id = $1 ORDER BY random() LIMIT 1`, tenant); err == nil {
						err = as.DeleteApplication(ctx, tenant, id)
					}
				case opDeleteCred:
					var id string
					if err = db.GetContext(ctx, &id, `SELECT id FROM repository_credentials WHERE cluster_user_id = $1 ORDER BY random() LIMIT 1`, tenant); err == nil {
						err = as.DeleteRepositoryCredential(ctx, tenant, id)
					}
				case opGC:
					o := gc.DefaultOptions(gc.TriggerCLI)
					o.MinAge = 0
					_, err = collector.Collect(ctx, o)
				case opAlias:
					if _, err = rk.AddAlias(ctx, "mirror.example.com", "git.example.com", false); err != nil {
						_, err = rk.RemoveAlias(ctx, "mirror.example.com", false)
					}
				case opTransfer:
					var lock struct {
						ID    string `db:"id"`
						Owner string `db:"name"`
					}
					if err = db.GetContext(ctx, &lock, `SELECT o.id, u.name FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
						ORDER BY random() LIMIT 1`); err == nil {
						to, _ := pick(r)
						for to == lock.Owner {
							to, _ = pick(r)
						}
						_, err = ls.Transfer(ctx, locks.TransferRequest{LockID: lock.ID, To: to, References: locks.ReferencesDelete, Actor: "chaos"})
					}
				case opTenant:
					if _, err = as.DeleteTenant(ctx, name); err == nil {
						tmu.Lock()
						for j, n := range names {
							if n == name {
								names = append(names[:j], names[j+1:]...)
								break
							}
						}
						tmu.Unlock()
						newTenant()
					}
				default:
					_, err = rs.Fold(ctx)
				}
				if err != nil {
					firstErr[kind].CompareAndSwap(nil, err.Error())
					failed[kind].Add(1)
				} else {
					ok[kind].Add(1)
				}
			}
		})
	}
	var kills atomic.Int64
	wg.Go(func() {
		var dbName string
		if err := db.GetContext(ctx, &dbName, `SELECT current_database()`); err != nil {
			t.Error(err)
			return
		}
		admin := adminPool(t)
		// Random gaps around killEvery (a quarter to two and a half
		// times it): short ones cut statements midway, long ones let
		// the longer transactions (a tenant's deletion) finish sometimes.
		kr := rand.New(rand.NewPCG(99, uint64(time.Now().UnixNano())))
		for {
			gap := killEvery/4 + time.Duration(kr.Int64N(int64(killEvery*9/4)))
			select {
			case <-stop:
				return
			case <-time.After(gap):
			}
			var n int64
			if err := admin.GetContext(ctx, &n, `
				SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'`, dbName); err == nil {
				kills.Add(n)
			}
		}
	})
	// Run for duration, and on (up to three times as long, on a slow
	// machine) until every kind of operation succeeded at least once.
	deadline := time.Now().Add(3 * duration)
	time.Sleep(duration)
	for time.Now().Before(deadline) {
		all := true
		for k := range opNames {
			if ok[k].Load() == 0 {
				all = false
			}
		}
		if all {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	for k, n := range opNames {
		t.Logf("%-20s ok %5d  failed %5d  (first error: %v)", n, ok[k].Load(), failed[k].Load(), firstErr[k].Load())
	}
	t.Logf("sessions killed: %d", kills.Load())
	for _, k := range []int{opApp, opAcquire, opDeleteApp, opGC, opFold} {
		if ok[k].Load() == 0 {
			t.Errorf("no %s succeeded: the run did not exercise it", opNames[k])
		}
	}
	// The longer transactions may all be cut on a slow machine;
	// TestOwnershipFiguresEveryPath covers each of them without faults.
	for _, k := range []int{opAlias, opTransfer, opTenant} {
		if ok[k].Load() == 0 {
			t.Logf("no %s succeeded in this run (every attempt was cut)", opNames[k])
		}
	}
	if kills.Load() == 0 {
		t.Error("no session was killed")
	}
	noDrift(t, rs, "after the chaos")
	if _, err := rs.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	v := noDrift(t, rs, "after a last fold")
	t.Logf("no drift over %d tenants", v.Tenants)
}

// adminPool is a pool on the test server's maintenance database, closed
// when t ends.
func adminPool(t testing.TB) *database.DB {
	t.Helper()
	db, err := database.Open(context.Background(), dbtest.AdminURL(), database.PoolConfig{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
