package leases_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/leases"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pglisten"
)

type env struct {
	db     *database.DB
	svc    *leases.Service
	notify *leases.Notifier
}

// newEnv returns the service on a fresh database with a connected
// notifier.
func newEnv(t *testing.T, opts ...dbtest.Option) env {
	t.Helper()
	db, url := dbtest.NewWithURL(t, opts...)
	n := listeningNotifier(t, url)
	return env{db: db, svc: leases.New(db, locks.New(db, locks.Fixed(normalize.Default()), nil), n), notify: n}
}

// listeningNotifier returns a notifier subscribed to a LISTEN session
// on url, once the session is up.
func listeningNotifier(t *testing.T, url string) *leases.Notifier {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := leases.NewNotifier(logger)
	l := pglisten.New(pglisten.Config{URL: url, Logger: logger})
	l.Subscribe(leases.NotifyChan, pglisten.Subscriber{Notify: n.Notify, State: n.SetListening})
	l.Start()
	t.Cleanup(func() { l.Close(); n.Close() })
	select {
	case <-l.Connected():
	case <-time.After(30 * time.Second):
		t.Fatal("the LISTEN session did not connect")
	}
	return n
}

// expire ends the key's lease now by the database's clock, as if its TTL
// had passed.
func (e env) expire(t *testing.T, tenant, key string) {
	t.Helper()
	if _, err := e.db.ExecContext(context.Background(),
		`UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' WHERE cluster_user_id = $1 AND key = $2`, tenant, key); err != nil {
		t.Fatal(err)
	}
}

func req(key string) leases.AcquireRequest {
	return leases.AcquireRequest{Key: key, TTL: 30 * time.Second}
}

func wantCode(t *testing.T, err error, code repolock.Code) {
	t.Helper()
	if !repolock.IsCode(err, code) {
		t.Fatalf("error = %v, want %s", err, code)
	}
}

func TestAcquireKeepaliveRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	bob := dbtest.NewTenant(t, e.db, "")

	l1, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "indexer/github.com", TTL: 15 * time.Second, Holder: "host-1"})
	if err != nil {
		t.Fatal(err)
	}
	if l1.FencingToken != 1 || l1.Key != "indexer/github.com" || l1.Holder != "host-1" || l1.TTL() != 15*time.Second {
		t.Fatalf("first lease = %+v", l1)
	}
	if !l1.ExpiresAt.After(l1.AcquiredAt) {
		t.Fatalf("expires_at %v not after acquired_at %v", l1.ExpiresAt, l1.AcquiredAt)
	}
	// Held: a second acquisition is refused and issues no token.
	_, err = e.svc.Acquire(ctx, alice.ID, req("indexer/github.com"))
	wantCode(t, err, repolock.ELeaseHeld)
	// Another tenant's key of the same name is another key.
	lb, err := e.svc.Acquire(ctx, bob.ID, req("indexer/github.com"))
	if err != nil || lb.FencingToken != 1 {
		t.Fatalf("bob: %+v, %v", lb, err)
	}
	// Keepalive extends; another tenant's keepalive of it is not found.
	k, err := e.svc.Keepalive(ctx, alice.ID, l1.ID)
	if err != nil || k.FencingToken != 1 || k.ID != l1.ID || k.ExpiresAt.Before(l1.ExpiresAt) {
		t.Fatalf("keepalive: %+v, %v", k, err)
	}
	_, err = e.svc.Keepalive(ctx, bob.ID, l1.ID)
	wantCode(t, err, repolock.ENotFound)
	wantCode(t, e.svc.Release(ctx, bob.ID, l1.ID), repolock.ENotFound)
	_, err = e.svc.Keepalive(ctx, alice.ID, "not-a-uuid")
	wantCode(t, err, repolock.ENotFound)

	if err := e.svc.Release(ctx, alice.ID, l1.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.svc.Release(ctx, alice.ID, l1.ID), repolock.ENotFound)
	_, err = e.svc.Keepalive(ctx, alice.ID, l1.ID)
	wantCode(t, err, repolock.ENotFound)
	// The refused attempt above issued nothing: the next token is 2.
	l2, err := e.svc.Acquire(ctx, alice.ID, req("indexer/github.com"))
	if err != nil || l2.FencingToken != 2 || l2.ID == l1.ID {
		t.Fatalf("second lease = %+v, %v", l2, err)
	}
}

func TestExpiredLeaseIsFreeAndLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	l1, err := e.svc.Acquire(ctx, alice.ID, req("k"))
	if err != nil {
		t.Fatal(err)
	}
	e.expire(t, alice.ID, "k")
	// Expired: no keepalive, and free for the next acquirer without any
	// sweeper.
	_, err = e.svc.Keepalive(ctx, alice.ID, l1.ID)
	wantCode(t, err, repolock.ENotFound)
	l2, err := e.svc.Acquire(ctx, alice.ID, req("k"))
	if err != nil || l2.FencingToken != 2 {
		t.Fatalf("after expiry: %+v, %v", l2, err)
	}
	// The old holder's release no longer matches the new lease.
	wantCode(t, e.svc.Release(ctx, alice.ID, l1.ID), repolock.ENotFound)
	if _, err := e.svc.Keepalive(ctx, alice.ID, l2.ID); err != nil {
		t.Fatalf("new holder's keepalive: %v", err)
	}
	// Releasing an expired lease nobody took is not an error.
	e.expire(t, alice.ID, "k")
	if err := e.svc.Release(ctx, alice.ID, l2.ID); err != nil {
		t.Fatal(err)
	}
}

