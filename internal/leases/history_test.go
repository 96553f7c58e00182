package leases_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/leases"
	"github.com/repolock/repolock/internal/leases/leasecheck"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/repostate/kv"
)

// inProcess is the leasecheck.Target of a leases.Service and the fenced
// kv store on one database.
type inProcess struct {
	t      *testing.T
	svc    *leases.Service
	store  *kv.Postgres
	tenant string
}

func (p inProcess) status(op string, err error, lost repolock.Code) leasecheck.Status {
	switch {
	case err == nil:
		return leasecheck.OK
	case repolock.IsCode(err, lost):
		if lost == repolock.ELeaseHeld {
			return leasecheck.Held
		}
		return leasecheck.Lost
	case repolock.IsCode(err, repolock.EInvalid), repolock.IsCode(err, repolock.EInternal):
		p.t.Errorf("%s: %v", op, err) // a bug, not a fault
	}
	return leasecheck.Unknown
}

func (p inProcess) Acquire(ctx context.Context, key string, ttl, wait time.Duration) (string, int64, leasecheck.Status) {
	l, err := p.svc.Acquire(ctx, p.tenant, leases.AcquireRequest{Key: key, TTL: ttl, Wait: wait})
	return l.ID, l.FencingToken, p.status("acquire", err, repolock.ELeaseHeld)
}

func (p inProcess) Keepalive(ctx context.Context, _, id string) leasecheck.Status {
	_, err := p.svc.Keepalive(ctx, p.tenant, id)
	return p.status("keepalive", err, repolock.ENotFound)
}

func (p inProcess) Release(ctx context.Context, _, id string) leasecheck.Status {
	return p.status("release", p.svc.Release(ctx, p.tenant, id), repolock.ENotFound)
}

func (p inProcess) Write(ctx context.Context, key string, token int64) leasecheck.Status {
	pk, k := []byte("leasecheck"), []byte(key)
	_, pred, err := p.store.Get(ctx, pk, k)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return leasecheck.Unknown
	}
	_, err = p.store.SetIfFenced(ctx, pk, k, []byte(time.Now().String()), pred, kv.Fence{Tenant: p.tenant, Guard: key, Token: token})
	switch {
	case err == nil:
		return leasecheck.OK
	case errors.Is(err, kv.ErrPredicateFailed):
		return leasecheck.Conflict
	case kv.IsFenced(err):
		return leasecheck.Fenced
	case repolock.IsCode(err, repolock.EInvalid):
		p.t.Errorf("write: %v", err)
	}
	return leasecheck.Unknown
}

// historyDuration is the length of the recorded history: short under make
// test, LEASE_HISTORY_DURATION (a Go duration) for a longer run.
func historyDuration(t *testing.T) time.Duration {
	if v := os.Getenv("LEASE_HISTORY_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LEASE_HISTORY_DURATION=%q: %v", v, err)
		}
		return d
	}
	return 4 * time.Second
}

// TestLinearizableHistory records concurrent clients acquiring, keeping
// alive, writing the fenced register and releasing two keys, clients
// paused past their TTL that then write with their stale token, while
// the service's database sessions (the pool's and the notifier's LISTEN)
// are killed with pg_terminate_backend; Porcupine checks the history
// against leasecheck.Model.
func TestLinearizableHistory(t *testing.T) {
	t.Parallel()
	db, url := dbtest.NewWithURL(t, dbtest.Pool(database.PoolConfig{MaxOpenConns: 8, MaxIdleConns: 8}))
	n := listeningNotifier(t, url)
	target := inProcess{t: t, svc: leases.New(db, locks.New(db, locks.Fixed(normalize.Default()), nil), n),
		store: kv.NewPostgres(db), tenant: dbtest.NewTenant(t, db, "").ID}
	killer, err := database.Open(context.Background(), url, database.PoolConfig{MaxOpenConns: 1, MaxIdleConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killer.Close() })

	ctx, stop := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		killed int
	)
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(100+rand.IntN(300)) * time.Millisecond):
			}
			var n int
			if err := killer.GetContext(ctx, &n, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND random() < 0.5`); err == nil {
				killed += n
			}
		}
	})
	rec := leasecheck.NewRecorder()
	leasecheck.Run(ctx, rec, target, leasecheck.Workload{
		Keys: []string{"job/a", "job/b"}, Clients: 4, Pausers: 2,
		TTL: 600 * time.Millisecond, Wait: time.Second, Pause: 100 * time.Millisecond,
		Duration: historyDuration(t),
	})
	stop()
	wg.Wait()
	ops := rec.Operations()
	counts := leasecheck.Counts(ops)
	t.Logf("%d operations, %d sessions killed: %v", len(ops), killed, counts)
	// The history must hold what it claims to test.
	for _, want := range []string{"acquire/ok", "write/ok", "write/fenced", "keepalive/ok", "keepalive/lost", "release/ok"} {
		if counts[want] == 0 {
			t.Errorf("the history has no %s", want)
		}
	}
	if killed == 0 {
		t.Error("no session was killed")
	}
	leasecheck.Check(t, "inprocess", ops, time.Minute)
}
