package kv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/leases"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/repostate/kv"
)

// grant acquires guard's lease for tenant and lets it expire at once (by
// the database's clock), so that the next grant succeeds: it returns the
// token issued.
func grant(t *testing.T, db *database.DB, ls *leases.Service, tenant, guard string) int64 {
	t.Helper()
	l, err := ls.Acquire(context.Background(), tenant, leases.AcquireRequest{Key: guard, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(context.Background(), `UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, l.ID); err != nil {
		t.Fatal(err)
	}
	return l.FencingToken
}

func TestFencedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := leases.New(db, locks.New(db, locks.Fixed(normalize.Default()), nil), nil)
	store := kv.NewPostgres(db)
	tenant := dbtest.NewTenant(t, db, "").ID
	pk, key := []byte("p"), []byte("k")
	const guard = "repositories/r/branches/main"
	f := func(tok int64) kv.Fence { return kv.Fence{Tenant: tenant, Guard: guard, Token: tok} }

	t1 := grant(t, db, ls, tenant, guard)
	p1, err := store.SetIfFenced(ctx, pk, key, []byte("v1"), nil, f(t1))
	if err != nil {
		t.Fatal(err)
	}
	// A newer lease is granted: the old holder's write is refused before
	// the new holder wrote anything.
	t2 := grant(t, db, ls, tenant, guard)
	if _, err := store.SetIfFenced(ctx, pk, key, []byte("stale"), p1, f(t1)); !repolock.IsCode(err, repolock.EFenced) {
		t.Fatalf("stale write: %v, want fenced", err)
	}
	if err := store.DeleteIfFenced(ctx, pk, key, p1, f(t1)); !repolock.IsCode(err, repolock.EFenced) {
		t.Fatalf("stale delete: %v, want fenced", err)
	}
	// A token never issued is bad input, not a way to fence others out.
	if _, err := store.SetIfFenced(ctx, pk, key, []byte("future"), p1, f(t2+1)); !repolock.IsCode(err, repolock.EInvalid) {
		t.Fatalf("unissued token: %v, want invalid_argument", err)
	}
	if _, err := store.SetIfFenced(ctx, pk, key, []byte("other guard"), p1, kv.Fence{Tenant: tenant, Guard: "nope", Token: 1}); !repolock.IsCode(err, repolock.EInvalid) {
		t.Fatalf("token of a key never leased: %v, want invalid_argument", err)
	}
	if v, _, err := store.Get(ctx, pk, key); err != nil || string(v) != "v1" {
		t.Fatalf("value after refused writes = %q, %v", v, err)
	}
	// The current holder writes; the predicate still applies.
	p2, err := store.SetIfFenced(ctx, pk, key, []byte("v2"), p1, f(t2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.SetIfFenced(ctx, pk, key, []byte("v3"), p1, f(t2)); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("old predicate: %v, want predicate failed", err)
	}
	if err := store.DeleteIfFenced(ctx, pk, key, p2, f(t2)); err != nil {
		t.Fatal(err)
	}
	var seen int64
	if err := db.GetContext(ctx, &seen, `SELECT token FROM kv_fences WHERE cluster_user_id = $1 AND guard = $2`, tenant, guard); err != nil || seen != t2 {
		t.Fatalf("kv_fences = %d, %v; want %d", seen, err, t2)
	}
	for _, bad := range []kv.Fence{{Tenant: tenant, Guard: guard}, {Tenant: tenant, Token: 1}, {Guard: guard, Token: 1}} {
		if _, err := store.SetIfFenced(ctx, pk, key, []byte("x"), nil, bad); !repolock.IsCode(err, repolock.EInvalid) {
			t.Errorf("fence %+v: %v, want invalid_argument", bad, err)
		}
	}
}

// TestFencedWritesConcurrent: writers holding every token ever issued for
// a guard write at once; only the holder of the last one is admitted,
// whatever the order their statements run in.
func TestFencedWritesConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := leases.New(db, locks.New(db, locks.Fixed(normalize.Default()), nil), nil)
	store := kv.NewPostgres(db)
	tenant := dbtest.NewTenant(t, db, "").ID
	const guard, writers = "sync/hosts/h", 12
	tokens := make([]int64, writers)
	for i := range tokens {
		tokens[i] = grant(t, db, ls, tenant, guard)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted []int64
	)
	start := make(chan struct{})
	for i, tok := range tokens {
		wg.Go(func() {
			<-start
			_, err := store.SetIfFenced(ctx, []byte("p"), fmt.Appendf(nil, "k%d", i), []byte("v"), nil, kv.Fence{Tenant: tenant, Guard: guard, Token: tok})
			switch {
			case err == nil:
				mu.Lock()
				admitted = append(admitted, tok)
				mu.Unlock()
			case repolock.IsCode(err, repolock.EFenced):
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(admitted) != 1 || admitted[0] != tokens[writers-1] {
		t.Fatalf("admitted tokens %v, want only %d", admitted, tokens[writers-1])
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT count(*) FROM kv WHERE partition_key = 'p'`); err != nil || n != 1 {
		t.Fatalf("%d rows written, want 1 (%v)", n, err)
	}
}