func TestCleanupKeepsTokensIncreasing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	var live leases.Lease
	for _, key := range []string{"a", "b", "c"} {
		l, err := e.svc.Acquire(ctx, alice.ID, req(key))
		if err != nil {
			t.Fatal(err)
		}
		if key == "c" {
			live = l
		} else {
			e.expire(t, alice.ID, key)
		}
	}
	n, err := e.svc.Cleanup(ctx, 1)
	if err != nil || n != 1 {
		t.Fatalf("cleanup(1) = %d, %v", n, err)
	}
	n, err = e.svc.Cleanup(ctx, 10)
	if err != nil || n != 1 {
		t.Fatalf("cleanup(10) = %d, %v", n, err)
	}
	var rows int
	if err := e.db.GetContext(ctx, &rows, `SELECT count(*) FROM leases`); err != nil || rows != 1 {
		t.Fatalf("rows left = %d, %v", rows, err)
	}
	if _, err := e.svc.Keepalive(ctx, alice.ID, live.ID); err != nil {
		t.Fatalf("cleanup touched a valid lease: %v", err)
	}
	l, err := e.svc.Acquire(ctx, alice.ID, req("a"))
	if err != nil || l.FencingToken != 2 {
		t.Fatalf("after cleanup: %+v, %v", l, err)
	}
}

// TestCleanupSkipsLockedLeases holds the row lock of one expired lease (as
// an acquisition taking it over does) while Cleanup runs. Cleanup must
// delete the other expired lease and return without waiting: a sweep
// that waited for row locks, taking them in its scan's order, could
// deadlock with the acquisition batches, which lock leases in key order.
func TestCleanupSkipsLockedLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	for _, key := range []string{"a", "b"} {
		if _, err := e.svc.Acquire(ctx, alice.ID, req(key)); err != nil {
			t.Fatal(err)
		}
		e.expire(t, alice.ID, key)
	}
	hold, pid := dbtest.BeginWithPID(t, e.db)
	if _, err := hold.ExecContext(ctx, `SELECT id FROM leases WHERE cluster_user_id = $1 AND key = 'a' FOR UPDATE`, alice.ID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := e.svc.Cleanup(ctx, 10)
		done <- result{n, err}
	}()
	var r result
	for got := false; !got; {
		select {
		case r = <-done:
			got = true
		default:
			if dbtest.BlockedAny(t, e.db, pid) {
				hold.Rollback() //nolint:errcheck // let the sweep finish before failing
				t.Fatalf("Cleanup waited for the row lock of a lease another transaction holds; it must skip it (%+v)", <-done)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if r.err != nil || r.n != 1 {
		t.Fatalf("Cleanup with a's lease locked = %d, %v; want 1 (b's), nil", r.n, r.err)
	}
	var left []string
	if err := e.db.SelectContext(ctx, &left, `SELECT key FROM leases WHERE cluster_user_id = $1 ORDER BY key`, alice.ID); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != "a" {
		t.Fatalf("leases left: %v; want [a] (the locked one)", left)
	}
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, err := e.svc.Cleanup(ctx, 10); err != nil || n != 1 {
		t.Fatalf("Cleanup after the lock was released = %d, %v; want 1", n, err)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	long := make([]byte, leases.MaxKeyLen+1)
	for i := range long {
		long[i] = 'k'
	}
	for _, tc := range []struct {
		name string
		r    leases.AcquireRequest
	}{
		{"empty key", leases.AcquireRequest{TTL: time.Second}},
		{"long key", leases.AcquireRequest{Key: string(long), TTL: time.Second}},
		{"control character", leases.AcquireRequest{Key: "a\nb", TTL: time.Second}},
		{"padded key", leases.AcquireRequest{Key: " a", TTL: time.Second}},
		{"no ttl", leases.AcquireRequest{Key: "a"}},
		{"ttl too short", leases.AcquireRequest{Key: "a", TTL: time.Millisecond}},
		{"ttl too long", leases.AcquireRequest{Key: "a", TTL: 25 * time.Hour}},
		{"ttl not whole milliseconds", leases.AcquireRequest{Key: "a", TTL: time.Second + time.Microsecond}},
		{"negative wait", leases.AcquireRequest{Key: "a", TTL: time.Second, Wait: -time.Second}},
		{"wait too long", leases.AcquireRequest{Key: "a", TTL: time.Second, Wait: time.Hour}},
		{"bad URL", leases.AcquireRequest{Key: "https://", TTL: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.Acquire(ctx, alice.ID, tc.r)
			wantCode(t, err, repolock.EInvalid)
		})
	}
	var n int
	if err := e.db.GetContext(ctx, &n, `SELECT (SELECT count(*) FROM leases) + (SELECT count(*) FROM lease_tokens)`); err != nil || n != 0 {
		t.Fatalf("refused requests wrote %d rows (%v)", n, err)
	}
}

func TestRepositoryURLKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	bob := dbtest.NewTenant(t, e.db, "")
	dbtest.NewLock(t, e.db, bob.ID, "github.com/o/r", 0)

	// Bob owns the repository: Alice cannot lease it under any spelling.
	for _, spelling := range []string{"https://github.com/o/r.git", "git@github.com:o/r.git"} {
		_, err := e.svc.Acquire(ctx, alice.ID, req(spelling))
		wantCode(t, err, repolock.ERepositoryClaimed)
	}
	// Bob's spellings are one key.
	l, err := e.svc.Acquire(ctx, bob.ID, req("git@github.com:o/r.git"))
	if err != nil || l.Key != "github.com/o/r" {
		t.Fatalf("bob: %+v, %v", l, err)
	}
	_, err = e.svc.Acquire(ctx, bob.ID, req("https://github.com/o/r/"))
	wantCode(t, err, repolock.ELeaseHeld)
	// An unclaimed repository is anyone's to lease.
	if _, err := e.svc.Acquire(ctx, alice.ID, req("https://github.com/o/free")); err != nil {
		t.Fatal(err)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	bob := dbtest.NewTenant(t, e.db, "")
	for _, k := range []string{"sync/b", "sync/a", "sync/c", "syncx", "other"} {
		if _, err := e.svc.Acquire(ctx, alice.ID, req(k)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.Acquire(ctx, bob.ID, req("sync/z")); err != nil {
		t.Fatal(err)
	}
	e.expire(t, alice.ID, "sync/c")
	var got []string
	token := ""
	for {
		page, next, err := e.svc.List(ctx, alice.ID, "sync/", 1, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page {
			got = append(got, l.Key)
		}
		if next == "" {
			break
		}
		token = next
	}
	if len(got) != 2 || got[0] != "sync/a" || got[1] != "sync/b" {
		t.Fatalf("list sync/ = %v, want [sync/a sync/b]", got)
	}
	all, _, err := e.svc.List(ctx, alice.ID, "", 50, "")
	if err != nil || len(all) != 4 {
		t.Fatalf("list all = %d, %v", len(all), err)
	}
	// A token of another prefix is refused.
	_, next, _ := e.svc.List(ctx, alice.ID, "", 1, "")
	_, _, err = e.svc.List(ctx, alice.ID, "sync/", 1, next)
	wantCode(t, err, repolock.EInvalid)
}

// TestWaitWokenByRelease: a waiting acquisition is woken by the release's
// notification and gets the next token.
func TestWaitWokenByRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	l1, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "k", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   leases.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "k", TTL: time.Hour, Wait: leases.MaxWait})
		done <- result{l, err}
	}()
	waitFor(t, "the waiter to subscribe", func() bool { return e.notify.Waiting() == 1 })
	select {
	case r := <-done:
		t.Fatalf("acquired while held: %+v %v", r.l, r.err)
	default:
	}
	if err := e.svc.Release(ctx, alice.ID, l1.ID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.l.FencingToken != 2 {
		t.Fatalf("waiter got %+v, %v", r.l, r.err)
	}
}

// TestWaitEndsHeld: a wait that ends while the key is held answers
// lease_held.
func TestWaitEndsHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	if _, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "k", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "k", TTL: time.Hour, Wait: 200 * time.Millisecond})
	wantCode(t, err, repolock.ELeaseHeld)
}

