package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
)

// TestManagedLease: Lease keeps itself alive past its TTL, its Client
// carries its token, Release frees the key; a lease taken away (here
// released behind its back) closes Done with ErrLeaseLost at the next
// keepalive.
func TestManagedLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	alice := e.tenant("alice")
	const ttl = time.Second

	l, err := alice.Lease(ctx, client.AcquireLeaseRequest{Key: "cron/nightly", TTL: ttl, Holder: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != 1 || l.Client() == nil {
		t.Fatalf("lease %+v", l.State())
	}
	// Kept alive: after three TTLs it still holds the key. (The wait is
	// the subject of the test: the keepalives must outlive the TTL.)
	time.Sleep(3 * ttl)
	select {
	case <-l.Done():
		t.Fatalf("lost while kept alive: %v", l.Err())
	default:
	}
	if _, err := alice.AcquireLease(ctx, client.AcquireLeaseRequest{Key: "cron/nightly", TTL: ttl}); !client.IsLeaseHeld(err) {
		t.Fatalf("acquire of a kept-alive lease: %v, want lease_held", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if !errors.Is(l.Err(), client.ErrLeaseReleased) {
		t.Fatalf("Err after Release = %v", l.Err())
	}

	// Lost: the lease is released behind the holder's back.
	l2, err := alice.Lease(ctx, client.AcquireLeaseRequest{Key: "cron/nightly", TTL: ttl})
	if err != nil || l2.Token() != 2 {
		t.Fatalf("second lease: %v", err)
	}
	if err := alice.ReleaseLease(ctx, l2.State().LeaseID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l2.Done():
	case <-time.After(time.Minute):
		t.Fatal("Done not closed after the lease was lost")
	}
	if !errors.Is(l2.Err(), client.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l2.Err())
	}
	if err := l2.Release(ctx); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("Release of a lost lease = %v", err)
	}

	// The context given to Lease ends: Done closes, Release still frees
	// the key.
	lctx, cancel := context.WithCancel(ctx)
	l3, err := alice.Lease(lctx, client.AcquireLeaseRequest{Key: "cron/nightly", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-l3.Done()
	if !errors.Is(l3.Err(), context.Canceled) {
		t.Fatalf("Err after cancel = %v", l3.Err())
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.AcquireLease(ctx, client.AcquireLeaseRequest{Key: "cron/nightly", TTL: ttl}); err != nil {
		t.Fatalf("key not freed: %v", err)
	}
}