// TestWaitWokenByExpiry: with no release, the waiter gets the lease once
// the holder's TTL ran out by the database's clock.
func TestWaitWokenByExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	if _, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "k", TTL: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	l, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "k", TTL: time.Hour, Wait: leases.MaxWait})
	if err != nil || l.FencingToken != 2 {
		t.Fatalf("waiter got %+v, %v", l, err)
	}
}

// TestConcurrentMutualExclusion: many workers of one key, each waiting,
// holding and releasing: never two holders at once, every token issued
// once, in the order the leases were held.
func TestConcurrentMutualExclusion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	const workers, rounds = 6, 5
	var (
		holders atomic.Int32
		mu      sync.Mutex
		order   []int64
		wg      sync.WaitGroup
	)
	errs := make(chan error, workers*rounds)
	for range workers {
		wg.Go(func() {
			for range rounds {
				l, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "job", TTL: time.Hour, Wait: leases.MaxWait})
				if err != nil {
					errs <- err
					return
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				order = append(order, l.FencingToken)
				mu.Unlock()
				holders.Add(-1)
				if err := e.svc.Release(ctx, alice.ID, l.ID); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(order) != workers*rounds {
		t.Fatalf("%d acquisitions, want %d", len(order), workers*rounds)
	}
	for i, tok := range order {
		if tok != int64(i+1) {
			t.Fatalf("tokens in holding order = %v, want 1..%d", order, len(order))
		}
	}
}

// TestConcurrentNoWait: of many simultaneous acquisitions without wait,
// exactly one wins.
func TestConcurrentNoWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	var won, held atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, err := e.svc.Acquire(ctx, alice.ID, req("race"))
			switch {
			case err == nil:
				won.Add(1)
			case repolock.IsCode(err, repolock.ELeaseHeld):
				held.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || held.Load() != 15 {
		t.Fatalf("won %d, held %d; want 1 and 15", won.Load(), held.Load())
	}
	var tok int64
	if err := e.db.GetContext(ctx, &tok, `SELECT token FROM lease_tokens WHERE cluster_user_id = $1`, alice.ID); err != nil || tok != 1 {
		t.Fatalf("issued token = %d, %v; refused attempts must issue none", tok, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConcurrentBatches: acquisitions, keepalives and releases of many
// keys by two tenants running at once (through the group commit's
// Batchers) each get their own answer: per key, one holder at a time and
// tokens 1, 2, 3... in holding order; a keepalive or release answers for
// its own lease only.
func TestConcurrentBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	bob := dbtest.NewTenant(t, e.db, "")
	const workers, rounds, keys = 24, 15, 6
	var (
		mu      sync.Mutex
		holding = map[string]bool{}
		tokens  = map[string][]int64{}
		wg      sync.WaitGroup
	)
	for w := range workers {
		tenant := []string{alice.ID, bob.ID}[w%2]
		wg.Go(func() {
			for r := range rounds {
				key := fmt.Sprintf("job-%d", (w+r)%keys)
				id := tenant + "/" + key
				l, err := e.svc.Acquire(ctx, tenant, leases.AcquireRequest{Key: key, TTL: time.Hour, Wait: leases.MaxWait})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if holding[id] {
					t.Errorf("%s: two holders at once", id)
				}
				holding[id] = true
				tokens[id] = append(tokens[id], l.FencingToken)
				mu.Unlock()
				if k, err := e.svc.Keepalive(ctx, tenant, l.ID); err != nil || k.ID != l.ID || k.FencingToken != l.FencingToken {
					t.Errorf("keepalive of %s: %+v, %v", id, k, err)
				}
				// Someone else's release of this lease is not found.
				other := []string{alice.ID, bob.ID}[(w+1)%2]
				if err := e.svc.Release(ctx, other, l.ID); !repolock.IsCode(err, repolock.ENotFound) {
					t.Errorf("release by another tenant: %v, want not found", err)
				}
				mu.Lock()
				holding[id] = false
				mu.Unlock()
				if err := e.svc.Release(ctx, tenant, l.ID); err != nil {
					t.Error(err)
					return
				}
				if err := e.svc.Release(ctx, tenant, l.ID); !repolock.IsCode(err, repolock.ENotFound) {
					t.Errorf("second release: %v, want not found", err)
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for id, toks := range tokens {
		total += len(toks)
		for i, tok := range toks {
			if tok != int64(i+1) {
				t.Fatalf("%s: tokens in holding order = %v, want 1..%d", id, toks, len(toks))
			}
		}
	}
	if total != workers*rounds {
		t.Fatalf("%d acquisitions, want %d", total, workers*rounds)
	}
	st := e.db.BatchStats()
	t.Logf("batches: %+v", st)
	for _, name := range []string{leases.BatchAcquire, leases.BatchKeepalive, leases.BatchRelease} {
		if st[name].Calls == 0 {
			t.Errorf("%s: no call went through the Batcher: %+v", name, st[name])
		}
	}
}

// TestListStopsAtPrefixEnd: a key_prefix list reads only the prefix's
// index range: keys just past the prefix (the next byte, a longer key
// after it, another tenant's) are neither listed nor read (EXPLAIN
// ANALYZE: the end is an index condition and no row is removed by a
// filter).
func TestListStopsAtPrefixEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	for _, k := range []string{"sync/a", "sync/b", "sync0", "sync0/x", "sync\u00e9", "synd", "sz", "sync"} {
		if _, err := e.svc.Acquire(ctx, alice.ID, req(k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"sync/", []string{"sync/a", "sync/b"}},
		{"sync", []string{"sync", "sync/a", "sync/b", "sync0", "sync0/x", "sync\u00e9"}},
		{"sync0", []string{"sync0", "sync0/x"}},
		{"sync\u00e9", []string{"sync\u00e9"}},
		{"syncz", nil},
	} {
		page, next, err := e.svc.List(ctx, alice.ID, tc.prefix, 50, "")
		if err != nil || next != "" {
			t.Fatalf("list %q: next %q, %v", tc.prefix, next, err)
		}
		var got []string
		for _, l := range page {
			got = append(got, l.Key)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("list %q = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	// The plan: an index scan whose condition holds the end, and no row
	// read past it, even in a generic plan (a prepared statement's, where
	// the planner cannot derive a range from starts_with and a parameter).
	// (The table is tiny: the planner is told to use the index, as it
	// does on a table of many leases.)
	var lines []string
	err := e.db.WithTx(ctx, func(tx database.Tx) error {
		if _, err := tx.ExecContext(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
			SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `PREPARE leases_list_prefix AS `+leases.ListPrefixSQL); err != nil {
			return err
		}
		defer tx.ExecContext(ctx, `DEALLOCATE leases_list_prefix`) //nolint:errcheck // the transaction's end reports
		return tx.SelectContext(ctx, &lines, fmt.Sprintf(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
			EXECUTE leases_list_prefix('%s', '', 'sync/', 51, 'sync0')`, alice.ID))
	})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(lines, "\n")
	if !strings.Contains(text, "Index Cond") || !strings.Contains(text, "key < ") {
		t.Errorf("the end is not an index condition:\n%s", text)
	}
	if strings.Contains(text, "Rows Removed by Filter") || strings.Contains(text, "Seq Scan") {
		t.Errorf("the scan reads rows past the prefix:\n%s", text)
	}
}

func TestPrefixEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix, end string
		ok          bool
	}{
		{"", "", false},
		{"sync/", "sync0", true},
		{"a\u00e9", "a\u00ea", true},
		{"a\ud7ff", "a\ue000", true},
		{"a\U0010ffff", "b", true},
		{"\U0010ffff\U0010ffff", "", false},
		{"a\xff", "", false},
	} {
		end, ok := leases.PrefixEnd(tc.prefix)
		if end != tc.end || ok != tc.ok {
			t.Errorf("PrefixEnd(%q) = %q, %v; want %q, %v", tc.prefix, end, ok, tc.end, tc.ok)
		}
	}
}

// result is one call's answer in TestBatches.
type result struct {
	l   leases.Lease
	err error
}

// TestBatches: concurrent acquisitions, keepalives and releases of
// distinct keys (lease ids) share one statement and one commit (group
// commit), each call still gets its own answer, and two calls on one key
// (one lease id) never share a batch: the second runs in the next one and
// sees the first's outcome. Each part holds a batch in flight on a row an
// open transaction holds and queues the calls behind it
// (dbtest.InOneBlockedBatch), so the batches are formed exactly as the
// assertions count them.
func TestBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dbtest.Pool(database.PoolConfig{BatchStallAfter: time.Hour}))
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	bob := dbtest.NewTenant(t, e.db, "")
	acquire := func(tenant, key string) func() result {
		return func() result {
			l, err := e.svc.Acquire(ctx, tenant, req(key))
			return result{l, err}
		}
	}
	batches := func(name string) int64 { return e.db.BatchStats()[name].Batches }

	// Acquisitions: the held one waits for the key's lease_tokens row,
	// which the open transaction inserted.
	got := dbtest.InOneBlockedBatch(t, e.db, leases.BatchAcquire, func(tx database.Tx) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO lease_tokens (cluster_user_id, key, token) VALUES ($1, 'blocker', 7)`, alice.ID); err != nil {
			t.Fatal(err)
		}
	}, acquire(alice.ID, "blocker"), map[string]func() result{
		"alice/x": acquire(alice.ID, "x"),
		"bob/x":   acquire(bob.ID, "x"),
		"alice/y": acquire(alice.ID, "y"),
		"same-1":  acquire(alice.ID, "same"),
		"same-2":  acquire(alice.ID, "same"),
	})
	for _, label := range []string{"held", "alice/x", "bob/x", "alice/y"} {
		if r := got[label]; r.err != nil || r.l.FencingToken != 1 {
			t.Fatalf("%s: %+v, %v; want token 1 (the blocker's token row was rolled back)", label, r.l, r.err)
		}
	}
	// One of the two calls on one key took it, the other ran in a later
	// batch and found it held.
	s1, s2 := got["same-1"], got["same-2"]
	if s1.err != nil {
		s1, s2 = s2, s1
	}
	if s1.err != nil || s1.l.FencingToken != 1 {
		t.Fatalf("same key: the first = %+v, %v; want token 1", s1.l, s1.err)
	}
	wantCode(t, s2.err, repolock.ELeaseHeld)
	// The held batch, the four distinct keys, the second call on "same".
	if n := batches(leases.BatchAcquire); n != 3 {
		t.Fatalf("acquire batches = %d, want 3 (%+v)", n, e.db.BatchStats()[leases.BatchAcquire])
	}

	lock := func(id string) func(database.Tx) {
		return func(tx database.Tx) {
			if _, err := tx.ExecContext(ctx, `SELECT 1 FROM leases WHERE id = $1 FOR UPDATE`, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	keepalive := func(tenant, id string) func() result {
		return func() result {
			l, err := e.svc.Keepalive(ctx, tenant, id)
			return result{l, err}
		}
	}
	held, ax, bx, ay, same := got["held"].l, got["alice/x"].l, got["bob/x"].l, got["alice/y"].l, s1.l
	got = dbtest.InOneBlockedBatch(t, e.db, leases.BatchKeepalive, lock(held.ID), keepalive(alice.ID, held.ID), map[string]func() result{
		"alice/x":   keepalive(alice.ID, ax.ID),
		"alice/x 2": keepalive(alice.ID, ax.ID),
		"bob/x":     keepalive(bob.ID, bx.ID),
		"by bob":    keepalive(bob.ID, ay.ID),
		"unknown":   keepalive(alice.ID, "00000000-0000-4000-8000-000000000000"),
	})
	for label, want := range map[string]leases.Lease{"held": held, "alice/x": ax, "alice/x 2": ax, "bob/x": bx} {
		r := got[label]
		if r.err != nil || r.l.ID != want.ID || r.l.Key != want.Key || r.l.FencingToken != want.FencingToken || r.l.ExpiresAt.Before(want.ExpiresAt) {
			t.Fatalf("keepalive %s = %+v, %v; want %+v renewed", label, r.l, r.err, want)
		}
	}
	wantCode(t, got["by bob"].err, repolock.ENotFound)
	wantCode(t, got["unknown"].err, repolock.ENotFound)
	if n := batches(leases.BatchKeepalive); n != 3 {
		t.Fatalf("keepalive batches = %d, want 3 (%+v)", n, e.db.BatchStats()[leases.BatchKeepalive])
	}

	// Releases, one of them of a lease a waiter waits for: the batch's
	// NOTIFY wakes it, and it gets the key's next token.
	waiter := make(chan result, 1)
	go func() {
		l, err := e.svc.Acquire(ctx, alice.ID, leases.AcquireRequest{Key: "y", TTL: time.Minute, Wait: leases.MaxWait})
		waiter <- result{l, err}
	}()
	dbtest.WaitForBatcher(t, e.db, leases.BatchAcquire, "the waiter's attempt ran", func(s database.BatchStats) bool { return s.Batches == 4 && s.InFlight == 0 })
	var wanted bool
	if err := e.db.GetContext(ctx, &wanted, `SELECT wanted FROM leases WHERE id = $1`, ay.ID); err != nil || !wanted {
		t.Fatalf("alice/y wanted = %v, %v; want true", wanted, err)
	}
	release := func(tenant, id string) func() error {
		return func() error { return e.svc.Release(ctx, tenant, id) }
	}
	errs := dbtest.InOneBlockedBatch(t, e.db, leases.BatchRelease, lock(held.ID), release(alice.ID, held.ID), map[string]func() error{
		"alice/x":   release(alice.ID, ax.ID),
		"alice/x 2": release(alice.ID, ax.ID),
		"alice/y":   release(alice.ID, ay.ID),
		"same":      release(alice.ID, same.ID),
		"by alice":  release(alice.ID, bx.ID),
	})
	for _, label := range []string{"held", "alice/y", "same"} {
		if errs[label] != nil {
			t.Fatalf("release %s: %v", label, errs[label])
		}
	}
	// Of two releases of one lease, the first (in the batch) deletes it,
	// the second (in the next batch) finds nothing.
	if e1, e2 := errs["alice/x"], errs["alice/x 2"]; !(e1 == nil && repolock.IsCode(e2, repolock.ENotFound) ||
		e2 == nil && repolock.IsCode(e1, repolock.ENotFound)) {
		t.Fatalf("two releases of one lease: %v, %v; want one nil, one not found", e1, e2)
	}
	wantCode(t, errs["by alice"], repolock.ENotFound)
	if n := batches(leases.BatchRelease); n != 3 {
		t.Fatalf("release batches = %d, want 3 (%+v)", n, e.db.BatchStats()[leases.BatchRelease])
	}
	select {
	case r := <-waiter:
		if r.err != nil || r.l.FencingToken != 2 {
			t.Fatalf("waiter: %+v, %v; want token 2", r.l, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the batch's release did not wake the waiter")
	}
	// bob's lease on x was not released by alice.
	if _, err := e.svc.Keepalive(ctx, bob.ID, bx.ID); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireFindsTokensThroughTheIndex: a session's first acquisitions,
// on a lease_tokens table of a few rows, cache the plans of the function's
// statements (PL/pgSQL keeps them for the life of the session). Once the
// table has grown, with no ANALYZE to invalidate those plans, an
// acquisition must still find its key's token row through the primary key,
// not by reading the table: migration 000022's UPDATE, planned on the tiny
// table, read every row of it on every acquisition (bench-http phase l:
// 152M rows read in 15 s). Counted with pg_stat_xact_user_tables, the
// transaction's own statistics.
func TestAcquireFindsTokensThroughTheIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	u := dbtest.NewTenant(t, db, "")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	acquire := func(key string) {
		t.Helper()
		var token int64
		if err := conn.QueryRowContext(ctx, `SELECT r_token FROM repolock_lease_acquire($1, $2, '', 60000, false)`, u.ID, key).Scan(&token); err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
	}
	if _, err := conn.ExecContext(ctx, `ANALYZE lease_tokens`); err != nil {
		t.Fatal(err)
	}
	// More than five runs: PL/pgSQL's plan cache then settles on a
	// generic plan.
	for i := range 10 {
		acquire(fmt.Sprintf("warm-%d", i))
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO lease_tokens (cluster_user_id, key, token)
		SELECT $1, 'grown-' || g, 1 FROM generate_series(1, 20000) g`, u.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, `ROLLBACK`) //nolint:errcheck // the test's own transaction
	for i := range 10 {
		acquire(fmt.Sprintf("new-%d", i))
	}
	acquire("grown-7") // an existing key: the token is bumped
	var seqScans, seqRead int64
	if err := conn.QueryRowContext(ctx, `SELECT coalesce(sum(seq_scan), 0), coalesce(sum(seq_tup_read), 0)
		FROM pg_stat_xact_user_tables WHERE relname = 'lease_tokens'`).Scan(&seqScans, &seqRead); err != nil {
		t.Fatal(err)
	}
	if seqScans != 0 {
		t.Fatalf("11 acquisitions scanned lease_tokens %d times (%d rows read): the key's row must be found through the primary key", seqScans, seqRead)
	}
}

// TestBatchesFindLeasesThroughTheIndex: the acquire, release and keepalive
// batch statements, prepared on a session while leases held 100 rows (a page or
// three) and run often enough there for Postgres to settle on a generic
// plan, must still find their leases through the primary key once the
// table has filled with the dead rows of released leases. As plain
// prepared statements (before migration 000031) their generic plan was a
// hash join over a sequential scan of the whole table: bench-http's phase
// l paid one per release batch. The acquire function's cached plan of its
// read of the key's live lease was a sequential scan too (before 000032).
func TestBatchesFindLeasesThroughTheIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	u := dbtest.NewTenant(t, db, "")
	live := func(prefix string, n int) []string {
		t.Helper()
		var ids []string
		if err := db.SelectContext(ctx, &ids, `INSERT INTO leases (cluster_user_id, key, token, ttl_ms, acquired_at, expires_at)
			SELECT $1, $2 || g, 1, 3600000, now(), now() + interval '1 hour' FROM generate_series(1, $3) g RETURNING id`, u.ID, prefix, n); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	warm := live("warm-", 100)
	if _, err := db.ExecContext(ctx, `ANALYZE leases`); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // after the statements' Close
	// prepare prepares a batch statement on conn, the session under test.
	prepare := func(query string) *sql.Stmt {
		t.Helper()
		stmt, err := conn.PrepareContext(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stmt.Close() })
		return stmt
	}
	acquire, release, keepalive := prepare(leases.AcquireSQL), prepare(leases.ReleaseSQL), prepare(leases.KeepaliveSQL)
	acquired := 0
	run := func(ids []string) {
		t.Helper()
		tenants := make(pq.StringArray, len(ids))
		for i := range tenants {
			tenants[i] = u.ID
		}
		// An acquisition of a new key per id, and one of warm-1 (held,
		// or released by an earlier run and taken again).
		keys := pq.StringArray{"warm-1"}
		for range ids {
			acquired++
			keys = append(keys, fmt.Sprintf("acq-%d", acquired))
		}
		acqTenants, holders := make(pq.StringArray, len(keys)), make(pq.StringArray, len(keys))
		ttls, waits := make(pq.Int64Array, len(keys)), make(pq.BoolArray, len(keys))
		for i := range keys {
			acqTenants[i], holders[i], ttls[i] = u.ID, "h", 60000
		}
		rows, err := acquire.QueryContext(ctx, acqTenants, keys, holders, ttls, waits)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
		rows, err = keepalive.QueryContext(ctx, pq.StringArray(ids), tenants)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if rows, err = release.QueryContext(ctx, pq.StringArray(ids), tenants, leases.NotifyChan); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	// Ten batches of ten on the small table: after five runs Postgres
	// may keep a prepared statement's generic plan.
	for i := range 10 {
		run(warm[10*i : 10*i+10])
	}
	// The table grows by 20,000 dead rows (released leases, no vacuum).
	live("dead-", 20000)
	if _, err := db.ExecContext(ctx, `DELETE FROM leases WHERE key LIKE 'dead-%'`); err != nil {
		t.Fatal(err)
	}
	ids := live("now-", 10)
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, `ROLLBACK`) //nolint:errcheck // the test's own transaction
	run(ids)
	var seqScans int64
	if err := conn.QueryRowContext(ctx, `SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables WHERE relname = 'leases'`).Scan(&seqScans); err != nil {
		t.Fatal(err)
	}
	if seqScans != 0 {
		t.Fatalf("an acquire, a keepalive and a release batch scanned leases %d times: leases must be found by their ids through the primary key", seqScans)
	}
	var left int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM leases WHERE key LIKE 'now-%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("leases left after the release batch: %d, %v", left, err)
	}
}

// TestAcquireDoesNotTakeOverALeaseKeptAliveMeanwhile forces the race of
// an acquisition with a keepalive of a lease that is expiring: the
// acquisition reads the lease as expired, then the keepalive, which found
// it valid an instant before, commits. The acquisition must answer held,
// leave the kept-alive lease and its token as they are, and not burn a
// token (the holder's fenced writes stay admitted). Before migration
// 000033 it took the row over: two valid holders (make test-chaos's
// Porcupine check found it).
func TestAcquireDoesNotTakeOverALeaseKeptAliveMeanwhile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := dbtest.NewTenant(t, e.db, "")
	l1, err := e.svc.Acquire(ctx, alice.ID, req("k"))
	if err != nil {
		t.Fatal(err)
	}
	// The committed version: expired. The keepalive's, not committed yet:
	// valid for an hour (a keepalive that judged the lease valid just
	// before its expiry, and commits after the acquisition read it).
	e.expire(t, alice.ID, "k")
	keepalive, pid := dbtest.BeginWithPID(t, e.db)
	if _, err := keepalive.ExecContext(ctx, `UPDATE leases SET expires_at = clock_timestamp() + interval '1 hour' WHERE id = $1`, l1.ID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   leases.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := e.svc.Acquire(ctx, alice.ID, req("k"))
		done <- result{l, err}
	}()
	// The acquisition read the lease as expired and waits for the
	// keepalive's row lock at its takeover.
	dbtest.WaitUntilBlockedAny(t, e.db, pid)
	if err := keepalive.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err == nil {
		t.Fatalf("acquired %+v over a lease kept alive meanwhile (token %d): two valid holders", r.l, l1.FencingToken)
	}
	wantCode(t, r.err, repolock.ELeaseHeld)
	var id string
	var token, issued int64
	if err := e.db.QueryRowxContext(ctx, `SELECT l.id, l.token, t.token FROM leases l JOIN lease_tokens t USING (cluster_user_id, key)
		WHERE l.cluster_user_id = $1 AND l.key = 'k' AND l.expires_at > clock_timestamp()`, alice.ID).Scan(&id, &token, &issued); err != nil {
		t.Fatal(err)
	}
	if id != l1.ID || token != l1.FencingToken || issued != l1.FencingToken {
		t.Fatalf("after the refused takeover: lease %s token %d, tokens issued %d; want lease %s token %d, issued %d",
			id, token, issued, l1.ID, l1.FencingToken, l1.FencingToken)
	}
	if _, err := e.svc.Keepalive(ctx, alice.ID, l1.ID); err != nil {
		t.Fatalf("the holder's next keepalive: %v", err)
	}
}

// TestBatchesLockLeasesInKeyOrder forces the interleaving in which a
// release or keepalive batch and an acquisition batch that waits would
// deadlock if they locked leases in different orders. The acquisition
// batch works in (tenant, key) order: it marks the held lease of a-N
// wanted (a row lock), then waits for the token row of b, which another
// transaction holds. The other batch names two leases whose ids are in
// the opposite order to their keys: locking by id, it would lock c-N's
// lease and then wait for a-N's, while the acquisition, once b is free,
// waits for c-N's: a deadlock (40P01 after deadlock_timeout). Migration
// 000034 makes the release and keepalive batches write (and so lock) their
// leases in (tenant, key) order, as the acquisitions do: the batch waits
// for a-N's lease before it locks c-N's, and both batches succeed, the
// other one deleting or keeping alive both leases.
func TestBatchesLockLeasesInKeyOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, query string
		args        func(ids, tenants pq.StringArray) []any
	}{
		{"release", leases.ReleaseSQL, func(ids, tenants pq.StringArray) []any { return []any{ids, tenants, leases.NotifyChan} }},
		{"keepalive", leases.KeepaliveSQL, func(ids, tenants pq.StringArray) []any { return []any{ids, tenants} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			u := dbtest.NewTenant(t, e.db, "")
			// b's token row exists, so that a transaction can hold it.
			b, err := e.svc.Acquire(ctx, u.ID, req("b"))
			if err != nil {
				t.Fatal(err)
			}
			if err := e.svc.Release(ctx, u.ID, b.ID); err != nil {
				t.Fatal(err)
			}
			// Two held leases, a-N < c-N by key and c-N's id < a-N's.
			var first, last, aKey, cKey string
			for n := 0; first == ""; n++ {
				aKey, cKey = fmt.Sprintf("a-%d", n), fmt.Sprintf("c-%d", n)
				la, err := e.svc.Acquire(ctx, u.ID, req(aKey))
				if err != nil {
					t.Fatal(err)
				}
				lc, err := e.svc.Acquire(ctx, u.ID, req(cKey))
				if err != nil {
					t.Fatal(err)
				}
				if lc.ID < la.ID {
					first, last = lc.ID, la.ID
				}
			}
			hold, _ := dbtest.BeginWithPID(t, e.db)
			if _, err := hold.ExecContext(ctx, `SELECT token FROM lease_tokens WHERE cluster_user_id = $1 AND key = 'b' FOR UPDATE`, u.ID); err != nil {
				t.Fatal(err)
			}
			session := func() (*sql.Conn, int) {
				t.Helper()
				conn, err := e.db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				var pid int
				if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					t.Fatal(err)
				}
				return conn, pid
			}
			// run runs a batch statement on conn in a goroutine and
			// reports its rows' count and error on the returned channel.
			type outcome struct {
				rows int
				err  error
			}
			run := func(conn *sql.Conn, query string, args ...any) (<-chan outcome, func() bool) {
				done := make(chan outcome, 1)
				var finished atomic.Bool
				go func() {
					defer finished.Store(true)
					rows, err := conn.QueryContext(ctx, query, args...)
					if err != nil {
						done <- outcome{err: err}
						return
					}
					n := 0
					for rows.Next() {
						n++
					}
					rows.Close()
					done <- outcome{n, rows.Err()}
				}()
				return done, finished.Load
			}
			acqConn, acqPID := session()
			keys := pq.StringArray{aKey, "b", cKey}
			tenants := pq.StringArray{u.ID, u.ID, u.ID}
			acquired, acqFinished := run(acqConn, leases.AcquireSQL, tenants, keys, pq.StringArray{"w", "w", "w"},
				pq.Int64Array{60000, 60000, 60000}, pq.BoolArray{true, true, true})
			// The acquisition marked a-N's lease wanted and waits for b.
			dbtest.WaitUntilBlocked(t, e.db, acqPID, acqFinished)
			otherConn, otherPID := session()
			other, otherFinished := run(otherConn, tc.query, tc.args(pq.StringArray{first, last}, pq.StringArray{u.ID, u.ID})...)
			dbtest.WaitUntilBlocked(t, e.db, otherPID, otherFinished)
			if err := hold.Commit(); err != nil {
				t.Fatal(err)
			}
			a, o := <-acquired, <-other
			if a.err != nil || o.err != nil {
				t.Fatalf("the acquisition batch: %v; the %s batch: %v (40P01 is a deadlock: the batches locked leases in different orders)", a.err, tc.name, o.err)
			}
			if a.rows != 3 || o.rows != 2 {
				t.Fatalf("the acquisition batch answered %d rows (want 3), the %s batch %d (want 2)", a.rows, tc.name, o.rows)
			}
		})
	}
}
